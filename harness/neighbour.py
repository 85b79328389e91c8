"""What a scheduler does to the rest of its database: a neighbour workload and long readers.

``--neighbour oltp``: the bundled ``pgbench`` (beside the Postgres binaries, as the ceiling of
:mod:`loadgen.pgbench` finds it) runs its TPC-B-like transaction open-loop (``-R``, default 200
tx/s) against its own tables (``pgbench -i`` in the schema ``<run schema>_n``, so the run's lease
covers it and ``bench env gc`` drops a killed run's copy), on the same server and database as the
scheduler, with its per-transaction latency log (``-l``) in the run directory. It runs twice: alone
before the scheduler's workers start, for the measured window's length (the **baseline**), then
beside the scheduler from the start of arming to the window's end. ``--neighbour-script FILE``
runs a team's own pgbench script in place of the built-in transaction (with the pgbench tables
on its search_path). The figures are :mod:`metrics.neighbour`'s.

pgbench gets its connection through libpq's environment (``PGHOST``, ``PGPORT``, ``PGUSER``,
``PGDATABASE``, ``PGPASSWORD`` / ``PGPASSFILE``, ``PGSSLMODE`` ... derived from the DSN), never
its argv, so no password shows in ``ps`` or in ``config.json``.

``--readers NxDURATION``: N connections, each holding a REPEATABLE READ snapshot that read the
neighbour's tables (the catalogue without a neighbour) for DURATION, staggered by DURATION / N so
one is always open, each opening the next as soon as it lets go, until the readers stop (the end
of the window, or ``stop_at``). Each hold is a line of ``readers.jsonl`` when it ends.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import re
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from harness.errors import UsageError
from metrics import rundir

KINDS = ("oltp",)
DEFAULT_RATE = 200.0  # tx/s
CLIENTS = 4  # pgbench -c: enough that one slow transaction does not hold the schedule back
# pgbench -i -s: one branch (TPC-B's hot row) per client, as pgbench advises: at scale 1 every
# transaction queued on one row lock, and alone at 200 tx/s on 2 loaded cores its p99 was 7.5 s
SCALE = CLIENTS
BASELINE_LEAD_S = 2.0  # the baseline's first seconds (connections, cold cache) are not measured
RUN_MARGIN_S = 2.0  # the neighbour beside the run outlasts the window by this much
SCRIPT_MAX_BYTES = 1 << 20
STOP_S = 10.0
INIT_TIMEOUT_S = 300.0
SUFFIX = "_n"  # the neighbour's schema: the run's schema plus this
# libpq's environment variables for the DSN's keys (https://www.postgresql.org/docs/current/libpq-envars.html)
LIBPQ_ENV = {
    "host": "PGHOST",
    "hostaddr": "PGHOSTADDR",
    "port": "PGPORT",
    "dbname": "PGDATABASE",
    "user": "PGUSER",
    "password": "PGPASSWORD",
    "passfile": "PGPASSFILE",
    "sslmode": "PGSSLMODE",
    "sslrootcert": "PGSSLROOTCERT",
    "sslcert": "PGSSLCERT",
    "sslkey": "PGSSLKEY",
    "connect_timeout": "PGCONNECT_TIMEOUT",
    "service": "PGSERVICE",
    "target_session_attrs": "PGTARGETSESSIONATTRS",
}


@dataclass(frozen=True)
class NeighbourSpec:
    kind: str  # "oltp" (pgbench's tpcb-like) or "script" (--neighbour-script)
    rate_per_s: float
    script: str | None = None
    clients: int = CLIENTS
    scale: int = SCALE

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ReadersSpec:
    count: int
    hold_s: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def pgbench_path() -> Path | None:
    from harness.stack import pg_bin_dir
    from loadgen.pgbench import find_pgbench

    try:
        bin_dir = pg_bin_dir()
    except Exception:
        bin_dir = None
    return find_pgbench(bin_dir)


def check_neighbour(kind: str | None, rate: float | None, script: str | None) -> NeighbourSpec | None:
    """``--neighbour`` / ``--neighbour-rate`` / ``--neighbour-script``, checked in full (the script
    parsed by pgbench) before anything starts; None without a neighbour."""
    if kind is None and script is None:
        if rate is not None:
            raise UsageError("--neighbour-rate needs a neighbour: add --neighbour oltp (or --neighbour-script FILE)")
        return None
    if kind is not None and kind not in KINDS:
        raise UsageError(f"bad --neighbour {kind!r}; choose from: {', '.join(KINDS)} (or give --neighbour-script FILE)")
    rate = DEFAULT_RATE if rate is None else rate
    if not math.isfinite(rate) or rate <= 0:
        raise UsageError(f"bad --neighbour-rate {rate!r}; give a rate above 0 (transactions per second)")
    pgbench = pgbench_path()
    if pgbench is None:
        raise UsageError("--neighbour needs pgbench (beside the Postgres binaries or on PATH); run `make install`")
    if script is None:
        return NeighbourSpec("oltp", float(rate))
    path = Path(script)
    if not path.is_file():
        raise UsageError(f"--neighbour-script {script}: no such file")
    try:
        size = path.stat().st_size
        path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"--neighbour-script {script}: cannot read it ({type(exc).__name__})") from None
    if size > SCRIPT_MAX_BYTES:
        raise UsageError(f"--neighbour-script {script}: {size:,} bytes; a pgbench script of at most 1 MiB")
    if not path.read_text().strip():
        raise UsageError(f"--neighbour-script {script}: empty; give a pgbench script with at least one command")
    problem = script_problem(pgbench, path)
    if problem:
        raise UsageError(f"--neighbour-script {script}: pgbench rejects it: {problem}")
    return NeighbourSpec("script", float(rate), str(path.resolve()))


def script_problem(pgbench: Path, script: Path) -> str | None:
    """pgbench's own complaint about ``script``, or None. pgbench parses every ``-f`` script
    before it connects, so it is pointed at a socket directory that does not exist: a script it
    accepts fails only at the connection."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    with tempfile.TemporaryDirectory() as nowhere:
        argv = [str(pgbench), "-n", "-t", "1", "-f", str(script), "-h", f"{nowhere}/absent", "-p", "1", "x"]
        try:
            res = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"pgbench did not run ({type(exc).__name__})"
    text = res.stderr + res.stdout
    if res.returncode == 0 or "connection to server" in text or "could not create connection" in text:
        return None
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    first = next((ln for ln in lines if "error" in ln), lines[0] if lines else f"exit {res.returncode}")
    return first.removeprefix("pgbench: error: ")


