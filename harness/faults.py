"""``bench run --fault SPEC``: inject faults into a run at fixed offsets and record when they happened.

SPEC forms (offsets count from the run's start, ``arm_start``; durations as ``30s``, ``2m``, ``500ms``):

``kill-worker@30s``
    Crash one worker mid-batch and, as an orchestrator would, start a replacement
    ``REPLACEMENT_DELAY_S`` later (:class:`harness.workers.Workers` ``kill`` / ``restart``).
    With ``--nodes`` a node process gets SIGKILL. In a single-process run the in-process
    worker is crashed the way the interface defines a crash (``schedulers/base.py``): its
    ``run`` task is cancelled, releasing nothing; the kill waits up to ``MID_BATCH_WAIT_S`` for
    a batch to be in the processor's hands, so the crash loses work in flight.
``pause-worker@30s:20s``
    SIGSTOP a node process, SIGCONT it 20 s later (needs ``--nodes``: a coroutine in this
    process cannot be paused without pausing the harness).
``restart-postgres@60s``, ``restart-postgres@60s:10s``
    Fast shutdown and restart of the embedded Postgres (refused when the run's DSN points at
    any other server: the harness never restarts a server it does not own); with a second
    value it stays down that long before it starts again (an outage, not only a restart).
``restart-temporal@60s``, ``restart-temporal@60s:10s``
    The same for the embedded Temporal dev server (its SQLite file keeps the state).
``hold-snapshot@10s:120s``
    A separate session runs ``BEGIN ISOLATION LEVEL REPEATABLE READ``, reads, and stays idle in
    that transaction for the duration: its snapshot pins the xmin horizon, so vacuum cannot
    remove the dead tuples the run keeps making (held-horizon: the doom loop's trigger). It
    records ``n_dead_tup`` of each of the scheduler's relations (and their TOAST tables) when the
    snapshot is taken and when it is released (``dead_tuples_start`` / ``dead_tuples_end``; the
    statistics trail the server by up to a second, see :mod:`metrics.sampler`).
``slow-provider@30s:60s:5s``
    Every provider poll takes 5 s for 60 s (the polling processor's latency, on its lanes).

Each fault's planned offset, actual start and end, and what it did are written to
``faults.json`` in the run directory as they happen; :func:`metrics.faults.fault_summary`
turns them and ``fires.parquet`` into the summary's ``faults``.
"""

from __future__ import annotations

import asyncio
import math
import re
import time
from dataclasses import asdict, dataclass
from typing import Any

from harness.errors import UsageError

REPLACEMENT_DELAY_S = 1.0  # a killed worker's replacement starts this long after the kill
MID_BATCH_WAIT_S = 3.0  # a kill waits at most this long for a batch to be in flight

ACCEPTED_FORMS = (
    "kill-worker@30s, pause-worker@30s:20s, restart-postgres@60s[:10s], restart-temporal@60s[:10s], "
    "hold-snapshot@10s:120s, slow-provider@30s:60s:5s"
)

# kind -> names of the values after "@", in order
KINDS: dict[str, tuple[str, ...]] = {
    "kill-worker": ("at_s",),
    "pause-worker": ("at_s", "duration_s"),
    "restart-postgres": ("at_s",),
    "restart-temporal": ("at_s",),
    "hold-snapshot": ("at_s", "duration_s"),
    "slow-provider": ("at_s", "duration_s", "latency_s"),
}

# kind -> names of values that may follow the required ones
OPTIONAL: dict[str, tuple[str, ...]] = {
    "restart-postgres": ("down_s",),
    "restart-temporal": ("down_s",),
}

_SPEC = re.compile(r"^([a-z-]+)@(.+)$")


@dataclass(frozen=True)
class FaultSpec:
    text: str  # as given
    kind: str
    at_s: float  # offset from the run's start, seconds
    duration_s: float | None = None
    latency_s: float | None = None
    down_s: float | None = None  # restart-*: how long the server stays down before it starts again


