"""What the job-library tests share: a database per test, an application in its own process
(:mod:`tests.owntable.job_apps`, ``node/apps.mjs``), the node packages, the libpq environment
for node's driver, and the checks of a capture against what the application did."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from loadgen.population import from_trace
from metrics.extensions import MEASUREMENT_EXTENSIONS

ROOT = Path(__file__).resolve().parents[2]
NODE_DIR = Path(__file__).with_name("node")
BENCH = str(Path(sys.executable).parent / "bench")
READY_TIMEOUT_S = 120.0


def bench(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([BENCH, *args], capture_output=True, text=True, timeout=timeout)


def ok(res: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return res


def create_database(admin_dsn: str, prefix: str) -> str:
    """A database of the test's own (the libraries' tables have fixed names), with the
    measurement extensions inspect reads."""
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    dsn = make_conninfo(admin_dsn, dbname=name)
    with psycopg.connect(dsn, autocommit=True) as conn:
        for ext in MEASUREMENT_EXTENSIONS:
            conn.execute(sql.SQL("CREATE EXTENSION IF NOT EXISTS {}").format(sql.Identifier(ext)))
    return dsn


def drop_database(admin_dsn: str, dsn: str) -> None:
    name = conninfo_to_dict(dsn)["dbname"]
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


# -- the libpq environment, for node's pg driver -----------------------------------------------


def _passfile_password(params: dict[str, str]) -> str | None:
    """The password libpq would take from its passfile (``passfile``, ``PGPASSFILE`` or
    ``~/.pgpass``: host:port:database:user:password, ``*`` matching anything)."""
    path = Path(params.get("passfile") or os.environ.get("PGPASSFILE") or Path.home() / ".pgpass")
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None
    want = [
        params.get("host", "localhost"),
        str(params.get("port", "5432")),
        params.get("dbname", ""),
        params.get("user", ""),
    ]
    for line in lines:
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        fields, cur, esc = [], "", False
        for ch in line:
            if esc:
                cur, esc = cur + ch, False
            elif ch == "\\":
                esc = True
            elif ch == ":" and len(fields) < 4:
                fields.append(cur)
                cur = ""
            else:
                cur += ch
        fields.append(cur)
        if len(fields) == 5 and all(f == "*" or f == w for f, w in zip(fields[:4], want)):
            return fields[4]
    return None


def libpq_env(dsn: str) -> dict[str, str]:
    """``dsn`` as the PG* variables node's pg driver reads, the password (from the DSN or the
    libpq passfile) as PGPASSWORD: in the child's environment, never on its command line."""
    p = conninfo_to_dict(dsn)
    env = {
        "PGHOST": p.get("host", "localhost"),
        "PGPORT": str(p.get("port", "5432")),
        "PGDATABASE": p.get("dbname", ""),
        "PGUSER": p.get("user", ""),
    }
    password = p.get("password") or _passfile_password(p)
    if password:
        env["PGPASSWORD"] = password
    return env


# -- the node packages -------------------------------------------------------------------------


def node_packages() -> Path:
    """``npm ci`` into tests/owntable/node once per lock file (its cache inside the directory,
    both gitignored), under a file lock so concurrent sessions install once."""
    stamp = NODE_DIR / "node_modules" / ".installed-lock"
    lock = (NODE_DIR / "package-lock.json").read_text()
    with open(NODE_DIR / ".install.lock", "w") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)
        if not (stamp.is_file() and stamp.read_text() == lock):
            subprocess.run(
                ["npm", "ci", "--cache", str(NODE_DIR / ".npm-cache"), "--prefer-offline", "--no-audit", "--no-fund"],
                cwd=NODE_DIR,
                check=True,
                capture_output=True,
                timeout=600,
            )
            stamp.write_text(lock)
    return NODE_DIR


# -- an application in its own process ---------------------------------------------------------


class App:
    """A polling application in a child process: started, waited for until its triggers are
    armed, stopped with SIGTERM; what it did comes back from its JSON file."""

    def __init__(self, cmd: list[str], env: dict[str, str], cwd: Path, out: Path) -> None:
        self.out = out
        self.log = out.with_suffix(".log")
        self._log = open(self.log, "w")
        self.proc = subprocess.Popen(
            cmd, cwd=cwd, env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=self._log, text=True
        )
        deadline = time.time() + READY_TIMEOUT_S
        while time.time() < deadline:
            line = self.proc.stdout.readline()
            if line.strip() == "ready":
                self.ready_at = time.time()
                return
            if not line and self.proc.poll() is not None:
                break
        self.stop()
        raise AssertionError(f"{cmd[:4]} did not arm its triggers: {self.log.read_text()[-3000:]}")

    def figures(self) -> dict:
        try:
            return json.loads(self.out.read_text())
        except (OSError, ValueError):
            return {}

    def wait_fires(self, fires: int, timeout_s: float) -> None:
        """Until the application has run ``fires`` jobs (it rewrites its figures every second)."""
        deadline = time.time() + timeout_s
        while time.time() < deadline and self.figures().get("fires", 0) < fires:
            if self.proc.poll() is not None:
                raise AssertionError(f"the application exited: {self.log.read_text()[-3000:]}")
            time.sleep(0.5)

    def stop(self) -> dict:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return json.loads(self.out.read_text()) if self.out.is_file() else {}


def python_app(library: str, dsn: str, out: Path, triggers: int, every: str) -> App:
    cmd = [sys.executable, "-m", "tests.owntable.job_apps", "--library", library]
    cmd += ["--triggers", str(triggers), "--every", every, "--out", str(out)]
    return App(cmd, {"TIMERBENCH_APP_DSN": dsn}, ROOT, out)