_READERS = re.compile(r"^\s*(\d+)\s*x\s*(.+?)\s*$", re.I)


def parse_readers(text: str | None) -> ReadersSpec | None:
    """``--readers 3x120s``: three readers each holding a snapshot for 120 s."""
    if text is None:
        return None
    from loadgen.rates import parse_duration

    m = _READERS.match(text)
    if not m:
        raise UsageError(f"bad --readers {text!r}; give COUNTxDURATION, e.g. 3x120s")
    count = int(m.group(1))
    try:
        hold = parse_duration(m.group(2))
    except ValueError as exc:
        raise UsageError(f"bad --readers {text!r}: {exc}") from None
    if count < 1 or count > 64:
        raise UsageError(f"bad --readers {text!r}; give between 1 and 64 readers")
    if hold < 1.0:
        raise UsageError(f"bad --readers {text!r}; each reader holds its snapshot for at least 1 s")
    return ReadersSpec(count, float(hold))


def libpq_env(dsn: str) -> dict[str, str]:
    """libpq's environment for ``dsn`` (what pgbench reads when argv names no server)."""
    from psycopg.conninfo import conninfo_to_dict

    info = conninfo_to_dict(dsn)
    return {LIBPQ_ENV[k]: str(v) for k, v in info.items() if k in LIBPQ_ENV and v is not None and v != ""}


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("PG")}