def parse(text: str) -> FaultSpec:
    """One ``--fault`` value. Raises ValueError with a one-line message listing the accepted forms."""

    def bad(why: str) -> ValueError:
        return ValueError(f"bad --fault {text!r}: {why}; accepted forms: {ACCEPTED_FORMS}")

    from loadgen.rates import parse_duration

    m = _SPEC.match(text.strip())
    if not m:
        raise bad("expected KIND@OFFSET[:DURATION[:LATENCY]]")
    kind, rest = m.group(1), m.group(2)
    if kind not in KINDS:
        raise bad(f"unknown fault {kind!r}")
    names = KINDS[kind]
    optional = OPTIONAL.get(kind, ())
    parts = rest.split(":")
    if not len(names) <= len(parts) <= len(names) + len(optional):
        counts = f"{len(names)}" + (f" or {len(names) + len(optional)}" if optional else "")
        raise bad(
            f"{kind} takes {counts} value(s) after '@' ({', '.join(n[:-2] for n in names + optional)}), "
            f"got {len(parts)}"
        )
    values: dict[str, float] = {}
    for name, raw in zip(names + optional, parts):
        try:
            v = parse_duration(raw)
        except ValueError:
            raise bad(f"{name[:-2]} {raw!r} is not a duration") from None
        if not math.isfinite(v) or (name != "at_s" and v <= 0):
            raise bad(f"{name[:-2]} {raw!r} must be positive")
        values[name] = v
    return FaultSpec(text=text.strip(), kind=kind, **values)


def parse_all(texts) -> list[FaultSpec]:
    return [parse(t) for t in texts]


# -- which servers the harness owns ------------------------------------------------------------

_LOOPBACK = {"127.0.0.1", "localhost", "::1", ""}


def embedded_postgres(dsn: str | None):
    """The embedded :class:`harness.stack.Postgres` that ``dsn`` points at, or None."""
    from harness import stack

    if not dsn:
        return None
    pg = stack.postgres()
    host, port = stack.dsn_host_port(dsn)
    if host in _LOOPBACK and port == str(pg.port()) and pg.running():
        return pg
    return None


def embedded_temporal(address: str | None):
    """The embedded :class:`harness.stack.TemporalDev` at ``address``, or None."""
    from harness import stack

    if not address:
        return None
    t = stack.temporal()
    host, _, port = address.rpartition(":")
    if host in _LOOPBACK and port == str(t.port()) and t.running():
        return t
    return None


def check(
    specs: list[FaultSpec], *, dsn: str | None, temporal_address: str | None, nodes: int | None, can_pause: bool = False
) -> None:
    """Refuse faults this run cannot inject (one line each, exit 2). ``can_pause``: the run's
    workers can pause one of theirs in process (a migration rehearsal stalls the shadow's)."""
    multi = bool(nodes) and int(nodes) > 0
    for s in specs:
        if s.kind == "pause-worker" and not (multi or can_pause):
            raise UsageError(
                f"--fault {s.text}: an in-process worker cannot be paused; run with --nodes N "
                f"(separate node processes) to pause one"
            )
        if s.kind == "slow-provider" and multi:
            raise UsageError(
                f"--fault {s.text}: the provider runs inside the node processes with --nodes; "
                f"slow-provider needs a single-process run (drop --nodes)"
            )
        if s.kind == "restart-postgres" and embedded_postgres(dsn) is None:
            where = "this run uses no Postgres" if not dsn else "the DSN points at a server the harness did not start"
            raise UsageError(
                f"--fault {s.text}: {where}; restart-postgres only restarts the embedded server "
                f"(drop --dsn / TIMERBENCH_DSN, or point it at the embedded one)"
            )
        if s.kind == "restart-temporal" and embedded_temporal(temporal_address) is None:
            where = (
                "this scheduler uses no Temporal"
                if not temporal_address
                else f"{temporal_address} is not the embedded dev server"
            )
            raise UsageError(f"--fault {s.text}: {where}; restart-temporal only restarts the embedded dev server")
        if s.kind == "hold-snapshot" and not dsn:
            raise UsageError(f"--fault {s.text}: this run uses no Postgres, so there is no snapshot to hold")


# -- injection -----------------------------------------------------------------------------------


