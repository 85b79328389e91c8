"""The sampler: run-wide figures, the backend's counters, per-relation statistics and what every
server the run uses paid, once a second and at each edge of the measured window.

Rows are long format (``t, elapsed_s, scope, metric, value``; see :mod:`metrics.rundir`).

It does not disturb what it measures: it reads only the statistics views and the catalogue
(``pg_stat_*``, ``pg_class``, sizes from the file system) on **its own connection**, never the
designs' tables, and a design's ``stats()`` is in-process counters (the scheduler interface
forbids scanning its tables there). Statistics reads are shared-memory lookups; every statement
it sends carries ``timerbench-sampler``, so ``statements.parquet`` shows its own cost apart from the
design's. The heavier reads are slower: the Temporal endpoint is scraped every
:data:`SCRAPE_EVERY_S` (one scrape costs the dev server ~40 ms of CPU) and at the window's edges.

Run-wide (scope ``run``): ``fires_per_s`` (fires received since the last sample), ``claims_per_s``
(timers claimed per second, from the ``claimed_timers`` count every backend keeps, see
``schedulers/base.py``: re-claims after a lapsed lease count, so redelivery shows as claims above
fires; summed over nodes with ``--nodes``), ``lag_p50_ms`` / ``lag_p99_ms`` over the fires of the
last interval (a live view from an HDR histogram, where an early fire counts as 0 ms; the
summary's lag is exact and counts early fires), ``wal_bytes`` (cumulative since the run started,
from the WAL position; server-wide), ``oldest_xact_age_s`` (server-wide), ``oldest_xmin_age_s`` and
``oldest_xmin_age_xids`` (the oldest snapshot holding the xmin horizon: how long since its
transaction began, and how many xids behind it is; server-wide), ``sample_ms`` (how long
the previous sample took, wall clock: the sampler's own cost), every ``stats()`` counter as
``backend.<name>``, and the engine's own gauges (``backlog``: due and not yet received, from the
harness's bookkeeping, so no design is asked to count its queue).

Per relation the scheduler names, and its TOAST table (``schema.table#toast``, found through
``pg_class.reltoastrelid``): ``n_live_tup``, ``n_dead_tup`` and the sizes ``table_bytes`` /
``index_bytes`` as read; ``n_tup_ins``, ``n_tup_upd``, ``n_tup_hot_upd``, ``n_tup_del``,
``autovacuum_count``, ``vacuum_count`` as deltas since the run started; ``hot_ratio`` =
HOT updates / updates since the start (NaN before the first update).

Per server (scope ``server:<name>``, cumulative since the baseline): for Postgres
``wal_records``, ``wal_fpi``, ``wal_bytes`` (pg_stat_wal), ``io_write_bytes`` (pg_stat_io, all
backend types, Postgres 18) and ``checkpoints``; for every server whose processes we can read,
``write_bytes``, ``write_chars`` and ``cpu_s``, in total and by kind of process
(:mod:`metrics.stores`); ``file_bytes`` of its files; for Temporal, the counters of its metrics
endpoint; and ``bytes_written``, the figure the bill adds up (Postgres: pg_stat_io; a server
without I/O statistics of its own: what the kernel charged its processes).

Samples are written as closed segments (:func:`metrics.rundir.samples_segment`) every
``SEGMENT_EVERY_SAMPLES`` samples, each holding only the rows since the last one, so a run killed
with SIGKILL keeps all but its last few seconds of samples and a long run never rewrites what it
already wrote.

Statistics lag: backends flush their table counters to the cumulative statistics system at most
about once a second (and when idle), and ``pg_stat_force_next_flush()`` only works for the
calling session, so a sample trails the truth by ~0.5-1 s. Window deltas in the summary take
the samples at the window's edges and inherit that lag.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import psycopg

from metrics import pgcost, rundir
from metrics.hdr import percentiles_ms, reset
from metrics.recorder import FireRecorder
from metrics.rundir import SAMPLES_SCHEMA, TOAST_SUFFIX, is_relation_scope, server_scope, write_bloat, write_statements
from metrics.stores import ProcessTree, ServerWatch, file_bytes, postmaster_of, scrape
from schedulers.sqlfile import load_blocks

SQL = load_blocks(Path(__file__).with_name("sampler.sql"))
SAMPLE_EVERY_S = 1.0
SEGMENT_EVERY_SAMPLES = 5  # a samples segment closes every 5 samples: what a SIGKILL costs of them
SCRAPE_EVERY_S = 5.0  # Temporal's metrics endpoint: ~1.9 MB and ~40 ms of its CPU per scrape
SCRAPE_TIMEOUT_S = 10.0  # a page grows with the server's series (harness.stack.TEMPORAL_DYNAMIC_CONFIG)
STATS_TIMEOUT_S = 2.0  # a stats() or catalogue query slower than this skips one sample
EDGE_TIMEOUT_S = 120.0  # CHECKPOINT and the statements read at the window's edges
BLOAT_TIMEOUT_S = 120.0  # pgstattuple of one table at the end of the run
STATS_FLUSH_S = 1.1  # backends flush table counters about once a second
PG_SETTINGS = [
    "shared_buffers",
    "max_wal_size",
    "min_wal_size",
    "checkpoint_timeout",
    "track_io_timing",
    "track_wal_io_timing",
    "wal_level",
    "synchronous_commit",
    "fsync",
    "work_mem",
    "maintenance_work_mem",
    "effective_cache_size",
    "max_connections",
    "random_page_cost",
    "vacuum_cost_limit",
    "vacuum_cost_delay",
    "default_statistics_target",
    "jit",
    "server_version",
    "shared_preload_libraries",
    "pg_stat_statements.track",
    "io_method",
]
DELTA_METRICS = ("n_tup_ins", "n_tup_upd", "n_tup_hot_upd", "n_tup_del", "autovacuum_count", "vacuum_count")
GAUGE_METRICS = ("n_live_tup", "n_dead_tup", "table_bytes", "index_bytes")
POSTGRES = "postgres"


async def describe_postgres(dsn: str) -> dict[str, Any]:
    """Server version and measurement-relevant settings for ``config.json``."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True, connect_timeout=10) as conn:
        version = (await (await conn.execute(SQL["server_version"])).fetchone())[0]
        rows = await (await conn.execute(SQL["settings"], {"names": PG_SETTINGS})).fetchall()
    settings = {name: (f"{setting}{'' if not unit else ' ' + unit}") for name, setting, unit in rows}
    return {"postgres_version": version, "postgres_settings": settings}