class Neighbour:
    """The neighbour of one run: its tables, the baseline, the run beside the scheduler."""

    def __init__(self, spec: NeighbourSpec, dsn: str, run_dir: Path, schema: str, say: Callable[[str], None]) -> None:
        self.spec = spec
        self.dsn = dsn
        self.dir = Path(run_dir) / rundir.NEIGHBOUR_DIR
        self.schema = schema
        self.say = say
        self.pgbench = pgbench_path()
        self.proc: asyncio.subprocess.Process | None = None
        self.record: dict[str, Any] = {**spec.to_json(), "schema": schema, "baseline": None, "run": None}

    def env(self, name: str) -> dict[str, str]:
        return {
            **_clean_env(),
            **libpq_env(self.dsn),
            "PGOPTIONS": f"-c search_path={self.schema}",
            "PGAPPNAME": f"timerbench-neighbour-{name}",
        }

    async def prepare(self) -> None:
        """The neighbour's schema and pgbench's tables in it (``pgbench -i``)."""
        import psycopg
        from psycopg import sql

        self.dir.mkdir(parents=True, exist_ok=True)
        async with await psycopg.AsyncConnection.connect(self.dsn, autocommit=True, connect_timeout=10) as conn:
            await conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(self.schema)))
        self.say(f"neighbour: pgbench -i -s {self.spec.scale} in schema {self.schema} ...")
        argv = [str(self.pgbench), "-i", "-q", "-s", str(self.spec.scale)]
        with open(self.dir / "pgbench-init.txt", "wb") as log:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdout=log,
                stderr=asyncio.subprocess.STDOUT,
                env=self.env("init"),
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
            try:
                rc = await asyncio.wait_for(proc.wait(), INIT_TIMEOUT_S)
            except BaseException:
                await _end(proc)
                raise
        if rc != 0:
            raise RuntimeError(f"pgbench -i exited {rc}: {self._tail('pgbench-init.txt')}")

    def _tail(self, name: str) -> str:
        try:
            lines = [ln for ln in (self.dir / name).read_text(errors="replace").splitlines() if ln.strip()]
        except OSError:
            return "?"
        return " | ".join(lines[-2:])

    def _argv(self, prefix: str, seconds: float) -> list[str]:
        argv = [
            str(self.pgbench),
            "-n",
            "-c",
            str(self.spec.clients),
            "-j",
            "1",  # one thread, one log file: 200 tx/s is nothing for a thread
            "-R",
            f"{self.spec.rate_per_s:g}",
            "-T",
            str(max(1, int(math.ceil(seconds)))),
            "-l",
            "--log-prefix",
            str(self.dir / prefix),
        ]
        return argv + (["-f", self.spec.script] if self.spec.script else ["-b", "tpcb-like"])

    async def _start(self, prefix: str, seconds: float) -> None:
        out = open(self.dir / f"pgbench-{prefix}.txt", "wb")
        try:
            self.proc = await asyncio.create_subprocess_exec(
                *self._argv(prefix, seconds),
                stdout=out,
                stderr=asyncio.subprocess.STDOUT,
                env=self.env(prefix),
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        finally:
            out.close()

    async def baseline(self, duration_s: float) -> dict[str, Any]:
        """The neighbour alone for ``BASELINE_LEAD_S`` + ``duration_s``; its window is the last
        ``duration_s``."""
        self.say(f"neighbour: baseline alone, {self.spec.rate_per_s:g} tx/s for {duration_s:g} s ...")
        t0 = time.time()
        await self._start(rundir.NEIGHBOUR_BASELINE_LOG, BASELINE_LEAD_S + duration_s)
        try:
            rc = await self.proc.wait()
        except BaseException:
            await self.stop()
            raise
        self.record["baseline"] = {"start": t0 + BASELINE_LEAD_S, "end": t0 + BASELINE_LEAD_S + duration_s}
        if rc != 0:
            raise RuntimeError(f"the neighbour's pgbench exited {rc}: {self._tail('pgbench-baseline.txt')}")
        self.proc = None
        return self.record["baseline"]

    async def start(self, seconds: float) -> None:
        """Beside the scheduler, for ``seconds`` (plus a margin)."""
        self.record["run"] = {"started_at": time.time()}
        await self._start(rundir.NEIGHBOUR_RUN_LOG, seconds + RUN_MARGIN_S)
        self.say(f"neighbour: {self.spec.rate_per_s:g} tx/s beside the scheduler (pgbench pid {self.proc.pid})")

    async def stop(self, graceful: bool = False) -> None:
        """Idempotent. ``graceful`` (a complete run): let pgbench end by itself at its -T, which
        writes its whole log; else SIGINT (the log's last line may be cut short)."""
        p, self.proc = self.proc, None
        if p is not None:
            await _end(p, RUN_MARGIN_S + STOP_S if graceful else 1.0)
            if self.record.get("run") and p.returncode not in (0, None, -signal.SIGINT, -signal.SIGTERM):
                self.record["error"] = f"pgbench exited {p.returncode}: {self._tail('pgbench-run.txt')}"

    async def teardown(self) -> None:
        import psycopg
        from psycopg import sql

        async with await psycopg.AsyncConnection.connect(self.dsn, autocommit=True, connect_timeout=10) as conn:
            await conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(self.schema)))