def node_app(library: str, dsn: str, out: Path, triggers: int, every: str, tenants: int = 12) -> App:
    cmd = ["node", "apps.mjs", library, str(triggers), every, str(tenants), str(out)]
    return App(cmd, libpq_env(dsn), node_packages(), out)


# -- the checks -----------------------------------------------------------------------------


def armed_while(did: dict, start: float, end: float) -> list[float]:
    """What the application did while captured: per trigger, the median gap between the due
    times of its jobs (as the library stored them) due between ``start`` and ``end``; the
    planned interval for one with fewer than two there. Sorted."""
    out = []
    for dues in did["dues"].values():
        seen = [d for d in dues if start <= d <= end]
        if len(seen) < 2:
            seen = dues  # a trigger the application ran less than twice then: its whole run
        gaps = [b - a for a, b in zip(seen, seen[1:])]
        out.append(statistics.median(gaps))
    assert len(out) == did["triggers"], (len(out), did["triggers"])  # every trigger ran twice
    return sorted(out)


def check_capture(out_dir: Path, did: dict, window: tuple[float, float] | None = None) -> dict:
    """``bench capture`` found every trigger once, each interval within 10% of the
    application's, its tenants, and a workload whose fire rate is the application's within 5%
    (the application's figures over the capture's window: PgQueuer's delays are relative to the
    database's now(), so its gaps carry the enqueue's latency, which grows with the load)."""
    captured = json.loads((out_dir / "capture.json").read_text())
    if window is None:  # the watch: rows pending then were due up to one interval later
        w = captured["watch"]
        window = (w["first_read_at_s"], w["last_read_at_s"] + LONGEST_S)
    armed = armed_while(did, *window)
    did = {**did, "intervals_s": armed, "rate_per_s": sum(1.0 / a for a in armed)}
    population = from_trace(out_dir / "trace.csv")
    assert captured["triggers"] == did["triggers"] == len(population), (captured["triggers"], did["triggers"])
    assert captured["interval_sources"]["rearms"] == did["triggers"], captured["interval_sources"]
    got = sorted(float(x) for x in population.interval_s)
    worst = max(zip(got, did["intervals_s"]), key=lambda gw: abs(gw[0] - gw[1]) / gw[1])
    assert abs(worst[0] - worst[1]) / worst[1] <= 0.10, ("captured, application's:", worst, got, did["intervals_s"])
    assert captured["tenants"] == did["tenants"]
    sizes = sorted((population.tenants.count(t) for t in set(population.tenants)), reverse=True)
    assert sizes == did["tenant_sizes"]
    assert population.rate_per_s() == pytest.approx(did["rate_per_s"], rel=0.05), (
        population.rate_per_s(),
        did["rate_per_s"],
    )
    text = (out_dir / "trace.csv").read_text()
    assert "trigger-" not in text and "tenant-" not in text  # keyed hashes only
    return captured


def findings(out_dir: Path) -> dict[str, dict]:
    report = json.loads((out_dir / "inspect.json").read_text())
    return {f["key"]: f for f in report["diagnosis"]}


def check_signatures(found: dict[str, dict], expected: dict[str, bool | None]) -> None:
    """The library signatures inspect named, each shown or not as expected (the figures on failure)."""
    got = {k: found[k]["shown"] for k in expected}
    assert got == expected, {k: (found[k]["shown"], found[k]["figure"]) for k in expected}


# Every application's plan: tens of triggers every few seconds, so a test takes seconds. The
# capture watches two longest intervals, so every trigger shows three due times or more.
TRIGGERS = 60
EVERY = "3..6"
LONGEST_S = 6
INSPECT_WATCH = "4s"
CAPTURE_WATCH = f"{2 * LONGEST_S + 2}s"  # two intervals: a row missed between two samples is outvoted


def inspect_and_capture(
    preset: str, dsn: str, app: App, tmp_path: Path, tenant: str, expected: dict[str, bool | None]
) -> dict[str, dict]:
    """Once the application has run three times as many jobs as it has triggers (so finished rows
    outnumber pending ones where the library keeps them): ``bench inspect --preset`` then ``bench
    capture --preset`` with the tenant's path: the capture checked against what the application
    did, the library signatures against ``expected``; inspect's findings returned."""
    try:
        app.wait_fires(3 * app.figures()["triggers"], timeout_s=20 * LONGEST_S)
        ins = ok(
            bench("inspect", "--dsn", dsn, "--preset", preset, "--watch", INSPECT_WATCH, "-o", str(tmp_path / "i"))
        )
        cap = ok(
            bench(
                "capture",
                "--dsn",
                dsn,
                "--preset",
                preset,
                "--map",
                f"tenant={tenant}",
                "--watch",
                CAPTURE_WATCH,
                "-o",
                str(tmp_path / "c"),
            )
        )
        # the application runs on until every job the capture saw pending has run (and so is
        # among the due times it reports)
        time.sleep(LONGEST_S + 2)
    finally:
        did = app.stop()
    assert did["fires"] > did["triggers"], did  # every trigger fired and re-armed
    captured = check_capture(tmp_path / "c", did)
    print(
        f"{preset}: app {did['triggers']} triggers, {did['rate_per_s']:.2f} fires/s, {did['tenants']} tenants; "
        f"capture {captured['triggers']} triggers, {captured['rate_per_s']:.2f} fires/s, {captured['tenants']} "
        f"tenants\n{ins.stdout}\n{cap.stdout}"
    )
    found = findings(tmp_path / "i")
    check_signatures(found, expected)
    assert captured["preset"]["name"] == preset and captured["row_per_fire"] is True
    return found