class FaultInjector:
    """Fires the faults of one run at their offsets and records their spans in ``faults.json``.

    ``window`` is the run's (its ``arm_start`` and ``measure_end`` are read when the faults
    start); workers are reached through :class:`harness.workers.Workers` only.
    """

    def __init__(
        self,
        specs: list[FaultSpec],
        *,
        workers,
        processor,
        window: dict[str, Any],
        run_dir,
        dsn: str | None,
        temporal_address: str | None,
        max_lag_s: float,
        say,
        relations: list[str] | None = None,
    ) -> None:
        self.specs = specs
        self.workers = workers
        self.processor = processor
        self.window = window
        self.run_dir = run_dir
        self.dsn = dsn
        self.temporal_address = temporal_address
        self.max_lag_s = float(max_lag_s)
        self.say = say
        self.relations = list(relations or [])  # "schema.table": whose dead tuples a held snapshot counts
        self.spans: list[dict[str, Any]] = [
            {**asdict(s), "planned_at": None, "start": None, "end": None, "fired": False, "note": ""} for s in specs
        ]

    # -- the schedule ---------------------------------------------------------------------------

    def write(self) -> None:
        from metrics.rundir import FAULTS, write_json

        write_json(
            self.run_dir / FAULTS,
            {
                "max_lag_s": self.max_lag_s,
                "arm_start": self.window["arm_start"],
                "faults": self.spans,
            },
        )

    async def loop(self, done: asyncio.Event) -> None:
        """Start each fault at ``arm_start + at_s``; ends when every started fault has ended."""
        arm_start = self.window["arm_start"]
        for span in self.spans:
            span["planned_at"] = arm_start + span["at_s"]
        self.write()
        tasks = [asyncio.create_task(self._one(span, done)) for span in self.spans]
        await asyncio.gather(*tasks, return_exceptions=True)
        self.write()

    async def _one(self, span: dict[str, Any], done: asyncio.Event) -> None:
        try:
            await asyncio.wait_for(done.wait(), max(0.0, span["planned_at"] - time.time()))
        except TimeoutError:
            pass
        if done.is_set() or time.time() > self.window["measure_end"]:
            span["note"] = "not fired: the run had ended before its offset"
            self.write()
            return
        kind = span["kind"]
        try:
            await getattr(self, "_" + kind.replace("-", "_"))(span, done)
        except Exception as exc:  # a fault that fails to inject is reported, not a crash of the run
            span["note"] = (span["note"] + "; " if span["note"] else "") + f"failed: {type(exc).__name__}: {exc}"
            if span["start"] is not None and span["end"] is None:
                span["end"] = time.time()
        self.say(f"fault {span['text']}: {span['note'] or 'done'}")
        self.write()

    def _begin(self, span: dict[str, Any]) -> None:
        span["start"] = time.time()
        span["fired"] = True
        self.write()
        self.say(f"fault {span['text']}: starting")

    @staticmethod
    async def _sleep_unless(done: asyncio.Event, seconds: float) -> None:
        try:
            await asyncio.wait_for(done.wait(), seconds)
        except TimeoutError:
            pass

    # -- the faults -------------------------------------------------------------------------------

    async def _kill_worker(self, span: dict[str, Any], done: asyncio.Event) -> None:
        killed = await self.workers.kill(MID_BATCH_WAIT_S)
        self._begin(span)
        span["worker"] = killed.worker
        what = (
            f"SIGKILL node {killed.worker} (pid {killed.pid})"
            if killed.pid is not None
            else f"crashed in-process worker {killed.worker} "
            f"({'mid-batch' if killed.mid_batch else 'no batch in flight'}"
            f": run task cancelled, nothing released)"
        )
        if killed.mid_batch is not None:
            span["mid_batch"] = killed.mid_batch
        await self._sleep_unless(done, REPLACEMENT_DELAY_S)  # the orchestrator notices, then restarts
        if done.is_set():
            span["note"] = f"{what}; the run ended before a replacement started"
        else:
            span["replacement"] = await self.workers.restart(killed)
            span["note"] = f"{what}; replacement {span['replacement']} after {REPLACEMENT_DELAY_S:g} s"
        span["end"] = time.time()

    async def _pause_worker(self, span: dict[str, Any], done: asyncio.Event) -> None:
        self._begin(span)
        paused = await self.workers.pause(span["duration_s"], done)
        span["end"] = time.time()
        span["worker"] = paused.worker
        span["note"] = (
            f"SIGSTOP node {paused.worker} (pid {paused.pid}), SIGCONT after {span['end'] - span['start']:.1f} s"
        )

    async def _restart_postgres(self, span: dict[str, Any], done: asyncio.Event) -> None:
        pg = embedded_postgres(self.dsn)
        if pg is None:
            raise RuntimeError("the embedded Postgres is not running")
        self._begin(span)
        await self._down(pg, span, done)  # pg_ctl -m fast stop, then start on the same port
        span["end"] = time.time()
        span["note"] = f"fast shutdown + restart of the embedded Postgres ({span['end'] - span['start']:.1f} s down)"

    async def _restart_temporal(self, span: dict[str, Any], done: asyncio.Event) -> None:
        t = embedded_temporal(self.temporal_address)
        if t is None:
            raise RuntimeError("the embedded Temporal dev server is not running")
        self._begin(span)
        await self._down(t, span, done)  # SIGTERM, then start on the same port and SQLite file
        span["end"] = time.time()
        span["note"] = f"restart of the embedded Temporal dev server ({span['end'] - span['start']:.1f} s until ready)"

    async def _down(self, server, span: dict[str, Any], done: asyncio.Event) -> None:
        """Restart ``server``; with ``down_s``, it stays stopped that long first."""
        down_s = span.get("down_s")
        if not down_s:
            await asyncio.to_thread(server.restart)
            return
        port = server.port()
        await asyncio.to_thread(server.stop)
        await asyncio.sleep(down_s)  # the server comes back even if the run ends meanwhile
        await asyncio.to_thread(server.start, port)

    async def _hold_snapshot(self, span: dict[str, Any], done: asyncio.Event) -> None:
        import psycopg

        conn = await psycopg.AsyncConnection.connect(
            self.dsn, autocommit=True, application_name="timerbench-fault-hold-snapshot"
        )
        try:
            await conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            # the first statement takes the snapshot; from here its xmin pins the horizon
            cur = await conn.execute("SELECT backend_xmin::text FROM pg_stat_activity WHERE pid = pg_backend_pid()")
            xmin = (await cur.fetchone())[0]
            # read inside the snapshot's transaction: the statistics views are not MVCC, and
            # this is the transaction's only statistics read, so nothing cached is reread
            span["dead_tuples_start"] = await self._dead_tuples(conn)
            self._begin(span)
            span["xmin"] = xmin
            await self._sleep_unless(done, span["duration_s"])
            try:
                await conn.execute("COMMIT")
            finally:
                span["end"] = time.time()
            span["dead_tuples_end"] = await self._dead_tuples(conn)
            span["note"] = f"held a REPEATABLE READ snapshot (xmin {xmin}) idle for {span['end'] - span['start']:.1f} s"
        finally:
            await conn.close()

    async def _dead_tuples(self, conn) -> dict[str, float]:
        """``n_dead_tup`` of each watched relation and of its TOAST table, by sampler scope."""
        from metrics.rundir import TOAST_SUFFIX

        if not self.relations:
            return {}
        cur = await conn.execute(
            """SELECT n.nspname || '.' || c.relname, s.n_dead_tup, t.n_dead_tup
               FROM pg_class c
               JOIN pg_namespace n ON n.oid = c.relnamespace
               JOIN pg_stat_all_tables s ON s.relid = c.oid
               LEFT JOIN pg_stat_all_tables t ON t.relid = c.reltoastrelid
               WHERE n.nspname || '.' || c.relname = ANY(%(names)s::text[])""",
            {"names": self.relations},
        )
        out: dict[str, float] = {}
        for name, dead, toast_dead in await cur.fetchall():
            out[name] = float(dead or 0)
            if toast_dead is not None:
                out[name + TOAST_SUFFIX] = float(toast_dead)
        return out

    async def _slow_provider(self, span: dict[str, Any], done: asyncio.Event) -> None:
        p = self.processor
        saved = (p.lat_mu, p.lat_sigma)
        self._begin(span)
        # every poll now draws exactly latency_s; polls still queue on the poller lanes
        p.lat_mu, p.lat_sigma = math.log(span["latency_s"]), 0.0
        try:
            await self._sleep_unless(done, span["duration_s"])
        finally:
            p.lat_mu, p.lat_sigma = saved
            span["end"] = time.time()
        span["note"] = f"provider latency {span['latency_s']:g} s for {span['end'] - span['start']:.1f} s"


def summary_lines(summary: dict[str, Any]) -> list[str]:
    """One printable line per fault of a summary."""
    out = []
    for f in summary.get("faults") or []:
        if not f.get("fired"):
            out.append(f"fault {f['spec']}: not fired ({f.get('note') or '-'})")
            continue
        rec = f.get("time_to_recover_s")
        peak = f.get("lag_peak_ms")
        out.append(
            f"fault {f['spec']} at {f['start_s']:.1f}-{f['end_s']:.1f} s: lost {f['lost']}, pending {f['pending']}, "
            f"duplicate fires {f['duplicate_fires']}, duplicate keyed effects {f['duplicate_effects']}, "
            f"duplicate external effects {f['duplicate_external_effects']}, "
            f"recovered {'never' if rec is None else f'{rec:.1f} s after it ended'}, "
            f"lag peak {'-' if peak is None else f'{peak:,.0f} ms'}"
        )
    return out
