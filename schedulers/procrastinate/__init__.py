"""procrastinate: the Postgres job library a Python team would pick (``procrastinate``, pinned in
pyproject), driven the way its documentation builds recurring work: a trigger is a job deferred
with ``schedule_at`` its fire time and ``queueing_lock`` its trigger id; when it runs, the task
polls and defers the trigger's next run; procrastinate's worker (its concurrency, its
LISTEN/NOTIFY wake-up, its heartbeats) runs the processor.

The trigger rows, the poll state and the keyed effects live beside procrastinate's tables in the
run's schema (``schedulers/job_triggers.py``, which says how a fire reads, commits and fences).
The next job is deferred through procrastinate's API **on the connection of the fire's own
commit** (``configure(connection=...)``, the library's way to defer inside a transaction), so a
re-arm and its job commit together; ``arm`` likewise upserts, cancels and defers in one
transaction.

Moving an armed timer, as procrastinate's docs offer it: cancel the pending job
(``cancel_job_by_id_async(..., delete_job=True)`` on the arm's connection; its id is read from
procrastinate's table by the queueing lock, which procrastinate indexes among todo jobs) and
defer again. A job already running when the move lands cannot be cancelled (procrastinate only
aborts it); the version fence makes its commit a no-op and the move's job fires instead. The
queueing lock stays one job per trigger among todo jobs, so a bug that deferred a second pending
job would fail loudly (``AlreadyEnqueued``) instead of firing twice.

Crash and recovery: procrastinate's worker, cancelled, shuts down gracefully (it waits for its
jobs and unregisters itself), so a crash here closes the worker's pool first (see
``job_triggers``): its running jobs stay ``doing`` under a worker whose heartbeat stops.
procrastinate does not retry those by itself; its documentation's recipe is a periodic task
that calls ``get_stalled_jobs`` and ``retry_job``. Each run loop runs that recipe as a sweeper
every ``sweep_s`` (``seconds_since_heartbeat=lease_s``): a stalled job goes back to ``todo``
with ``attempts + 1`` and runs again (``Fire.attempt`` 2) unless its commit had gone through.

Settings (``default_options``), each with its reason:

* ``concurrency=100``: procrastinate runs one job per slot; at 556 fires/s with the production
  provider latency (120 ms median, 900 ms p99) about 70 polls are in flight on average, more in
  the tail. The library's default (1) would hold ~8 fires/s.
* ``fetch_job_polling_interval_s=0.5``: a job deferred with ``schedule_at`` is inserted (and
  NOTIFYed) when it is deferred, not when it comes due, so for scheduled work the polling
  interval is the fire precision; the library's default (5 s) would be the lag. Every defer
  still NOTIFYs, and each notification sends the worker to fetch (and find nothing due).
* ``listen_notify=True`` (the default): a job due now (``fire_at`` None, a move to the past)
  starts without waiting for a poll.
* ``delete_jobs="successful"``: the docs' setting for a high-volume queue; the default
  ("never") keeps a finished row per fire forever (556 a second). Failed jobs are kept for
  inspection. A job cancelled by a move is deleted too (``delete_job=True``).
* ``lease_s=30`` (``stalled_worker_timeout``, procrastinate's default) and a heartbeat every
  ``lease_s / 3`` (``update_heartbeat_interval``, 10 s by default); ``sweep_s=5``.
* ``retry``: ``max_attempts=5``, ``wait=1 s``; without a retry strategy a job that raised (a
  transient database error in the commit) ends ``failed`` and its trigger's chain with it.
* ``pool_size=20`` per run loop for procrastinate's worker pool, 20 for this design's pool.
* ``fillfactor_pct=50`` on the trigger rows (the storage knobs of ``schedulers/pg.py``);
  procrastinate's tables keep procrastinate's storage settings.

Capabilities, honestly:

* ``max_lag_s`` = ``fetch_job_polling_interval_s`` + ``dispatch_allowance_s`` (20 s): each
  job costs procrastinate a fetch (one job per call, one call after another), a status update
  and an event row on the way in and a delete on the way out, plus this design's read, commit
  and defer. On this 2-core machine, shared at load ~20, one worker fetched 25-60 jobs/s, so the
  conformance suite's burst of 400 timers due within a second took up to ~16 s to fire with two
  workers; the allowance covers that with the suite's slack on top.
* ``per_tenant_fairness`` off: procrastinate fetches by priority, then job id; no fetch sees a
  tenant.
* ``heartbeat_leases`` on: a slow job in a live worker keeps its worker's heartbeat, so the
  stalled-jobs recipe does not take it.
* ``redelivery_s`` = ``lease_s`` + ``sweep_s`` + the polling interval + 2 s.
* ``cancel`` on: ``disarm`` clears the row and cancels the pending job.

On the bill (``relations``): every table in the run's schema after procrastinate's installer ran
there (``procrastinate_jobs``, ``procrastinate_events``, ``procrastinate_workers``,
``procrastinate_periodic_defers`` today), so a table a release adds is counted without a
change here; before setup, the tables procrastinate's schema SQL creates, and ours.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import procrastinate
import psycopg
from procrastinate.schema import SchemaManager

from schedulers.base import Capabilities, Processor, Range, StoreContext, Timer, nap, resolve_options
from schedulers.job_triggers import OUR_TABLES, Crash, JobTriggers, Pending, RunState, search_path_options
from schedulers.pg import qualified, storage_options
from schedulers.sqlfile import Queries

HERE = Path(__file__).parent
log = logging.getLogger(__name__)
TASK = "timerbench_fire"  # the one procrastinate task: fire a trigger's job
DELETE_JOBS = ("never", "successful", "always")


class ProcrastinateScheduler:
    name = "procrastinate"
    description = "procrastinate: a job per fire (schedule_at, queueing_lock), re-armed by the task, on Postgres"
    default_options: dict[str, Any] = {
        "concurrency": 100,  # jobs one worker runs at once (procrastinate's default is 1)
        "fetch_job_polling_interval_s": 0.5,  # seconds between fetches when no NOTIFY came (default 5)
        "listen_notify": True,  # procrastinate's LISTEN/NOTIFY wake-up (its default)
        "delete_jobs": "successful",  # never | successful | always (default never)
        "lease_s": 30.0,  # stalled_worker_timeout: a worker silent this long is dead (default 30)
        "heartbeat_fraction": 1 / 3,  # update_heartbeat_interval as a fraction of lease_s (default 10 s)
        "sweep_s": 5.0,  # seconds between stalled-job sweeps (get_stalled_jobs + retry_job), per run loop
        "retry_attempts": 5,  # RetryStrategy max_attempts of the task
        "retry_wait_s": 1.0,  # RetryStrategy wait, seconds
        "dispatch_allowance_s": 20.0,  # seconds of per-job overhead a fire may take (see the lag bound)
        "worker_pool_size": 20,  # procrastinate's pool per run loop
        "pool_size": 20,  # this design's pool (arms, reads, commits and the defers inside them)
        **storage_options(fillfactor_pct=50),
    }
    conformance_options: dict[str, Any] = {
        "lease_s": 2.0,
        "sweep_s": 0.25,
        "fetch_job_polling_interval_s": 0.1,
        "concurrency": 40,
        "worker_pool_size": 8,
        "pool_size": 12,
    }
    needs_postgres = True
    needs_temporal = False
    option_ranges: dict[str, Range] = {
        "concurrency": Range(lo=1),
        "fetch_job_polling_interval_s": Range(lo=0.01),
        "lease_s": Range(lo=0, open=True),
        "heartbeat_fraction": Range(0, 1, open=True),
        "sweep_s": Range(lo=0.01),
        "retry_attempts": Range(lo=0),
        "worker_pool_size": Range(lo=2),
        "pool_size": Range(lo=1),
    }

    def __init__(self, ctx: StoreContext, **options: Any) -> None:
        self.options = o = resolve_options(self.name, self.default_options, options, self.option_ranges)
        if o["delete_jobs"] not in DELETE_JOBS:
            raise ValueError(
                f"{self.name}: delete_jobs must be one of {', '.join(DELETE_JOBS)}, got {o['delete_jobs']!r}"
            )
        self.ctx = ctx
        self.rows = JobTriggers(self.name, ctx, o, self._defer, self._cancel)
        self.lease_s = float(o["lease_s"])
        poll_s = float(o["fetch_job_polling_interval_s"])
        self.capabilities = Capabilities(
            max_lag_s=poll_s + float(o["dispatch_allowance_s"]),
            per_tenant_fairness=False,  # fetched by priority, then id: no fetch sees a tenant
            heartbeat_leases=True,  # the worker's heartbeat keeps a slow job from the stalled-jobs sweep
            redelivery_s=self.lease_s + float(o["sweep_s"]) + poll_s + 2.0,
            cancel=True,  # disarm: the row is cleared and the pending job cancelled
            multi_runner=True,
            at_least_once=True,
        )
        self.q = Queries(HERE / "queries.sql", ctx.schema)
        # The app arm() and commits defer through: its defers and cancels run on our own
        # transactions' connections, so it never opens a pool of its own.
        self.app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=ctx.dsn or ""))
        self._relations: list[str] | None = None
        self.last_tick_at = 0.0
        self.workers_started = 0
        self.stalled_retried = 0

    @property
    def claimed_timers(self) -> int:
        return self.rows.claimed_timers

    # -- lifecycle -------------------------------------------------------------------------------

    async def setup(self) -> None:
        await self.rows.setup_rows()
        if not await self.rows.table_exists("procrastinate_jobs"):
            # procrastinate's own installer SQL, on a connection whose search_path is the run's schema
            pool = await self.rows.open()
            async with pool.connection() as conn:
                async with conn.transaction():
                    await conn.execute(SchemaManager.get_schema())
        self._relations = await self.rows.schema_tables()

    async def teardown(self, drop: bool = True) -> None:
        await self.rows.close(drop)
        if drop:
            self._relations = None

    def relations(self) -> list[str]:
        """Every table in the run's schema after procrastinate's installer ran there; before
        setup, the tables procrastinate's schema SQL creates, and ours."""
        if self._relations is not None:
            return list(self._relations)
        theirs = re.findall(r"CREATE TABLE (?:IF NOT EXISTS )?(\w+)", SchemaManager.get_schema())
        return [qualified(self.ctx.schema, n) for n in sorted(set(theirs) | set(OUR_TABLES))]

    # -- the library's side of arming -------------------------------------------------------------

    async def _defer(self, conn: psycopg.AsyncConnection, pending: list[Pending]) -> None:
        jobs = [
            self.app.configure_task(
                TASK,
                schedule_at=datetime.fromtimestamp(p.fire_at, tz=UTC),
                queueing_lock=p.trigger_id,
                priority=p.priority,
            ).make_new_job(trigger_id=p.trigger_id, version=p.version)
            for p in pending
        ]
        await self.app.job_manager.batch_defer_jobs_async(jobs, connection=conn)

    async def _cancel(self, conn: psycopg.AsyncConnection, superseded: list[tuple[str, int]]) -> int:
        rows = await (await conn.execute(self.q["pending_jobs"], {"ids": [tid for tid, _ in superseded]})).fetchall()
        n = 0
        for (job_id,) in rows:
            n += bool(await self.app.job_manager.cancel_job_by_id_async(job_id, delete_job=True, connection=conn))
        return n

    async def arm(self, timers) -> None:
        await self.rows.arm(timers)

    async def disarm(self, ids) -> int:
        return await self.rows.disarm(ids)

    async def export_armed(self) -> list[Timer]:
        return await self.rows.export(self.q["export_armed"])

    async def stats(self) -> dict[str, float]:
        """In-process counters only (no query: the sampler reads this every second)."""
        return {
            **self.rows.gauges(),
            "workers_started": float(self.workers_started),
            "stalled_retried": float(self.stalled_retried),
        }

    # -- the run loop ----------------------------------------------------------------------------

    def _worker_app(self, run: RunState) -> procrastinate.App:
        """A procrastinate app of this run loop's own (its own pool, so that a crash can sever
        exactly this worker's connections), with the one task registered on it."""
        o = self.options
        app = procrastinate.App(
            connector=procrastinate.PsycopgConnector(
                conninfo=self.ctx.dsn,
                min_size=1,
                max_size=int(o["worker_pool_size"]),
                kwargs={
                    "application_name": self.rows.application_name(run.worker),
                    "options": search_path_options(self.name, self.ctx.schema),
                },
            )
        )
        rows = self.rows

        @app.task(
            name=TASK,
            pass_context=True,
            retry=procrastinate.RetryStrategy(max_attempts=int(o["retry_attempts"]), wait=float(o["retry_wait_s"])),
        )
        async def fire(context: procrastinate.JobContext, trigger_id: str, version: int) -> None:
            await rows.fire(run, trigger_id, int(version), int(context.job.attempts) + 1)

        return app

    async def run(self, processors: Mapping[str, Processor], stop: asyncio.Event, worker_id: str | None = None) -> None:
        o = self.options
        run = RunState(processors, worker_id or f"procrastinate-{os.getpid()}-{os.urandom(3).hex()}")
        await self.rows.open()
        app = self._worker_app(run)
        await app.open_async()
        self.workers_started += 1
        worker = asyncio.create_task(
            app.run_worker_async(
                name=run.worker,
                concurrency=int(o["concurrency"]),
                fetch_job_polling_interval=float(o["fetch_job_polling_interval_s"]),
                listen_notify=bool(o["listen_notify"]),
                delete_jobs=str(o["delete_jobs"]),
                update_heartbeat_interval=self.lease_s * float(o["heartbeat_fraction"]),
                stalled_worker_timeout=self.lease_s,
                install_signal_handlers=False,
            )
        )
        sweeper = asyncio.create_task(self._sweep(app, stop))
        try:
            while not stop.is_set() and not worker.done():
                self.last_tick_at = time.time()
                await nap(0.5, stop)
            if worker.done():  # the worker stopped by itself: say why
                worker.result()
                raise RuntimeError(f"{self.name}: procrastinate's worker {run.worker} stopped")
            # graceful stop: cancelling procrastinate's worker is its own graceful shutdown
            worker.cancel()
            await asyncio.wait({worker})
        except asyncio.CancelledError:
            # A crash: sever the worker's connections first, so that nothing it does on the way
            # out (finish, abort, unregister) reaches the database; then its jobs abandon their polls.
            with contextlib.suppress(Exception):
                await app.connector.close_async()
            run.crashed.set()
            worker.cancel()
            await asyncio.wait({worker}, timeout=30)
            raise
        finally:
            sweeper.cancel()
            with contextlib.suppress(BaseException):
                await sweeper
            if not worker.done():
                worker.cancel()
            with contextlib.suppress(Exception):
                await app.connector.close_async()
            if worker.done() and not worker.cancelled():
                exc = worker.exception()  # retrieved either way: after a crash it is the severed pool's
                if exc is not None and not run.crashed.is_set() and not isinstance(exc, Crash):
                    log.warning("%s: worker %s ended with %r", self.name, run.worker, exc)

    async def _sweep(self, app: procrastinate.App, stop: asyncio.Event) -> None:
        """procrastinate's documented recipe for a dead worker's jobs: retry the stalled ones."""
        while not stop.is_set():
            await nap(float(self.options["sweep_s"]), stop)
            try:
                for job in await app.job_manager.get_stalled_jobs(seconds_since_heartbeat=self.lease_s):
                    await app.job_manager.retry_job(job)
                    self.stalled_retried += 1
            except Exception as exc:  # a sweep that fails is retried at the next one
                log.warning("%s: stalled-job sweep failed: %r", self.name, exc)
