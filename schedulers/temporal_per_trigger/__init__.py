"""temporal_per_trigger: the Composio article's rejected alternative -- one Temporal workflow per trigger.

the Composio article: "A Temporal workflow for every trigger would give us durable timers, but still leave
us dispatching a separate workflow's poll on every fire." This backend builds that design so the
argument can be measured: no batching, every fire is a timer, a workflow task, an activity and a
second workflow task of its own trigger's workflow.

Data flow:

* ``arm()`` upserts the trigger rows by key (new fire time, version + 1; ``fire_at=None`` is the
  arm time, due now), then sends **one signal-with-start per trigger**: the trigger's workflow
  (``workflows.TriggerWorkflow``, id ``<prefix>-t-<trigger id>``) is started if it is not running,
  or signalled to move.
* The workflow sleeps on a durable timer until the fire time, then runs one poll activity
  (``activities.py``): read the row by key, and only if it is still at the version the workflow
  armed, hand the fire to its type's processor and commit effect (keyed by ``(trigger_id,
  due_at)``), changed state and the next fire time in one transaction, fenced on that version.
  The activity returns the row's fire time and version; the workflow follows the newest it has
  heard of (poll answer or signal) and sleeps again, or returns when the trigger is finished.
* The workflow continues as new, carrying only the fire time and version, past ``history_bound``
  events or when the server suggests it.

Compared with temporal_shards, a fire writes the trigger row once instead of twice (no claim:
Temporal runs one execution per workflow id and the workflow one poll at a time, so the workflow
is the trigger's lock and the activity's heartbeat timeout is its lease), and costs Temporal a
timer, two workflow tasks and an activity. ``stats()`` counts those operations in this process
(``costs.py``) without a query; ``cost_report()`` sums every process's from ``temporal_costs``.
The storage knobs every Postgres design accepts (:data:`schedulers.pg.STORAGE_OPTIONS`) apply to
``trigger`` and ``trigger_state``, fillfactor 50 as in temporal_shards.

Crash semantics: cancelling ``run()`` shuts its worker down without releasing anything; Temporal
retries the interrupted poll activity (at once on the failure the worker reports, or after the
heartbeat timeout ``lease_s`` when the process died) on any live worker, and the retry delivers
the fire again with ``attempt`` 2 unless the first attempt's commit went through. Workflow state
is Temporal's: another worker replays it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import socket
import time
from collections.abc import Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio.client import Client
from temporalio.service import RPCError
from temporalio.worker import Worker

from schedulers import temporal
from schedulers.base import Capabilities, Processor, StoreContext, Timer, resolve_options, us
from schedulers.pg import apply_schema, apply_storage, close_store, open_pool, qualified, storage_options, upsert_armed
from schedulers.sqlfile import Queries
from schedulers.temporal_per_trigger import costs
from schedulers.temporal_per_trigger.workflows import (
    ARM_SIGNAL,
    TRIGGER_WORKFLOW,
    ArmSignal,
    TriggerConfig,
    TriggerInput,
    TriggerWorkflow,
)

HERE = Path(__file__).parent
log = logging.getLogger(__name__)
TERMINATE_CONCURRENCY = 64  # terminate RPCs in flight at teardown
STORAGE_TABLES = ("trigger", "trigger_state")  # the tables fires rewrite (storage knobs)


class TemporalPerTriggerScheduler:
    name = "temporal_per_trigger"
    description = (
        "one Temporal workflow per trigger: a durable timer, then a poll activity per fire "
        "(the Composio article's rejected alternative)"
    )
    default_options: dict[str, Any] = {
        "history_bound": 1000,  # events; a trigger's workflow continues as new past this (or when
        # the server suggests it). About 10 events a fire, so ~100 fires a run: a replay after a
        # cache eviction re-runs at most that many iterations.
        "lease_s": 30.0,  # poll activity heartbeat timeout, seconds: a dead worker's poll comes back after it
        "retry_initial_s": 0.5,  # first retry of an interrupted poll activity, seconds
        "dispatch_allowance_s": 90.0,  # seconds Temporal may take to dispatch a due fire (timer,
        # workflow task, activity, processor): the declared lag bound, since nothing batches. A
        # real cluster takes well under a second; the embedded dev server (one SQLite writer,
        # ~10 persistence requests a new trigger, 2 cores shared with other agents) fired a
        # burst of 400 new triggers 15-22 s after arm() returned at load 6-9 and 45-50 s after
        # at load 13, and the bound must hold there too (the conformance suite checks it).
        "arm_concurrency": 16,  # signal-with-start calls in flight per arm(); more only made the
        # dev server time out creates it had started (measured at 64)
        "max_concurrent_activities": 500,  # poll activities per worker (each holds one fire)
        "max_cached_workflows": 10_000,  # per worker; a trigger workflow evicted from the cache
        # replays its history on its next fire (the SDK default is 1,000)
        "sandbox": False,  # run workflows in the SDK's sandbox (per-activation CPU a Go worker,
        # as in the Composio article, would not pay; the workflow does no I/O by construction)
        "workflow_task_pollers": 5,  # concurrent workflow-task polls per worker (the SDK default)
        "activity_task_pollers": 5,  # concurrent activity-task polls per worker (the SDK default)
        "sticky_timeout_s": 5.0,  # a dead worker's cached workflows move after this, seconds
        "drain_s": 30.0,  # graceful stop waits this long for in-flight polls, seconds
        "pool_size": 16,  # Postgres connections per scheduler instance
        "terminate_s": 30.0,  # teardown(drop=True) terminates running trigger workflows for at most
        # this long, seconds (the embedded dev server terminates a few hundred a second at best)
        "costs_flush_s": 1.0,  # how often this process adds its Temporal counts to temporal_costs, seconds
        # fillfactor_pct (of trigger and trigger_state; 50 leaves room for the version a commit
        # writes, as temporal_shards), autovacuum_*: schedulers.pg.STORAGE_OPTIONS, autovacuum at
        # the server's values
        **storage_options(fillfactor_pct=50),
    }
    conformance_options: dict[str, Any] = {
        "lease_s": 2.0,
        "retry_initial_s": 0.2,
        "sticky_timeout_s": 1.0,
        "drain_s": 5.0,
    }
    needs_postgres = True
    needs_temporal = True

    def __init__(self, ctx: StoreContext, **options: Any) -> None:
        self.ctx = ctx
        self.options = resolve_options(self.name, self.default_options, options)
        o = self.options
        self.lease_s = float(o["lease_s"])
        # Workflow ids and the task queue carry the schema, so concurrent runs never meet.
        self.prefix = "tp-" + re.sub(r"[^A-Za-z0-9_-]", "-", ctx.schema)
        self.task_queue = self.prefix
        self.trigger_config = TriggerConfig(
            task_queue=self.task_queue,
            history_bound=int(o["history_bound"]),
            lease_s=self.lease_s,
            retry_initial_s=float(o["retry_initial_s"]),
        )
        self.capabilities = Capabilities(
            max_lag_s=float(o["dispatch_allowance_s"]),
            per_tenant_fairness=False,  # every trigger is dispatched on its own; no tenant order
            heartbeat_leases=True,  # the poll activity heartbeats; its timeout is the lease
            redelivery_s=self.lease_s + 2 * float(o["retry_initial_s"]) + 1.0,
            # no lease_s floor: a crashed worker's activity can be retried before its heartbeat
            # timeout (the conformance crash check saw a batch back 0.99 s into a 2 s lease)
            cancel=False,  # as temporal_shards: the Composio article has no cancel operation
            multi_runner=True,
            at_least_once=True,
            state_writes="skip-unchanged",  # its poll activity writes the state only when it changed
            state_writes_fixed=True,
        )
        self.q = Queries(HERE / "queries.sql", ctx.schema)
        self.pool = None
        self.client: Client | None = None
        self.last_tick_at = 0.0  # set by run() while its worker runs
        self.source = f"{socket.gethostname()}:{os.getpid()}"  # this process's temporal_costs row
        self._flushed_at = 0.0
        self.claimed_timers = 0  # polls that took their row at the armed version (schedulers.base)
        self.left_running = 0  # trigger workflows the last teardown could not terminate in time
        self._flush_lock = asyncio.Lock()  # a reading stats() waits for a flush in progress

    def workflow_id(self, trigger_id: str) -> str:
        return f"{self.prefix}-t-{trigger_id}"

    # -- lifecycle ---------------------------------------------------------------------------

    async def setup(self) -> None:
        created = self.pool is None
        await self._connect()
        if created:
            async with self.pool.connection() as conn:
                await apply_schema(conn, self.ctx.schema, HERE / "schema.sql")
                await apply_storage(conn, self.ctx.schema, STORAGE_TABLES, self.options)

    async def _connect(self) -> None:
        """The pool and the Temporal client, without touching the schema: enough to arm, read and
        disarm on a store that exists (migration reconcile opens stores this way)."""
        if not self.ctx.dsn or not self.ctx.temporal_address:
            raise ValueError("temporal_per_trigger needs both a Postgres DSN and a Temporal address")
        if self.pool is None:
            self.pool = await open_pool(
                self.ctx.dsn,
                min_size=1,
                max_size=int(self.options["pool_size"]),
                name="timerbench-temporal-per-trigger",
            )
        if self.client is None:
            self.client = await temporal.connect(self.ctx)

    async def teardown(self, drop: bool = True) -> None:
        if self.pool is not None and not drop:
            with contextlib.suppress(Exception):
                await self.flush_costs()
        if drop and self.client is not None and self.pool is not None:
            await self._terminate_workflows()
        pool, self.pool = self.pool, None
        await close_store(pool, self.ctx.dsn, self.ctx.schema, drop)
        if drop:
            costs.forget(self.task_queue)
        else:
            costs.drain(self.task_queue)
        self.client = None

    async def _terminate_workflows(self) -> None:
        """Every armed trigger's workflow (ids from the table: no visibility scan of a large
        population), then whatever visibility still lists as running on this task queue, for
        at most ``terminate_s``. A workflow left running is inert: no worker polls this task
        queue again, and if one did, its poll finds the schema gone and the workflow ends."""
        deadline = time.time() + float(self.options["terminate_s"])
        async with self.pool.connection() as conn:
            ids = [self.workflow_id(r[0]) for r in await (await conn.execute(self.q["armed_ids"])).fetchall()]
        left = await self._terminate(ids, deadline)
        for _ in range(2):
            if time.time() >= deadline:
                break
            found: list[str] = []
            with contextlib.suppress(Exception):
                query = f"TaskQueue = '{self.task_queue}' AND ExecutionStatus = 'Running'"
                async for wf in self.client.list_workflows(query):
                    found.append(wf.id)
            left = await self._terminate(found, deadline)
            await asyncio.sleep(0.2)
        self.left_running = left
        if left:
            log.warning(
                "teardown left %d trigger workflows running after %.0f s (inert: no worker polls %s)",
                left,
                float(self.options["terminate_s"]),
                self.task_queue,
            )

    async def _terminate(self, ids: list[str], deadline: float) -> int:
        """Terminate ``ids`` until ``deadline``; returns how many were not reached."""
        gate = asyncio.Semaphore(TERMINATE_CONCURRENCY)
        skipped = 0

        async def one(wid: str) -> None:
            nonlocal skipped
            async with gate:
                if time.time() >= deadline:
                    skipped += 1
                    return
                with contextlib.suppress(Exception):  # already finished or never started
                    await self.client.get_workflow_handle(wid).terminate("timerbench teardown")

        await asyncio.gather(*(one(w) for w in ids))
        return skipped

    def relations(self) -> list[str]:
        # temporal_costs is left out: it is the gauges' own table (a row per process, written
        # about once a second), and counting it would add its writes to the design's per-fire
        # figures (at 4 fires/s, +0.25 updates a fire). WAL is server-wide and still counts it.
        s = self.ctx.schema
        return [qualified(s, t) for t in ("trigger", "trigger_state", "effects")]

    # -- arming --------------------------------------------------------------------------------

    async def arm(self, timers: Sequence[Timer]) -> None:
        if not timers:
            return
        await self._connect()
        armed = await upsert_armed(self.pool, self.q, timers, self.ctx.state_bytes)
        sigs = [(t.id, ArmSignal(f, v)) for t, f, v in zip(armed.timers, armed.fire_ats, armed.versions)]
        await self._signal_all(sigs, mark_held=True)

    async def disarm(self, ids: Sequence[str]) -> int:
        """Migration reconcile only (there is no cancel): ``disarm`` in queries.sql, then a signal
        to each workflow, so it ends now instead of at its next fire time. Signal-with-start, as
        arm() does: a plain signal does not cut a new workflow's start delay short (measured on
        the dev server), and a workflow started for it ends at once."""
        if not ids:
            return 0
        await self._connect()
        async with self.pool.connection() as conn:
            rows = await (await conn.execute(self.q["disarm"], {"ids": list(ids)})).fetchall()
        await self._signal_all([(tid, ArmSignal(None, version)) for tid, version in rows], mark_held=False)
        return len(rows)

    async def _signal_all(self, sigs: list[tuple[str, ArmSignal]], mark_held: bool) -> None:
        """Signal every trigger's workflow, ``arm_concurrency`` at a time; with ``mark_held``,
        then record the versions the workflows now hold, also when some signals failed (their
        error is raised after)."""
        gate = asyncio.Semaphore(int(self.options["arm_concurrency"]))

        async def one(tid: str, sig: ArmSignal) -> None:
            async with gate:
                await self._signal(tid, sig)

        results = await asyncio.gather(*(one(tid, sig) for tid, sig in sigs), return_exceptions=True)
        held = [(tid, sig.version) for (tid, sig), r in zip(sigs, results) if r is None]
        if held and mark_held:
            async with self.pool.connection() as conn:
                await conn.execute(self.q["mark_held"], {"ids": [h[0] for h in held], "versions": [h[1] for h in held]})
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            raise errors[0]

    async def _signal(self, trigger_id: str, sig: ArmSignal) -> None:
        """Signal-with-start: starts the trigger's workflow if none runs, else signals it. A
        re-sent signal carries the same version, which the workflow ignores.

        A new workflow starts with its first workflow task delayed to the fire time (Temporal's
        start delay is a durable timer too; the start signal does not cut it short), so arming
        costs no workflow task and no timer until the first fire. A running workflow ignores the
        delay, and a signal to a workflow still in its delay dispatches its first task at once,
        so a move is never held back."""
        delay_s = max(0.0, sig.fire_at - time.time()) if sig.fire_at is not None else 0.0
        for attempt in range(5):
            try:
                handle = await self.client.start_workflow(
                    TRIGGER_WORKFLOW,
                    TriggerInput(trigger_id, self.trigger_config),
                    id=self.workflow_id(trigger_id),
                    task_queue=self.task_queue,
                    start_signal=ARM_SIGNAL,
                    start_signal_args=[sig],
                    start_delay=timedelta(seconds=delay_s) if delay_s > 0 else None,
                )
                break
            except RPCError:
                if attempt == 4:
                    raise
                await asyncio.sleep(0.1 * 2**attempt)
        costs.count(self.task_queue, "signals_sent")
        if handle.first_execution_run_id is not None:  # set only when this call started a run
            costs.count(self.task_queue, "workflows_started")

    # -- the worker ----------------------------------------------------------------------------

    async def run(self, processors: Mapping[str, Processor], stop: asyncio.Event, worker_id: str | None = None) -> None:
        from schedulers.temporal_per_trigger.activities import PollActivities

        assert self.client is not None, "call setup() first"
        worker_id = worker_id or f"tp-{os.getpid()}-{id(stop):x}"
        stopping = asyncio.Event()
        acts = PollActivities(self, processors, worker_id, stopping)
        worker = Worker(
            await temporal.connect(self.ctx),
            task_queue=self.task_queue,
            workflows=[TriggerWorkflow],
            activities=[acts.poll_trigger],
            workflow_runner=temporal.workflow_runner(sandbox=bool(self.options["sandbox"])),
            identity=worker_id,
            max_concurrent_activities=int(self.options["max_concurrent_activities"]),
            max_cached_workflows=int(self.options["max_cached_workflows"]),
            max_concurrent_workflow_task_polls=int(self.options["workflow_task_pollers"]),
            max_concurrent_activity_task_polls=int(self.options["activity_task_pollers"]),
            sticky_queue_schedule_to_start_timeout=timedelta(seconds=float(self.options["sticky_timeout_s"])),
            graceful_shutdown_timeout=timedelta(0),  # a graceful stop drains first (temporal.serve)
        )

        def alive(now: float) -> None:
            self.last_tick_at = now

        graceful = await temporal.serve(
            worker,
            stop,
            stopping,
            in_flight=lambda: acts.in_flight,
            drain_s=float(self.options["drain_s"]),
            alive=alive,
            every_tick=self._maybe_flush_costs,
        )
        if graceful:
            with contextlib.suppress(Exception):
                await self.flush_costs()

    # -- gauges and export -----------------------------------------------------------------------

    async def _maybe_flush_costs(self) -> None:
        if time.time() - self._flushed_at >= float(self.options["costs_flush_s"]):
            with contextlib.suppress(Exception):  # a failed flush keeps its counts for the next
                await self.flush_costs()

    async def flush_costs(self) -> None:
        """Add this process's Temporal counts since the last flush to its temporal_costs row."""
        async with self._flush_lock:
            self._flushed_at = time.time()
            pending = costs.drain(self.task_queue)
            if pending.empty():
                return
            try:
                async with self.pool.connection() as conn:
                    await conn.execute(self.q["costs_add"], {"source": self.source, **pending.as_params()})
            except BaseException:
                costs.restore(self.task_queue, pending)
                raise

    async def stats(self) -> dict[str, float]:
        """This process's Temporal counts (``costs.totals``) and claims, without a query: the
        metrics sampler reads it every second, and a read or a flush of ``temporal_costs`` there
        would add a scan and a write per sample to the run it measures. In a run of several
        processes (``bench run --nodes``) each counts its own; :meth:`cost_report` sums them."""
        return self._cost_figures(costs.totals(self.task_queue), float(self.claimed_timers))

    async def cost_report(self) -> dict[str, float]:
        """Every process's counts, read now from ``temporal_costs`` after adding this process's
        own: a flush and a query per call, for tests and inspection, not for the sampler."""
        await self._connect()
        with contextlib.suppress(Exception):
            await self.flush_costs()  # this process's counts up to now, then every process's sums
        async with self.pool.connection() as conn:
            row = await (await conn.execute(self.q["costs_read"])).fetchone()
        started, completed, signals, activities, cans, fires, stale = row
        return self._cost_figures(
            costs.Costs(int(started), int(completed), int(signals), int(activities), int(cans), int(fires), int(stale)),
            float(fires),
        )

    @staticmethod
    def _cost_figures(c: costs.Costs, claimed: float) -> dict[str, float]:
        fires = c.fires
        out = {
            "workflows_started": float(c.workflows_started),
            "workflows_completed": float(c.workflows_completed),
            "workflows_running": float(c.workflows_started - c.workflows_completed),  # by this design's own count
            "signals_sent": float(c.signals_sent),
            "activities_executed": float(c.activities_executed),
            "continue_as_new": float(c.continue_as_new),
            "claimed_timers": claimed,  # fires handed to processors (schedulers.base)
            "stale_polls": float(c.stale_polls),
        }
        # Per fire: the point of the comparison with temporal_shards' batches.
        for name, value in (
            ("workflows_started", c.workflows_started),
            ("signals", c.signals_sent),
            ("activities", c.activities_executed),
            ("continue_as_new", c.continue_as_new),
        ):
            out[f"{name}_per_fire"] = value / fires if fires else 0.0
        return out

    async def export_armed(self) -> list[Timer]:
        """Rows with a fire time whose workflow holds that version (``export_armed`` in
        queries.sql): an arm whose signal was lost is in the table but will not fire."""
        await self._connect()
        async with self.pool.connection() as conn:
            rows = await (await conn.execute(self.q["export_armed"])).fetchall()
        return [Timer(tid, us(fire_at), type_, tenant, prio) for tid, fire_at, type_, tenant, prio in rows]