def _die_with_parent() -> None:
    """In the child, before exec: a SIGKILLed run must not leave pgbench loading the server for the
    rest of its -T (Linux's PR_SET_PDEATHSIG; elsewhere a no-op)."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1
    except Exception:
        pass


async def _end(p: asyncio.subprocess.Process, wait_s: float = 1.0) -> None:
    if p.returncode is not None:
        return
    try:
        await asyncio.wait_for(asyncio.shield(p.wait()), wait_s)
        return
    except TimeoutError:
        pass
    p.send_signal(signal.SIGINT)
    try:
        await asyncio.wait_for(p.wait(), STOP_S)
    except TimeoutError:
        p.kill()
        await p.wait()


class Readers:
    """N overlapping REPEATABLE READ snapshots, staggered, from ``start_at`` until ``stop_at`` or
    ``stop``."""

    def __init__(self, spec: ReadersSpec, dsn: str, run_dir: Path, schema: str | None, say: Callable[[str], None]):
        self.spec = spec
        self.dsn = dsn
        self.path = Path(run_dir) / rundir.READERS
        self.schema = schema  # the neighbour's, or None: the readers read the catalogue
        self.say = say
        self.holding = 0

    def _query(self):
        from psycopg import sql

        if self.schema:
            return sql.SQL("SELECT count(*), sum(abalance) FROM {}.pgbench_accounts").format(
                sql.Identifier(self.schema)
            )
        return sql.SQL("SELECT count(*) FROM pg_catalog.pg_class")

    async def run(self, start_at: float, stop_at: float, stop: asyncio.Event) -> None:
        now = time.time()
        self.say(
            f"readers: {self.spec.count} x {self.spec.hold_s:g} s REPEATABLE READ snapshots, staggered, "
            f"from T+{max(0.0, start_at - now):.0f} s to T+{stop_at - now:.0f} s"
        )
        if await _wait(stop, max(0.0, start_at - now)):
            return
        await asyncio.gather(*(self._reader(i, stop_at, stop) for i in range(self.spec.count)))

    async def _reader(self, i: int, stop_at: float, stop: asyncio.Event) -> None:
        import psycopg

        offset = i * self.spec.hold_s / self.spec.count
        if await _wait(stop, min(offset, max(0.0, stop_at - time.time()))):
            return
        while time.time() < stop_at and not stop.is_set():
            try:
                conn = await psycopg.AsyncConnection.connect(
                    self.dsn, autocommit=True, connect_timeout=10, application_name=f"timerbench-reader-{i}"
                )
            except Exception as exc:
                self.say(f"warning: reader {i} could not connect: {type(exc).__name__}: {exc}")
                if await _wait(stop, 1.0):
                    return
                continue
            hold: dict[str, Any] = {"reader": i}
            try:
                await conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
                hold["start"] = time.time()
                await conn.execute(self._query())  # takes the snapshot, reading the neighbour's tables
                cur = await conn.execute("SELECT backend_xmin::text FROM pg_stat_activity WHERE pid = pg_backend_pid()")
                hold["xmin"] = (await cur.fetchone())[0]
                hold["read_s"] = time.time() - hold["start"]
                self.holding += 1
                until = min(stop_at, hold["start"] + self.spec.hold_s)
                await _wait(stop, max(0.0, until - time.time()))
                await conn.execute("COMMIT")
            except Exception as exc:
                hold["error"] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
            finally:
                if "xmin" in hold:
                    self.holding -= 1
                if "start" in hold:
                    hold["end"] = time.time()
                    with open(self.path, "a") as fh:
                        fh.write(json.dumps(hold) + "\n")
                await conn.close()


async def _wait(stop: asyncio.Event, seconds: float) -> bool:
    """Sleep ``seconds`` unless ``stop`` comes first; True when it did."""
    try:
        await asyncio.wait_for(stop.wait(), max(0.0, seconds))
        return True
    except TimeoutError:
        return stop.is_set()
