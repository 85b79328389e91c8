"""The sampler: once a second, run-wide figures, the backend's gauges and per-relation stats.

Rows are long format (``t, elapsed_s, scope, metric, value``; see :mod:`metrics.rundir`).

Run-wide (scope ``run``): ``fires_per_s`` (fires received since the last sample), ``claims_per_s``
(timers claimed per second, from the ``claimed_timers`` count every backend keeps, see
``schedulers/base.py``: re-claims after a lapsed lease count, so redelivery shows as claims above
fires; summed over nodes with ``--nodes``), ``lag_p50_ms`` / ``lag_p99_ms`` over the fires of the
last interval (a live view from an HDR histogram, where an early fire counts as 0 ms; the
summary's lag is exact and counts early fires),
``wal_bytes`` (cumulative since the run started; server-wide, so other databases' writes count
too), ``oldest_xact_age_s`` (server-wide), and every ``stats()`` gauge as ``backend.<name>``.

Per relation the scheduler names, and its TOAST table (``schema.table#toast``, found through
``pg_class.reltoastrelid``): ``n_live_tup``, ``n_dead_tup`` and the sizes ``table_bytes`` /
``index_bytes`` as read; ``n_tup_ins``, ``n_tup_upd``, ``n_tup_hot_upd``, ``n_tup_del``,
``autovacuum_count``, ``vacuum_count`` as deltas since the run started; ``hot_ratio`` =
HOT updates / updates since the start (NaN before the first update).

Samples are written as closed segments (:func:`metrics.rundir.samples_segment`) every
``SEGMENT_EVERY_SAMPLES`` samples, each holding only the rows since the last one, so a run killed
with SIGKILL keeps all but its last few seconds of samples and a long run never rewrites what it
already wrote.

Statistics lag: backends flush their table counters to the cumulative statistics system at most
about once a second (and when idle), and ``pg_stat_force_next_flush()`` only works for the
calling session, so a sample trails the truth by ~0.5-1 s. Window deltas in the summary take
the samples nearest the window's edges and inherit that lag.
"""

from __future__ import annotations

import asyncio
import math
import time
from pathlib import Path
from typing import Any, Callable

import psycopg

from metrics.hdr import percentiles_ms, reset
from metrics.recorder import FireRecorder
from metrics import rundir
from metrics.rundir import SAMPLES_SCHEMA, TOAST_SUFFIX
from schedulers.sqlfile import load_blocks

SQL = load_blocks(Path(__file__).with_name("sampler.sql"))
SAMPLE_EVERY_S = 1.0
SEGMENT_EVERY_SAMPLES = 5  # a samples segment closes every 5 samples: what a SIGKILL costs of them
STATS_TIMEOUT_S = 2.0  # a stats() or catalogue query slower than this skips one sample
PG_SETTINGS = [
    "shared_buffers", "max_wal_size", "min_wal_size", "checkpoint_timeout", "track_io_timing",
    "track_wal_io_timing", "wal_level", "synchronous_commit", "fsync", "work_mem",
    "maintenance_work_mem", "effective_cache_size", "max_connections", "random_page_cost",
    "vacuum_cost_limit", "vacuum_cost_delay", "default_statistics_target", "jit", "server_version",
    "shared_preload_libraries", "pg_stat_statements.track",
]
DELTA_METRICS = ("n_tup_ins", "n_tup_upd", "n_tup_hot_upd", "n_tup_del", "autovacuum_count", "vacuum_count")
GAUGE_METRICS = ("n_live_tup", "n_dead_tup", "table_bytes", "index_bytes")


