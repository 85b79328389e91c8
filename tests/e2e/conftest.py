"""Fixtures of the end-to-end tests.

``bench``: the ``bench`` CLI as the tests run it, one subprocess each call. Every call runs the
installed console script (``.venv/bin/bench``) from the repository root, where the embedded
stack's state (``.bench/``) is found, with its output captured as text (unbuffered, so that a run
killed on its timeout still shows what it printed). A test that needs a scheduler which exists
only for it (a deliberately broken one) passes ``register="name=module:Class"``: the CLI then
starts through ``python -c``, which adds that one line to the registry first, in the subprocess
only.

``private_stack``: restarting a server disturbs every test that shares it, so the tests that
restart one (``--fault restart-postgres`` / ``restart-temporal``) run on their **own** Postgres
and Temporal dev server under a temporary home (``harness.stack.Postgres(home)`` /
``TemporalDev(home)``), started once per session, never the shared one. The CLI is pointed at
them with ``TIMERBENCH_HOME`` (so the harness knows them as its embedded servers, the only ones
it will restart), ``TIMERBENCH_DSN`` and ``TIMERBENCH_TEMPORAL``. The private Postgres runs
autovacuum every second (``autovacuum_naptime = 1s``, default 1 min) so that a short test can see
vacuum catch up after a held snapshot is released.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness import stack

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class BenchCLI:
    exe: str = str(Path(sys.executable).parent / "bench")
    cwd: Path = REPO
    timeout_s: float = 240.0

    def argv(self, *args: str, register: str | None = None) -> list[str]:
        if register is None:
            return [self.exe, *args]
        name, _, target = register.partition("=")
        script = (
            f"import sys, schedulers.base as b; b.REGISTRY[{name!r}] = {target!r}; "
            "from bench.cli import main; main(sys.argv[1:])"
        )
        return [sys.executable, "-c", script, *args]

    def __call__(
        self,
        *args: str,
        timeout: float | None = None,
        env: dict[str, str] | None = None,
        register: str | None = None,
        cwd: str | Path | None = None,
    ) -> subprocess.CompletedProcess:
        """Run ``bench ARGS`` to completion. One that outlives ``timeout`` fails the test with
        the end of what it printed (a bare ``TimeoutExpired`` shows none of it)."""
        timeout = self.timeout_s if timeout is None else timeout
        # unbuffered: what a run printed before it was killed on the timeout is kept
        env = {**(os.environ if env is None else env), "PYTHONUNBUFFERED": "1"}
        try:
            return subprocess.run(
                self.argv(*args, register=register),
                cwd=self.cwd if cwd is None else cwd,
                env=env,
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired as exc:
            said = "".join(_text(x) for x in (exc.stdout, exc.stderr))
            raise AssertionError(
                f"bench {' '.join(args[:3])} ... did not finish within {timeout:g} s; it printed:\n{said[-4000:]}"
            ) from None

    def popen(self, *args: str, env: dict[str, str] | None = None, **kwargs) -> subprocess.Popen:
        """Start ``bench ARGS`` and return at once (a server, or a run to interrupt)."""
        return subprocess.Popen(self.argv(*args), cwd=self.cwd, env=env, text=True, **kwargs)


def _text(out: str | bytes | None) -> str:
    if out is None:
        return ""
    return out if isinstance(out, str) else out.decode(errors="replace")


@pytest.fixture(scope="session")
def bench() -> BenchCLI:
    return BenchCLI()


@pytest.fixture(scope="session")
def private_stack(tmp_path_factory):
    home = tmp_path_factory.mktemp("fault-stack")
    pg = stack.Postgres(home)
    temporal = stack.TemporalDev(home)
    try:  # a server that started is stopped even when the next one fails to start
        pg.init()
        with open(pg.data / "postgresql.conf", "a") as f:
            f.write("autovacuum_naptime = 1s\n")  # see the module docstring
        dsn, _ = pg.start()  # a free port: the shared server holds the default one
        address, _ = temporal.start()
        env = {**os.environ, "TIMERBENCH_HOME": str(home), "TIMERBENCH_DSN": dsn, "TIMERBENCH_TEMPORAL": address}
        yield env
    finally:
        temporal.stop()  # the pid file names the server a restart-temporal fault started
        pg.stop()
