"""pgqueuer: PgQueuer (``pgqueuer``, pinned in pyproject), the Postgres job queue built on
LISTEN/NOTIFY and ``FOR UPDATE SKIP LOCKED``, driven the way its documentation builds recurring
work from jobs: a trigger is a job enqueued with ``execute_after`` (the delay to its fire time)
and a ``dedupe_key``; PgQueuer's ``QueueManager`` runs the processor in the job's entrypoint,
which enqueues the trigger's next run.

The trigger rows, the poll state and the keyed effects live beside PgQueuer's tables in the
run's schema (``schedulers/job_triggers.py``, which says how a fire reads, commits and fences).
The next job is enqueued through PgQueuer's ``Queries.enqueue`` **on the connection of the fire's
own commit** (a ``PsycopgDriver`` over it: PgQueuer only asks for an autocommit connection, and
``conn.transaction()`` still opens one), so a re-arm and its job commit together; ``arm``
likewise upserts, cancels and enqueues in one transaction.

The dedupe key is ``<trigger id>@<version>``, not the trigger id: PgQueuer's dedupe index covers
picked jobs as well as queued ones, so a job re-arming its own trigger under the trigger's id
would collide with itself (``DuplicateJobError``), and so would a move that lands while the
trigger's job runs. Per version, it still refuses a second job for one armed fire.

Moving an armed timer: the superseded version's queued job is cancelled with PgQueuer's
``mark_job_as_cancelled`` (it deletes the row, logs ``canceled`` and NOTIFYs), its id read by
its dedupe key; a job already picked is left to finish, and the version fence makes its commit a
no-op, so the move's job fires instead.

Crash and recovery: PgQueuer's ``QueueManager``, cancelled, logs its running jobs ``canceled``
(which deletes them); a crash here closes its connection first (see ``job_triggers``), so the
jobs stay ``picked`` with a heartbeat that stops. PgQueuer's own dequeue re-picks a picked job
whose heartbeat is older than ``heartbeat_timeout``: that is its lease, and no sweeper is
needed. PgQueuer does not count that re-pick as an attempt (only a ``RetryRequested`` bumps
``attempts``), so a fire redelivered after a crash reports ``Fire.attempt`` 1 again: the
library's own count, kept as it is.

Settings (``default_options``), each with its reason:

* ``driver=asyncpg``: one asyncpg connection per run loop for the QueueManager (dequeue,
  heartbeats, status log, LISTEN), ``AsyncpgDriver(connection)``, as PgQueuer's quickstart sets
  it up and its CLI chooses first; the fires' reads, commits and enqueues use this design's
  psycopg pool. ``driver=psycopg`` (``PsycopgDriver``) is the other way PgQueuer supports:
  psycopg's ``notifies()`` holds the connection's lock while it waits (PgQueuer's watcher waits
  up to 1 s), so the QueueManager's queries wait for the next NOTIFY or that second; at this
  project's rates a NOTIFY comes every few milliseconds, and the two measured alike
  (``MEASUREMENTS.md``).
* ``batch_size=10`` (PgQueuer's default) jobs per dequeue.
* ``max_concurrent_tasks=100``: at 556 fires/s with the production provider latency (120 ms
  median, 900 ms p99) about 70 polls are in flight on average; the library's default is
  unlimited, which lets one worker pick a whole backlog it cannot run.
* ``lease_s=30`` (``heartbeat_timeout``, PgQueuer's default; heartbeats at half of it).
* ``dequeue_timeout_s=5``: the longest an idle QueueManager waits between dequeues when no
  NOTIFY comes and nothing deferred is due sooner (PgQueuer shortens the wait to the next
  ``execute_after`` by itself). Only a dequeue re-picks a stale job, so this bounds redelivery
  after a crash; PgQueuer's default (30 s) would add 30 s to it.
* ``retry``: the entrypoint runs under PgQueuer's ``DatabaseRetryEntrypointExecutor`` (5
  attempts, 1 s doubling backoff); without it a job that raised is deleted (``on_failure``
  "delete") and its trigger's chain with it.
* ``log_aggregation_interval`` PgQueuer's default (30 s): ``pgqueuer_log`` gets a row per
  status change (queued, picked... successful) and is folded into ``pgqueuer_statistics``.
* ``fillfactor_pct=50`` on the trigger rows; PgQueuer's tables keep PgQueuer's settings.

Capabilities, honestly:

* ``max_lag_s`` = ``dispatch_allowance_s`` (20 s): PgQueuer wakes at the next ``execute_after``
  by itself (at least every 0.1 s), so the bound is per-job overhead under load: a dequeue per
  batch, heartbeats, a status-log write per job, and this design's read, commit and enqueue.
  On this 2-core machine, shared at load ~20, one QueueManager held ~22 fires/s, so a burst of
  400 timers due at once (the conformance suite's) takes ~18 s; the allowance covers that.
* ``per_tenant_fairness`` off: PgQueuer dequeues by priority, then id; its concurrency limits
  are per entrypoint, not per tenant.
* ``heartbeat_leases`` on: a live worker heartbeats every job it runs, so a slow job keeps it.
* ``redelivery_s`` = ``lease_s`` + ``dequeue_timeout_s`` + 2 s.
* ``cancel`` on: ``disarm`` clears the row and cancels the queued job.

On the bill (``relations``): every table in the run's schema after PgQueuer's installer ran
there (``pgqueuer``, ``pgqueuer_log``, ``pgqueuer_statistics``, ``pgqueuer_schedules`` today),
so a table a release adds is counted without a change here; before setup, the tables PgQueuer's
settings name, and ours.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
from pgqueuer import PsycopgDriver, Queries, QueueManager
from pgqueuer.adapters.persistence import qb
from pgqueuer.domain.settings import DBSettings
from pgqueuer.executors import DatabaseRetryEntrypointExecutor
from pgqueuer.models import Job
from psycopg.conninfo import conninfo_to_dict

from schedulers.base import Capabilities, Processor, Range, StoreContext, Timer, nap, resolve_options
from schedulers.job_triggers import OUR_TABLES, JobTriggers, Pending, RunState, search_path_options
from schedulers.pg import qualified, storage_options
from schedulers.sqlfile import Queries as SqlQueries

HERE = Path(__file__).parent
log = logging.getLogger(__name__)
ENTRYPOINT = "timerbench_fire"  # the one PgQueuer entrypoint: fire a trigger's job
DRIVERS = ("asyncpg", "psycopg")


async def close_connection(conn: Any, hard: bool) -> None:
    """Close the QueueManager's connection; ``hard``: at once, as a dead process's would (asyncpg's
    ``terminate``; psycopg's ``close`` is immediate anyway)."""
    if isinstance(conn, psycopg.AsyncConnection):
        await conn.close()
    elif hard:
        conn.terminate()
    elif not conn.is_closed():
        await conn.close(timeout=5)


def dedupe_key(trigger_id: str, version: int) -> str:
    return f"{trigger_id}@{version}"


class PgqueuerScheduler:
    name = "pgqueuer"
    description = "PgQueuer: a job per fire (execute_after, dedupe_key), re-armed by the entrypoint, on Postgres"
    default_options: dict[str, Any] = {
        # the QueueManager's connection: asyncpg (PgQueuer's CLI tries it first) or psycopg
        "driver": "asyncpg",
        "batch_size": 10,  # jobs per dequeue (PgQueuer's default)
        "max_concurrent_tasks": 100,  # jobs one QueueManager runs at once (PgQueuer's default: unlimited)
        "lease_s": 30.0,  # heartbeat_timeout: a picked job silent this long is re-picked (default 30)
        "dequeue_timeout_s": 5.0,  # an idle QueueManager's longest wait between dequeues (default 30)
        "retry_attempts": 5,  # DatabaseRetryEntrypointExecutor max_attempts (its default)
        "dispatch_allowance_s": 20.0,  # seconds of per-job overhead a fire may take (see the lag bound)
        "pool_size": 20,  # this design's pool (arms, reads, commits and the enqueues inside them)
        **storage_options(fillfactor_pct=50),
    }
    conformance_options: dict[str, Any] = {
        "lease_s": 2.0,
        "dequeue_timeout_s": 0.25,
        "max_concurrent_tasks": 40,
        "pool_size": 12,
    }
    needs_postgres = True
    needs_temporal = False
    option_ranges: dict[str, Range] = {
        "batch_size": Range(lo=1),
        "max_concurrent_tasks": Range(lo=2),
        "lease_s": Range(lo=0, open=True),
        "dequeue_timeout_s": Range(lo=0.01),
        "retry_attempts": Range(lo=0),
        "pool_size": Range(lo=1),
    }

    def __init__(self, ctx: StoreContext, **options: Any) -> None:
        self.options = o = resolve_options(self.name, self.default_options, options, self.option_ranges)
        if o["driver"] not in DRIVERS:
            raise ValueError(f"{self.name}: driver must be one of {', '.join(DRIVERS)}, got {o['driver']!r}")
        if int(o["max_concurrent_tasks"]) < 2 * int(o["batch_size"]):
            raise ValueError(f"{self.name}: max_concurrent_tasks must be at least twice batch_size (PgQueuer's rule)")
        self.ctx = ctx
        self.rows = JobTriggers(self.name, ctx, o, self._defer, self._cancel)
        self.lease_s = float(o["lease_s"])
        self.capabilities = Capabilities(
            max_lag_s=float(o["dispatch_allowance_s"]),
            per_tenant_fairness=False,  # dequeued by priority, then id: no dequeue sees a tenant
            heartbeat_leases=True,  # PgQueuer heartbeats every running job: a slow one keeps it
            redelivery_s=self.lease_s + float(o["dequeue_timeout_s"]) + 2.0,
            cancel=True,  # disarm: the row is cleared and the queued job cancelled
            multi_runner=True,
            at_least_once=True,
        )
        self.q = SqlQueries(HERE / "queries.sql", ctx.schema)
        # PgQueuer's query builders, made once (each reads PgQueuer's settings) and shared by the
        # Queries this design makes over its own connections.
        self._builders = dict(
            qbe=qb.QueryBuilderEnvironment(), qbq=qb.QueryQueueBuilder(), qbs=qb.QuerySchedulerBuilder()
        )
        self._relations: list[str] | None = None
        self.last_tick_at = 0.0
        self.workers_started = 0

    @property
    def claimed_timers(self) -> int:
        return self.rows.claimed_timers

    def _queries(self, conn: psycopg.AsyncConnection) -> Queries:
        return Queries(PsycopgDriver(conn), **self._builders)

    # -- lifecycle -------------------------------------------------------------------------------

    async def setup(self) -> None:
        await self.rows.setup_rows()
        if not await self.rows.table_exists(DBSettings().queue_table):
            # PgQueuer's own installer, on a connection whose search_path is the run's schema
            pool = await self.rows.open()
            async with pool.connection() as conn:
                await self._queries(conn).install()
        self._relations = await self.rows.schema_tables()

    async def teardown(self, drop: bool = True) -> None:
        await self.rows.close(drop)
        if drop:
            self._relations = None

    def relations(self) -> list[str]:
        """Every table in the run's schema after PgQueuer's installer ran there; before setup,
        the tables PgQueuer's settings name, and ours."""
        if self._relations is not None:
            return list(self._relations)
        s = DBSettings()
        theirs = {s.queue_table, s.queue_table_log, s.statistics_table, s.schedules_table}
        return [qualified(self.ctx.schema, n) for n in sorted(theirs | set(OUR_TABLES))]

    # -- the library's side of arming -------------------------------------------------------------

    async def _defer(self, conn: psycopg.AsyncConnection, pending: list[Pending]) -> None:
        now = time.time()
        await self._queries(conn).enqueue(
            [ENTRYPOINT] * len(pending),
            [json.dumps({"trigger_id": p.trigger_id, "version": p.version}).encode() for p in pending],
            [p.priority for p in pending],
            # PgQueuer stores now() + the delay; fire() never fires before the row's fire time
            [timedelta(seconds=max(0.0, p.fire_at - now)) for p in pending],
            [dedupe_key(p.trigger_id, p.version) for p in pending],
        )

    async def _cancel(self, conn: psycopg.AsyncConnection, superseded: list[tuple[str, int]]) -> int:
        keys = [dedupe_key(tid, version) for tid, version in superseded]
        ids = [r[0] for r in await (await conn.execute(self.q["pending_jobs"], {"keys": keys})).fetchall()]
        if ids:
            await self._queries(conn).mark_job_as_cancelled(ids)
        return len(ids)

    async def arm(self, timers) -> None:
        await self.rows.arm(timers)

    async def disarm(self, ids) -> int:
        return await self.rows.disarm(ids)

    async def export_armed(self) -> list[Timer]:
        return await self.rows.export(self.q["export_armed"])

    async def stats(self) -> dict[str, float]:
        """In-process counters only (no query: the sampler reads this every second)."""
        return {**self.rows.gauges(), "workers_started": float(self.workers_started)}

    # -- the run loop ----------------------------------------------------------------------------

    async def _qm_connection(self, worker: str) -> tuple[Any, Any]:
        """The QueueManager's own connection (search_path on the run's schema) and its driver."""
        name = self.rows.application_name(worker)
        if self.options["driver"] == "psycopg":
            conn = await psycopg.AsyncConnection.connect(
                self.ctx.dsn,
                autocommit=True,
                application_name=name,
                options=search_path_options(self.name, self.ctx.schema),
            )
            return conn, PsycopgDriver(conn)
        import asyncpg
        from pgqueuer.adapters.drivers.asyncpg import AsyncpgDriver

        p = conninfo_to_dict(self.ctx.dsn)
        search_path_options(self.name, self.ctx.schema)  # the same check as psycopg's connections
        conn = await asyncpg.connect(
            host=p.get("host"),
            port=int(p["port"]) if p.get("port") else None,
            user=p.get("user"),
            password=p.get("password"),
            passfile=p.get("passfile"),  # the embedded server's password lives in a passfile
            database=p.get("dbname"),
            server_settings={"search_path": self.ctx.schema, "application_name": name},
        )
        return conn, AsyncpgDriver(conn)

    async def run(self, processors: Mapping[str, Processor], stop: asyncio.Event, worker_id: str | None = None) -> None:
        o = self.options
        run = RunState(processors, worker_id or f"pgqueuer-{os.getpid()}-{os.urandom(3).hex()}")
        await self.rows.open()
        conn, driver = await self._qm_connection(run.worker)
        qm = QueueManager(Queries(driver, **self._builders))
        rows = self.rows

        @qm.entrypoint(
            ENTRYPOINT,
            executor_factory=lambda p: DatabaseRetryEntrypointExecutor(p, max_attempts=int(o["retry_attempts"])),
        )
        async def fire(job: Job) -> None:
            args = json.loads(job.payload or b"{}")
            await rows.fire(run, args["trigger_id"], int(args["version"]), int(job.attempts) + 1)

        self.workers_started += 1
        worker = asyncio.create_task(
            qm.run(
                dequeue_timeout=timedelta(seconds=float(o["dequeue_timeout_s"])),
                batch_size=int(o["batch_size"]),
                max_concurrent_tasks=int(o["max_concurrent_tasks"]),
                heartbeat_timeout=timedelta(seconds=self.lease_s),
            )
        )
        try:
            while not stop.is_set() and not worker.done():
                self.last_tick_at = time.time()
                await nap(0.5, stop)
            if worker.done():  # the QueueManager stopped by itself: say why
                worker.result()
                raise RuntimeError(f"{self.name}: PgQueuer's QueueManager {run.worker} stopped")
            qm.shutdown.set()  # PgQueuer's graceful stop: running jobs finish and are logged
            await asyncio.wait({worker})
        except asyncio.CancelledError:
            # A crash: sever the QueueManager's connection first, so that nothing it does on the
            # way out (log its jobs canceled, heartbeat) reaches the database; then its jobs
            # abandon their polls.
            with contextlib.suppress(Exception):
                await close_connection(conn, hard=True)
            run.crashed.set()
            worker.cancel()
            await asyncio.wait({worker}, timeout=30)
            raise
        finally:
            if not worker.done():
                worker.cancel()
                await asyncio.wait({worker}, timeout=30)
            if worker.done() and not worker.cancelled():
                exc = worker.exception()  # retrieved either way: after a crash it is the closed connection's
                if exc is not None and not run.crashed.is_set():
                    log.warning("%s: QueueManager %s ended with %r", self.name, run.worker, exc)
            with contextlib.suppress(Exception):
                await close_connection(conn, hard=False)