async def describe_postgres(dsn: str) -> dict[str, Any]:
    """Server version and measurement-relevant settings for ``config.json``."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True, connect_timeout=10) as conn:
        version = (await (await conn.execute(SQL["server_version"])).fetchone())[0]
        rows = await (await conn.execute(SQL["settings"], {"names": PG_SETTINGS})).fetchall()
    settings = {name: (f"{setting}{'' if not unit else ' ' + unit}") for name, setting, unit in rows}
    return {"postgres_version": version, "postgres_settings": settings}


class Sampler:
    def __init__(self, scheduler: Any, recorder: FireRecorder, dsn: str | None, run_dir: Path,
                 claimed: Callable[[], int] | None = None) -> None:
        self.scheduler = scheduler
        self.recorder = recorder
        self.dsn = dsn if getattr(type(scheduler), "needs_postgres", False) or dsn else None
        self.run_dir = Path(run_dir)
        self.directory = self.run_dir / rundir.SEGMENTS_DIR
        self.cols: dict[str, list] = {name: [] for name in SAMPLES_SCHEMA.names}  # since the last segment
        self.segments = 0
        self.start = time.time()
        self.latest: dict[tuple[str, str], float] = {}
        self._conn: psycopg.AsyncConnection | None = None
        self._names = list(scheduler.relations()) if hasattr(scheduler, "relations") else []
        self._scopes: dict[int, str] = {}  # relid -> scope
        self._base: dict[tuple[str, str], float] = {}
        self._wal0: float | None = None
        self._last_t = self.start
        self._last_rows = recorder.rows
        # timers claimed so far (the workers' schedulers); by default the scheduler's own count
        self._claimed = claimed or (lambda: int(getattr(scheduler, "claimed_timers")))
        self._last_claims: float | None = None
        self.errors = 0
        self.last_error: str | None = None

    async def open(self) -> None:
        """Connect and take the baseline (call after setup, before arming)."""
        if self.dsn:
            await self._connect()
            await self._resolve()
            await self._pg_sample(baseline=True)
        self._last_claims = self._claims()
        self.start = self._last_t = time.time()
        self._last_rows = self.recorder.rows

    async def _connect(self) -> None:
        self._conn = await psycopg.AsyncConnection.connect(
            self.dsn, autocommit=True, connect_timeout=10, application_name="timerbench-sampler"
        )

    async def close(self) -> None:
        if self._conn is not None:
            await self._conn.close()
            self._conn = None

    async def _resolve(self) -> None:
        if not self._names or self._conn is None:
            return
        rows = await (await self._conn.execute(SQL["resolve_relations"], {"names": self._names})).fetchall()
        for scope, relid, toast in rows:
            self._scopes[int(relid)] = scope
            if toast:
                self._scopes[int(toast)] = scope + TOAST_SUFFIX

    async def _backend_stats(self) -> dict[str, float]:
        try:
            stats = await asyncio.wait_for(self.scheduler.stats(), STATS_TIMEOUT_S)
            return {str(k): float(v) for k, v in stats.items()}
        except Exception as exc:  # a slow or failing gauge costs one sample, not the run
            self._note_error(exc)
            return {}

    def _claims(self) -> float | None:
        try:
            return float(self._claimed())
        except Exception as exc:  # a backend without the count (schedulers/base.py asks for it)
            self._note_error(exc)
            return None

    def _note_error(self, exc: BaseException) -> None:
        self.errors += 1
        self.last_error = f"{type(exc).__name__}: {exc}".splitlines()[0]

    def _add(self, t: float, scope: str, metric: str, value: float) -> None:
        c = self.cols
        c["t"].append(t)
        c["elapsed_s"].append(t - self.start)
        c["scope"].append(scope)
        c["metric"].append(metric)
        c["value"].append(float(value))
        self.latest[(scope, metric)] = float(value)

    async def _pg_sample(self, baseline: bool = False, t: float | None = None) -> None:
        if self._conn is None:
            return
        if self._conn.closed or self._conn.broken:
            await self._connect()  # the server restarted (a fault, or a failover): sample on
        conn = self._conn
        if len(self._scopes) < len(self._names):
            await self._resolve()  # a table created after the sampler started
        wal_pos, oldest = await (await conn.execute(SQL["run_stats"])).fetchone()
        rows = []
        if self._scopes:
            rows = await (await conn.execute(SQL["relation_stats"], {"relids": list(self._scopes)})).fetchall()
        if baseline:
            self._wal0 = float(wal_pos)
            for r in rows:
                scope = self._scopes[int(r[0])]
                for name, v in zip(DELTA_METRICS, (r[3], r[4], r[5], r[6], r[7], r[8])):
                    self._base[(scope, name)] = float(v or 0)
            return
        self._add(t, "run", "wal_bytes", float(wal_pos) - (self._wal0 or float(wal_pos)))
        self._add(t, "run", "oldest_xact_age_s", float(oldest))
        for r in rows:
            scope = self._scopes[int(r[0])]
            live, dead, ins, upd, hot, dele, av, vac, tbytes, ibytes = r[1:]
            deltas = {}
            for name, v in zip(DELTA_METRICS, (ins, upd, hot, dele, av, vac)):
                deltas[name] = float(v or 0) - self._base.setdefault((scope, name), float(v or 0))
                self._add(t, scope, name, deltas[name])
            for name, v in zip(GAUGE_METRICS, (live, dead, tbytes, ibytes)):
                self._add(t, scope, name, float(v or 0))
            upd_d = deltas["n_tup_upd"]
            self._add(t, scope, "hot_ratio", deltas["n_tup_hot_upd"] / upd_d if upd_d > 0 else math.nan)

    async def sample(self) -> None:
        t = time.time()
        dt = max(1e-6, t - self._last_t)
        rec = self.recorder
        rows = rec.rows  # taken now: fires that arrive while this sample awaits count next time
        fires = rows - self._last_rows
        self._add(t, "run", "fires_per_s", fires / dt)
        pct = percentiles_ms(rec.interval, (50.0, 99.0))
        reset(rec.interval)
        stats = await self._backend_stats()
        claims = self._claims()
        if claims is not None and self._last_claims is not None:
            self._add(t, "run", "claims_per_s", (claims - self._last_claims) / dt)
        self._last_claims = claims
        self._add(t, "run", "lag_p50_ms", math.nan if pct["p50"] is None else pct["p50"])
        self._add(t, "run", "lag_p99_ms", math.nan if pct["p99"] is None else pct["p99"])
        for name, value in stats.items():
            self._add(t, "run", f"backend.{name}", value)
        try:
            await asyncio.wait_for(self._pg_sample(t=t), STATS_TIMEOUT_S)
        except Exception as exc:
            self._note_error(exc)
        self._last_t = t
        self._last_rows = rows

    def relation_total(self, metric: str, toast: bool = False) -> float | None:
        """Latest ``metric`` summed over the tables (or over their TOAST tables)."""
        vals = [v for (scope, m), v in self.latest.items()
                if m == metric and scope != "run" and scope.endswith(TOAST_SUFFIX) == toast]
        return sum(vals) if vals else None

    def relation_ratio(self) -> float | None:
        hot = self.relation_total("n_tup_hot_upd")
        upd = self.relation_total("n_tup_upd")
        return hot / upd if upd else None

    def _take(self) -> tuple[int, dict[str, list]] | None:
        """The rows since the last segment and the segment's number (None: no rows)."""
        if not self.cols["t"]:
            return None
        cols, self.cols = self.cols, {name: [] for name in SAMPLES_SCHEMA.names}
        self.segments += 1
        return self.segments - 1, cols

    def _write(self, taken: tuple[int, dict[str, list]]) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        rundir.write_samples_segment(self.directory, *taken)

    def save(self) -> None:
        """Close the last segment (at the end of the run)."""
        taken = self._take()
        if taken is not None:
            self._write(taken)

    async def save_async(self) -> None:
        """Close a segment from a thread, so sampling goes on while it is written."""
        taken = self._take()
        if taken is not None:
            await asyncio.to_thread(self._write, taken)

    async def loop(self, stop: asyncio.Event) -> None:
        """Sample every second until ``stop``; close a segment every ``SEGMENT_EVERY_SAMPLES``,
        written in the background. Awaiting the write stopped the sampling: on a busy machine it
        took 2-7 s, a hole in every run's samples. One write at a time (a segment whose turn comes
        while the last one is still being written keeps its rows for the next turn), and the last
        one has finished when this returns."""
        n = 0
        saving: asyncio.Task | None = None
        next_t = time.time() + SAMPLE_EVERY_S
        try:
            while not stop.is_set():
                try:
                    await asyncio.wait_for(stop.wait(), max(0.0, next_t - time.time()))
                    break
                except TimeoutError:
                    pass
                next_t += SAMPLE_EVERY_S
                if next_t < time.time():
                    next_t = time.time() + SAMPLE_EVERY_S  # fell behind: skip, do not burst
                await self.sample()
                n += 1
                if n % SEGMENT_EVERY_SAMPLES == 0 and (saving is None or saving.done()):
                    saving = asyncio.create_task(self.save_async())
        finally:
            if saving is not None:
                (result,) = await asyncio.gather(saving, return_exceptions=True)
                if isinstance(result, Exception):
                    self._note_error(result)
