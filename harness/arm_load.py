"""``bench run --arm-load RATE``: locust, in its own process, arming extra timers through a node's
``PUT /timers`` beside the run (gevent and asyncio do not mix in one process).

Its CSVs, log and exact totals land in the run directory (:mod:`metrics.rundir` names them).
"""

from __future__ import annotations

import asyncio
import json
import math
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from metrics import rundir

LOCUST_STOP_S = 15.0
ARM_LOAD_BATCH = 10  # timers per PUT /timers from locust
LOCUST_USERS = 4


class ArmLoad:
    def __init__(
        self,
        run_dir: Path,
        rate_per_s: float,
        env: dict[str, str],
        say: Callable[[str], None],
        users: int = LOCUST_USERS,
    ) -> None:
        self.run_dir = run_dir
        self.rate_per_s = rate_per_s
        self.env = env
        self.say = say
        self.users = users
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self, url: str, run_time_s: float) -> None:
        from loadgen import population

        locustfile = Path(population.__file__).parent / "locustfile.py"
        argv = [
            sys.executable,
            "-m",
            "locust",
            "-f",
            str(locustfile),
            "--headless",
            "-H",
            url,
            "--csv",
            str(self.run_dir / rundir.LOCUST_CSV_PREFIX),
            "-u",
            str(self.users),
            "-r",
            str(self.users),
            "-t",
            f"{max(1, int(math.ceil(run_time_s)))}s",
            "--only-summary",
            "--stop-timeout",
            "2",
            "--arm-rate",
            f"{self.rate_per_s:g}",
            "--arm-batch",
            str(ARM_LOAD_BATCH),
            "--arm-summary",
            str(self.run_dir / rundir.LOCUST_SUMMARY),
        ]
        env = dict(self.env)
        env.pop("TIMERBENCH_DSN", None)  # locust talks HTTP only
        with open(self.run_dir / rundir.LOCUST_LOG, "ab") as log:
            self.proc = await asyncio.create_subprocess_exec(
                *argv, stdout=log, stderr=asyncio.subprocess.STDOUT, env=env, start_new_session=True
            )
        self.say(
            f"locust: arming {self.rate_per_s:g} timers/s through {url}/timers "
            f"({self.users} users, pid {self.proc.pid})"
        )

    async def stop(self) -> None:
        """Idempotent; locust usually ends by itself (its -t), else SIGTERM (it writes its CSVs)."""
        p = self.proc
        if p is None or p.returncode is not None:
            return
        try:
            await asyncio.wait_for(asyncio.shield(p.wait()), 1.0)
        except TimeoutError:
            p.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(p.wait(), LOCUST_STOP_S)
            except TimeoutError:
                p.kill()
                await p.wait()

    def summary(self) -> tuple[dict[str, Any], list[str]]:
        """(``summary.json``'s ``arm_load``, warnings)."""
        arm = locust_summary(self.run_dir, self.rate_per_s, ARM_LOAD_BATCH)
        warnings = []
        if arm.get("failures"):
            warnings.append(f"locust: {arm['failures']} failed PUT /timers requests")
        if "error" in arm:
            warnings.append(f"locust: {arm['error']}")
        else:
            rate = "-" if arm["timers_per_s"] is None else f"{arm['timers_per_s']:,.0f}"
            self.say(
                f"arm load (locust): {arm['timers_armed']:,} timers in {arm['requests']:,} "
                f"PUT /timers, {rate}/s against {self.rate_per_s:g}/s, p99 {arm['p99_ms']} ms"
            )
        return arm, warnings


def locust_summary(run_dir: Path, target_rate: float | None, batch: int) -> dict[str, Any]:
    """What locust armed: its exit totals (``locust_summary.json``), and where its CSVs are."""
    out: dict[str, Any] = {
        "target_timers_per_s": target_rate,
        "batch": batch,
        "csv_files": sorted(p.name for p in run_dir.glob(f"{rundir.LOCUST_CSV_PREFIX}_*.csv")),
    }
    path = run_dir / rundir.LOCUST_SUMMARY
    if not path.exists():
        out["error"] = f"locust wrote no {rundir.LOCUST_SUMMARY} (see {rundir.LOCUST_LOG})"
        return out
    data = json.loads(path.read_text())
    out.update(
        {k: data.get(k) for k in ("requests", "failures", "timers_armed", "elapsed_s", "median_ms", "p99_ms", "max_ms")}
    )
    elapsed = data.get("elapsed_s") or 0.0
    out["timers_per_s"] = data["timers_armed"] / elapsed if elapsed > 0 else None
    return out
