"""A child ``bench run``: one run in its own process, its output streamed, its directory found.

``bench compare`` and ``bench sweep`` run each backend (and each rate) this way, so one run's
state (its event loop, the scheduler's connections, a crash) never leaks into the next.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from harness.stack import redact_argv
from metrics import rundir

RUN_DIR_LINE = "run directory: "  # what `bench run` prints last
TAIL_LINES = 40


@dataclass
class ChildRun:
    command: list[str]  # as shown: `bench run ...`, the DSN without its password
    exit_code: int
    run_dir: Path | None  # None when the run made no directory
    tail: list[str] = field(default_factory=list)  # the output's last lines, for a failure report
    interrupted: bool = False  # Ctrl-C reached the run (it still wrote its directory)


def bench_run(scheduler: str, out_dir: Path, args: list[str], echo: Callable[[str], None], label: str = "") -> ChildRun:
    """``bench run --scheduler NAME --out OUT ARGS``, streaming its output to ``echo`` after a
    line ``== <label><command>``."""
    cmd = [sys.executable, "-m", "bench.cli", "run", "--scheduler", scheduler, "--out", str(out_dir), *args]
    shown = ["bench", *redact_argv(cmd[3:])]
    echo(f"== {label}{' '.join(shown)}\n")
    before = run_dirs(out_dir)
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    said: Path | None = None
    interrupted = False
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    assert proc.stdout is not None

    def consume(show: bool) -> None:
        nonlocal said
        for line in proc.stdout:
            if show:
                echo(line)
            tail.append(line.rstrip("\n"))
            if line.startswith(RUN_DIR_LINE):
                said = Path(line[len(RUN_DIR_LINE) :].strip())

    try:
        consume(True)
    except KeyboardInterrupt:
        # Ctrl-C reached the run too (same process group): let it write its directory.
        interrupted = True
        consume(False)
    code = proc.wait()
    # rich may wrap a long path when piped: trust the printed one only if it is a run directory
    made = said if said is not None and (said / rundir.CONFIG).exists() else new_run_dir(out_dir, before, scheduler)
    if made is not None and not (made / rundir.CONFIG).exists():
        made = None
    return ChildRun(shown, code, made, list(tail), interrupted)


def failed_run(scheduler: str, child: ChildRun):
    """The report's record of a child run that did not finish (:class:`reports.report.FailedRun`)."""
    from reports.report import FailedRun

    return FailedRun(
        scheduler, child.command, child.exit_code, "\n".join(child.tail), str(child.run_dir) if child.run_dir else None
    )


def run_dirs(out: Path) -> set[Path]:
    return {p for p in out.iterdir() if p.is_dir()} if out.is_dir() else set()


def new_run_dir(out: Path, before: set[Path], scheduler: str) -> Path | None:
    """The run directory ``bench run`` created for ``scheduler`` (``<stamp>-<scheduler>[-n]``)."""
    new = [
        p
        for p in run_dirs(out) - before
        if p.name.split("-", 2)[-1] == scheduler or p.name.split("-", 2)[-1].rsplit("-", 1)[0] == scheduler
    ]
    return max(new, key=lambda p: p.stat().st_mtime) if new else None