class Sampler:
    """``extensions``: the schema of each measurement extension the server lets us use
    (:func:`metrics.extensions.extensions`; absent: not usable). ``servers``: the servers besides
    Postgres (which the sampler finds from its own connection). ``gauges``: the engine's own
    gauges, called with the sample time. ``every_s``: the sampling period (0: only at the
    window's edges, at the start and at the end). ``reset_statements``: reset this database's
    pg_stat_statements entries at the window's start unless another run's window is open on the
    database (the embedded server only; the window is the difference of two reads either way).
    ``claimed``: timers claimed so far by the workers'
    schedulers (summed over nodes with ``--nodes``); by default the scheduler's own
    ``claimed_timers``."""

    def __init__(
        self,
        scheduler: Any,
        recorder: FireRecorder,
        dsn: str | None,
        run_dir: Path,
        claimed: Callable[[], int] | None = None,
        *,
        extensions: dict[str, str] | None = None,
        servers: Sequence[ServerWatch] = (),
        gauges: Callable[[float], dict[str, float]] | None = None,
        every_s: float = SAMPLE_EVERY_S,
        reset_statements: bool = False,
    ) -> None:
        self.scheduler = scheduler
        self.recorder = recorder
        self.dsn = dsn if getattr(type(scheduler), "needs_postgres", False) or dsn else None
        self.run_dir = Path(run_dir)
        self.directory = self.run_dir / rundir.SEGMENTS_DIR
        self.cols: dict[str, list] = {name: [] for name in SAMPLES_SCHEMA.names}  # since the last segment
        self.segments = 0
        self.extensions = dict(extensions or {})
        self.servers = list(servers)
        self.gauges = gauges
        self.every_s = float(every_s)
        self.reset_statements = reset_statements
        self.cols: dict[str, list] = {name: [] for name in SAMPLES_SCHEMA.names}
        self.start = time.time()
        self.latest: dict[tuple[str, str], float] = {}
        self.unavailable: dict[str, str] = {}
        self._conn: psycopg.AsyncConnection | None = None
        self._names = list(scheduler.relations()) if hasattr(scheduler, "relations") else []
        self._scopes: dict[int, str] = {}  # relid -> scope
        self._base: dict[tuple[str, str], float] = {}
        self._server_base: dict[str, float] = {}
        self._counters_sql: str | None = None
        self._trees: dict[str, ProcessTree] = {}
        self._scraped: dict[str, dict[str, float]] = {}
        self._scrape_base: dict[str, dict[str, float]] = {}
        self._last_scrape = 0.0
        self._http = None
        self._wal0: float | None = None
        self._last_t = self.start
        self._last_rows = recorder.rows
        # timers claimed so far (the workers' schedulers); by default the scheduler's own count
        self._claimed = claimed or (lambda: int(scheduler.claimed_timers))
        self._last_claims: float | None = None
        self._last_sample_ms = 0.0
        self._postmaster: int | None = None  # the local Postgres server's postmaster, when we can follow it
        self._lock = asyncio.Lock()
        self._statements0: dict[tuple, dict[str, Any]] | None = None
        self._window_conn: psycopg.AsyncConnection | None = None  # holds the window lock (pgcost)
        self.statements_reset = False  # whether this window's start reset the statements
        self.errors = 0
        self.last_error: str | None = None

    async def open(self) -> None:
        """Connect and take the baseline (call after setup, before arming)."""
        if self.dsn:
            await self._connect()
            await self._resolve()
            await self._find_postgres()
            await self._pg_sample(baseline=True)
        for srv in self.servers:
            if srv.roots is not None:
                self._trees[srv.name] = ProcessTree(srv.roots)
            self.unavailable.update({f"{srv.name}_{k}": v for k, v in srv.unavailable.items()})
        for tree in self._trees.values():
            tree.sample()
        if any(srv.metrics_url for srv in self.servers):
            import aiohttp

            self._http = aiohttp.ClientSession()
            await self._scrape(baseline=True)
        self._last_claims = self._claims()
        self.start = self._last_t = time.time()
        self._last_rows = self.recorder.rows

    async def _connect(self) -> None:
        self._conn = await psycopg.AsyncConnection.connect(
            self.dsn, autocommit=True, connect_timeout=10, application_name="timerbench-sampler"
        )
        if self._postmaster is not None:  # a restarted server has a new postmaster: follow it
            _, backend_pid = await pgcost.server_info(self._conn)
            self._postmaster = postmaster_of(backend_pid, self._conn.info.host or "") or self._postmaster

    async def _edge_conn(self) -> psycopg.AsyncConnection:
        """A connection of its own for the slow edge statements (CHECKPOINT, statements, pgstattuple),
        so the per-second samples never wait behind them."""
        return await psycopg.AsyncConnection.connect(
            self.dsn, autocommit=True, connect_timeout=10, application_name="timerbench-sampler-edges"
        )

    async def close(self) -> None:
        await self._close_window_conn()
        if self._conn is not None:
            await self._conn.close()
            self._conn = None
        if self._http is not None:
            await self._http.close()
            self._http = None

    async def _find_postgres(self) -> None:
        """Which server counters this Postgres has, and whether its processes are ours to read."""
        version_num, backend_pid = await pgcost.server_info(self._conn)
        self._counters_sql = pgcost.counters_query(version_num)
        if self._counters_sql is None:
            self.unavailable["wal_records"] = (
                f"pg_stat_wal needs Postgres 14 or later (server_version_num {version_num})"
            )
        if version_num < pgcost.PG_STAT_IO_FROM:
            self.unavailable["postgres_io"] = (
                f"pg_stat_io counts bytes from Postgres 18 (server_version_num {version_num})"
            )
        host = self._conn.info.host or ""
        self._postmaster = postmaster_of(backend_pid, host)
        if self._postmaster is None:
            self.unavailable["postgres_process"] = (
                f"the Postgres server at {host or 'its socket'} is not a process on this machine that we can "
                f"follow, so its processes' disk writes and CPU are not measured (WAL and pg_stat_io are)"
            )
        else:
            self._trees[POSTGRES] = ProcessTree(lambda: [self._postmaster])

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
        wal_pos, oldest, xmin_age_s, xmin_age_xids = await (await conn.execute(SQL["run_stats"])).fetchone()
        rows = []
        if self._scopes:
            rows = await (await conn.execute(SQL["relation_stats"], {"relids": list(self._scopes)})).fetchall()
        server = await pgcost.server_counters(conn, self._counters_sql) if self._counters_sql else {}
        if baseline:
            self._wal0 = float(wal_pos)
            for r in rows:
                scope = self._scopes[int(r[0])]
                for name, v in zip(DELTA_METRICS, (r[3], r[4], r[5], r[6], r[7], r[8])):
                    self._base[(scope, name)] = float(v or 0)
            self._server_base = server
            return
        self._add(t, "run", "wal_bytes", float(wal_pos) - (self._wal0 or float(wal_pos)))
        self._add(t, "run", "oldest_xact_age_s", float(oldest))
        self._add(t, "run", "oldest_xmin_age_s", float(xmin_age_s))  # how long the horizon has been held
        self._add(t, "run", "oldest_xmin_age_xids", float(xmin_age_xids))
        pg = server_scope(POSTGRES)
        for name, v in server.items():
            # a restarted server starts its counters again: count from there
            base = self._server_base.setdefault(name, v)
            if v < base:
                self._server_base[name] = base = v - self.latest.get((pg, name), 0.0)
            self._add(t, pg, name, v - base)
        if "io_write_bytes" in server:  # what Postgres says it wrote to its files: its bytes_written
            self._add(t, pg, "bytes_written", self.latest[(pg, "io_write_bytes")])
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

    async def _scrape(self, baseline: bool = False) -> None:
        for srv in self.servers:
            if not srv.metrics_url or self._http is None:
                continue
            try:
                values = await scrape(self._http, srv.metrics_url, SCRAPE_TIMEOUT_S)
            except Exception as exc:
                self._note_error(exc)
                if baseline:
                    self.unavailable[f"{srv.name}_metrics"] = (
                        f"the metrics endpoint {srv.metrics_url} did not answer ({type(exc).__name__}: {exc})"
                    )
                continue
            if baseline or srv.name not in self._scrape_base:
                self._scrape_base[srv.name] = dict(values)
            base = self._scrape_base[srv.name]
            before = self._scraped.get(srv.name, {})
            scraped = {}
            for k, v in values.items():
                b = base.setdefault(k, 0.0)
                if v - b < before.get(k, 0.0):  # the server restarted (a fault): its counters began again
                    b = base[k] = v - before.get(k, 0.0)
                scraped[k] = v - b
            self._scraped[srv.name] = scraped
        self._last_scrape = time.time()

    def _server_sample(self, t: float) -> None:
        watched = {srv.name: srv for srv in self.servers}
        for name, tree in self._trees.items():
            values = tree.sample()
            if tree.error:
                self.unavailable.setdefault(f"{name}_process", tree.error)
            for metric, v in values.items():
                self._add(t, server_scope(name), metric, v)
            if name in watched:  # a server without its own I/O statistics: what the kernel charged it
                self._add(t, server_scope(name), "bytes_written", values[watched[name].bytes_written_from])
        for srv in self.servers:
            if srv.files:
                self._add(t, server_scope(srv.name), "file_bytes", file_bytes(srv.files))
            for metric, v in self._scraped.get(srv.name, {}).items():
                self._add(t, server_scope(srv.name), metric, v)

    async def sample(self, edge: bool = False) -> None:
        """One sample of everything; ``edge``: at an edge of the measured window (the slower
        reads are taken too)."""
        async with self._lock:
            began = time.perf_counter()
            t = time.time()
            await self._sample(t, edge)
            self._last_sample_ms = (time.perf_counter() - began) * 1000.0

    async def _sample(self, t: float, edge: bool) -> None:
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
        self._add(t, "run", "sample_ms", self._last_sample_ms)
        for name, value in stats.items():
            self._add(t, "run", f"backend.{name}", value)
        if self.gauges is not None:
            for name, value in self.gauges(t).items():
                self._add(t, "run", name, value)
        try:
            await asyncio.wait_for(self._pg_sample(t=t), STATS_TIMEOUT_S)
        except Exception as exc:
            self._note_error(exc)
        if edge or time.time() - self._last_scrape >= SCRAPE_EVERY_S:
            await self._scrape()
        self._server_sample(t)
        self._last_t = t
        self._last_rows = rows

    # -- the measured window's edges ---------------------------------------------------------

    async def checkpoint(self) -> dict[str, Any]:
        """CHECKPOINT (before the window opens); when it started and finished, or why it failed."""
        out: dict[str, Any] = {"started_at": time.time(), "finished_at": None, "error": None}
        if not self.dsn:
            return out
        try:
            async with await self._edge_conn() as conn:
                await asyncio.wait_for(pgcost.checkpoint(conn), EDGE_TIMEOUT_S)
            out["finished_at"] = time.time()
        except Exception as exc:
            out["error"] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
        return out

    async def window_start(self) -> None:
        """At the window's start: statements reset (embedded) and read, then an edge sample."""
        schema = self.extensions.get("pg_stat_statements")
        if self.dsn and schema:
            try:
                # kept open to the window's end: it holds the lock that keeps other runs from
                # resetting the statements inside this window
                self._window_conn = conn = await self._edge_conn()
                self.statements_reset = await asyncio.wait_for(
                    pgcost.open_statements_window(conn, schema, self.reset_statements), EDGE_TIMEOUT_S
                )
                self._statements0 = await asyncio.wait_for(pgcost.read_statements(conn, schema), EDGE_TIMEOUT_S)
            except Exception as exc:
                await self._close_window_conn()
                self.unavailable["statements"] = f"pg_stat_statements could not be read at the window's start ({exc})"
                self._note_error(exc)
        await self.sample(edge=True)

    async def window_end(self) -> None:
        """At the window's end: an edge sample, then the statements' cost over the window."""
        await self.sample(edge=True)
        schema = self.extensions.get("pg_stat_statements")
        if not (self.dsn and schema) or self._statements0 is None:
            return
        try:
            conn = self._window_conn
            if conn is None or conn.closed:  # lost since the start (a restarted server): the lock too
                conn = self._window_conn = await self._edge_conn()
            end = await asyncio.wait_for(pgcost.read_statements(conn, schema), EDGE_TIMEOUT_S)
            write_statements(self.run_dir, pgcost.statement_deltas(self._statements0, end))
        except Exception as exc:
            self.unavailable["statements"] = f"pg_stat_statements could not be read at the window's end ({exc})"
            self._note_error(exc)
        finally:
            await self._close_window_conn()

    async def _close_window_conn(self) -> None:
        conn, self._window_conn = self._window_conn, None
        if conn is not None:
            try:
                await conn.close()
            except Exception:
                pass

    async def bloat(self) -> None:
        """At the end of the run (the workers stopped): pgstattuple of every table the design owns
        and of its TOAST table, beside n_dead_tup read at the same moment; ``bloat.json``."""
        schema = self.extensions.get("pgstattuple")
        if not (self.dsn and schema and self._names):
            return
        await asyncio.sleep(STATS_FLUSH_S)  # the stopped workers' last counters reach the statistics
        relations = []
        try:
            if len(self._scopes) < len(self._names) and self._conn is not None and not self._conn.closed:
                await self._resolve()
            async with await self._edge_conn() as conn:
                for relid, scope in sorted(self._scopes.items(), key=lambda kv: kv[1]):
                    stats = await asyncio.wait_for(pgcost.tuple_stats(conn, schema, relid), BLOAT_TIMEOUT_S)
                    relations.append({"scope": scope, **stats})
        except Exception as exc:
            self.unavailable["bloat"] = f"pgstattuple failed at the end of the run ({type(exc).__name__}: {exc})"
            self._note_error(exc)
            return
        write_bloat(self.run_dir, relations)

    # -- readers ----------------------------------------------------------------------------

    def relation_total(self, metric: str, toast: bool = False) -> float | None:
        """Latest ``metric`` summed over the tables (or over their TOAST tables)."""
        vals = [
            v
            for (scope, m), v in self.latest.items()
            if m == metric and is_relation_scope(scope) and scope.endswith(TOAST_SUFFIX) == toast
        ]
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
        """Sample every ``every_s`` until ``stop`` (never, with 0: the edges still sample); close a
        segment every ``SEGMENT_EVERY_SAMPLES`` samples, written in the background. Awaiting the
        write stopped the sampling: on a busy machine it took 2-7 s, a hole in every run's
        samples. One write at a time (a segment whose turn comes while the last one is still being
        written keeps its rows for the next turn), and the last one has finished when this
        returns."""
        if self.every_s <= 0:
            await stop.wait()
            return
        n = 0
        saving: asyncio.Task | None = None
        next_t = time.time() + self.every_s
        try:
            while not stop.is_set():
                try:
                    await asyncio.wait_for(stop.wait(), max(0.0, next_t - time.time()))
                    break
                except TimeoutError:
                    pass
                next_t += self.every_s
                if next_t < time.time():
                    next_t = time.time() + self.every_s  # fell behind: skip, do not burst
                await self.sample()
                n += 1
                if n % SEGMENT_EVERY_SAMPLES == 0 and (saving is None or saving.done()):
                    saving = asyncio.create_task(self.save_async())
        finally:
            if saving is not None:
                (result,) = await asyncio.gather(saving, return_exceptions=True)
                if isinstance(result, Exception):
                    self._note_error(result)
