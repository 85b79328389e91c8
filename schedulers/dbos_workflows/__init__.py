"""dbos_workflows: the durable-workflows article's thesis as a shipping library -- DBOS Transact
for Python (``dbos``, pinned in pyproject): durable workflows checkpointed in the Postgres you
already operate, with no orchestrator besides it.

One durable DBOS workflow per trigger (``workflows.py``), written the way DBOS's documentation
writes a durable loop: it waits for the fire time with a durable wait (``DBOS.sleep``; or
``DBOS.recv`` with a timeout, ``wait=recv``), runs one poll step, and loops on the fire time the
step returns; after ``fires_per_workflow`` fires it enqueues a fresh workflow for its trigger
and returns, because DBOS re-runs a workflow from its first step on recovery (replaying every
checkpoint) and keeps every checkpoint of a workflow until it is deleted: an unbounded loop
must not stay one workflow.

Data flow of one fire:

1. The workflow's wait ends (DBOS checkpointed its wake time when it began: one
   ``operation_outputs`` row; ``recv`` writes two, its timeout and its result).
2. The poll step hands the trigger to this process's run loops (``executor.py``): the woken
   workflows of a few milliseconds (``batch_wait_s``) form one batch, read in one statement
   (``fetch_fires``: row and poll state by key), polled by the processor in one call (outcomes
   handed back as polls finish), and committed per group in one statement (``commit_fires``:
   next fire time, version + 1, changed poll state, effects under ``(trigger_id, due_at)``).
3. Only then does each step return its trigger's next fire time, and DBOS checkpoints the step
   (a second ``operation_outputs`` row). The workflow waits again.

Trigger state lives in this design's own tables (``schema.sql``: ``trigger`` with its fire time,
version and holder workflow, ``trigger_state``, ``effects``, ``executors``), beside DBOS's system
tables in the same schema. A commit is fenced on the row's version and holder, so a move or a
disarm that lands while a poll is in flight wins, and a step DBOS re-runs after a crash finds its
commit already made (the version moved on) and returns the committed fire time without firing.

Why an in-process batcher and not a DBOS queue for the processor's batches: DBOS's unit of work
is a workflow and a step, one trigger each; a queue dequeues workflows, not fires, so a batch
on a queue means a batch workflow per batch -- pg_leased's claim rebuilt on DBOS, with DBOS's
checkpoints added to it and the per-trigger durable wait (the point of the design) gone. The
batcher keeps each trigger's workflow DBOS's and turns only the processor call and the commit
into batches, which is what the Processor contract asks (batches of Fires, one Outcome each,
then one commit).

Arming (``arm``): one transaction locks and upserts the rows and, for a trigger that needs a
holder (new, finished, or moved earlier than the time its holder sleeps until), starts its
workflow through DBOS's own SQL entry point (the ``enqueue_workflow`` function its migrations
install; portable JSON arguments) on the ``timerbench_timers`` queue: an armed row always has a
workflow, and the other way round. A first fire further out than ``delayed_start_lead_s`` is
enqueued DELAYED until that long before it (DBOS moves it to ENQUEUED in its once-a-second
background job), so 12,000 triggers armed at once are not 12,000 workflows started at once.
A move to a later time only updates the row (the holder wakes at the old time, finds the new
one, waits again); a move earlier starts a new holder (the old one finds itself replaced at its
next poll and returns). With ``wait=recv`` arm() instead wakes the holder with a DBOS message
(DBOS's ``send_message`` SQL function, same transaction), and holders never start DELAYED
(they must be running to hear it).

Where DBOS keeps its tables, per run: ``dbos_system_schema`` is the run's schema
(``StoreContext.schema``), so each test and run has its own system tables, and parallel tests
never share a queue, a workflow id or an application version row. ``setup`` runs DBOS's own
migrations there (``DBOS.migrate``, idempotent: 0.8 s the first time, 0.06 s after) and
registers the queue through DBOS's client (``register_queue``, idempotent); ``teardown`` ends
this process's DBOS launch on the schema, then drops the schema with everything in it. One
thing the schema does not isolate: DBOS's LISTEN/NOTIFY channel names are fixed, so runs on one
database hear each other's notifications; a notification for a workflow this process does not
wait on wakes nothing (``wait=sleep`` uses none at all).

DBOS is one executor per process (``DBOS(config)``, ``DBOS.launch()``, ``DBOS.destroy()``):

* a process runs one store: a second schema in one process is refused with a message saying so
  (``bench migrate dry-run`` between two dbos_workflows stores would need a process each);
* the ``run()`` loops of one process share one launch (``executor.Launch``), started with the
  first loop and destroyed with the last; it is launched from a worker thread, so DBOS adopts no
  event loop of ours and runs its workflows on its own loop, and the poll step crosses to the
  run loops' loop for the batch;
* each launch gets a fresh executor id (``<host>-<pid>-<n>``) and a heartbeat row in
  ``executors``; ``bench serve --nodes`` processes are executors of one application
  (``timerbench``) on one system database, and any of them dequeues a workflow from the queue;
* the application version is DBOS's default (a hash of the workflows' source, the DBOS version
  and the application name): every process of a run runs the same code, so they agree, and
  DBOS recovers and dequeues only workflows of its own version.

Crash (the ``run`` task cancelled) and recovery: the run loop's in-flight batches die uncommitted,
and the launch ends at once: ``DBOS.destroy`` cancels every workflow task of the process (DBOS
records nothing for a cancelled task: the workflows stay PENDING under the dead executor id), the
heartbeat stops, nothing is released. DBOS itself recovers an executor's PENDING workflows only
when that executor id launches again, or when Conductor (its hosted control plane, which this
project cannot reach) tells a live executor to; so each launch's sweeper does Conductor's job:
an executor whose heartbeat is older than ``lease_s``, or that stopped gracefully, has its
PENDING workflows handed back to their queue with ``DBOS._recover_pending_workflows`` (the call
Conductor's recovery makes; DBOS has no public equivalent without Conductor), and a live
executor dequeues them and replays each from its last checkpoint: its wait ends at the recorded
wake time, an interrupted poll runs again (``attempt`` 2) and delivers the fire again unless its
commit had gone through. A slow poll in a live process keeps its fire (the heartbeat is the
process's), so the slow-owner promise holds.

Capabilities, honestly:

* ``max_lag_s`` = 2 x ``queue_polling_s`` + 1 s (DBOS's background job that ends DELAYED) +
  ``dispatch_allowance_s`` (15 s). Each fire costs DBOS two checkpoints, each a few
  system-database round trips from Python (a status and checkpoint read, an insert, an
  ownership check, a pool pre-ping), and a workflow start costs more; on this 2-core machine,
  shared with other work at load 12-26, 300 new triggers due within two seconds (the conformance
  burst) fired 9-14 s after arm() returned. The allowance covers that, with the margin the
  conformance suite's slack does not have; in steady state below capacity the lag is far lower.
* ``per_tenant_fairness`` off: each trigger's workflow wakes itself and DBOS dequeues a queue in
  (priority, created_at) order; no claim ever sees a tenant, so a big tenant's backlog is served
  in arrival order with everyone else's.
* ``heartbeat_leases`` on: the executor's heartbeat is the lease of every poll it runs.
* ``redelivery_s`` = ``lease_s`` + ``sweep_s`` + 2 x ``queue_polling_s`` + 2 s (a launch and a
  replay).
* ``cancel`` on: ``disarm`` clears the row's fire time and holder in one statement; the holder
  fires nothing more and returns at its next poll.

Settings (``default_options``), each with its reason:

* ``wait=sleep``: one checkpoint per wait instead of ``recv``'s two (its timeout and its result)
  plus a notification row per move; moves are rare next to re-arms, and a move earlier costs
  one workflow start instead.
* ``fires_per_workflow=100``: a recovery replays at most 200 checkpoints; a restart costs a
  workflow start (status, input and output rows) per 100 fires.
* ``batch=200``, ``batch_wait_s=0.02``, ``inflight_batches=8``: the run loop's shape of pg_leased
  (a batch of 200, rows in flight counted in fires); the 20 ms gather turns the trickle of woken
  workflows into batches without adding to the lag that matters.
* ``early_s=0.25``: a poll that arrives this close before its fire time waits in the batch
  instead of another durable wait (never early: the batch waits for its latest fire time).
* ``delayed_start_lead_s=5``: see arming; longer than DBOS's background job (1 s) plus two queue
  polls, so a DELAYED holder is running before its fire.
* ``lease_s=30``, ``heartbeat_fraction=1/3``, ``sweep_s=5``: pg_leased's lease; Conductor's own
  executor timeout is 60 s.
* ``queue_polling_s=1.0`` and ``sys_db_pool_size=20``: DBOS's defaults (as are its pool
  pre-ping, its LISTEN/NOTIFY, its serializer and its logging, here at WARNING). No retention:
  DBOS keeps every finished workflow until deleted, and Conductor's default retention (1M
  workflows) would delete nothing within a run.
* ``fillfactor_pct=50`` on ``trigger`` and ``trigger_state`` (the storage knobs every Postgres
  design accepts, ``schedulers/pg.py``), as the Temporal designs' tables: room for the version a
  commit writes. DBOS's own tables keep DBOS's storage settings.

On the bill (``relations``): every table in the run's schema, read from the catalog after DBOS's
migrations ran there, so a table a DBOS release adds is counted without a change here (today
13 of DBOS's: ``workflow_status``, ``operation_outputs``, ``workflow_input``,
``workflow_output``, ``notifications``, ... and the four of this design); before setup, DBOS's
own schema definition (its SQLAlchemy metadata) and ours.

The better primitives DBOS offers for recurring work, and why the default is not one of them:
scheduled workflows (``DBOS.create_schedule``, one per trigger) fire on a cron expression
(seconds at best), so the poll cannot choose the next fire time and a move is a delete and a
create; each firing is an enqueued workflow, and the schedules are polled every 30 s. A DELAYED
enqueue per fire (DBOS's queue delay) is measurable here as ``fires_per_workflow=1``: every fire
is then a workflow DBOS's queue starts when its delay ends, which costs a workflow start per
fire instead of a checkpoint. Measured on this 2-core machine (shared, load 12-26; figures in
``MEASUREMENTS.md`` beside this file): the default sustained ~34 fires/s on the ceiling workload
with 4 kB state (pg_leased held 556/s beside it), ~4.5 ms of Postgres CPU and ~20 ms of client
CPU a fire; ``wait=recv`` and ``fires_per_workflow=1`` held about half of that. Below capacity
nothing was lost; above it the backlog stays held (pending, not lost).

The folder's main module is long (about 630 lines) because it explains the design and every
setting chosen, as each design folder does; the executor and the workflows are their own modules.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dbos import DBOSClient
from dbos._schemas.system_database import SystemSchema
from psycopg_pool import AsyncConnectionPool

from schedulers.base import (
    BatchSizes,
    Capabilities,
    Fire,
    Held,
    Processor,
    Range,
    RunLoop,
    StoreContext,
    Timer,
    outcomes_as_polls_finish,
    resolve_options,
    us,
)
from schedulers.dbos_workflows import executor
from schedulers.dbos_workflows.executor import DueRequest, Launch, Settings
from schedulers.dbos_workflows.workflows import ARM_TOPIC, TRIGGER_WORKFLOW
from schedulers.pg import apply_schema, apply_storage, close_store, open_pool, qualified, storage_options
from schedulers.sqlfile import Queries

HERE = Path(__file__).parent
log = logging.getLogger(__name__)

APPLICATION = "timerbench"  # DBOS application name: owns the queue and the workflows
QUEUE = "timerbench_timers"  # the DBOS queue trigger workflows are enqueued on
OUR_TABLES = ("trigger", "trigger_state", "effects", "executors")
STORAGE_TABLES = ("trigger", "trigger_state")  # the tables fires rewrite (storage knobs)
WAITS = ("sleep", "recv")


class DbosWorkflowsScheduler:
    name = "dbos_workflows"
    description = "DBOS Transact: one durable workflow per trigger (durable sleep, a poll step, re-arm), on Postgres"
    default_options: dict[str, Any] = {
        # How a trigger's workflow waits for its fire time: "sleep" (DBOS.sleep: one checkpoint
        # per wait; a move to an earlier time starts a new holder workflow) or "recv"
        # (DBOS.recv with a timeout: two checkpoints per wait; arm() wakes the holder with a
        # message in its own transaction).
        "wait": "sleep",
        # Fires one workflow runs before it enqueues a fresh one for its trigger and returns
        # (DBOS replays a workflow's whole history on recovery: an unbounded loop must restart).
        "fires_per_workflow": 100,
        "batch": 200,  # fires per processor call at most
        "batch_wait_s": 0.02,  # seconds a batch waits after its first woken workflow for more
        "inflight_batches": 8,  # room per run loop, in batches of `batch` fires
        "tick_s": 0.1,  # seconds a run loop waits for a woken workflow before it checks stop
        "early_s": 0.25,  # a poll this close before its fire time waits here, not durably again
        # A new holder whose first fire is further out than this starts DELAYED until this long
        # before it (DBOS moves it to ENQUEUED within its 1 s background job, then a queue
        # poll dequeues it): a population armed at once starts over its first interval.
        "delayed_start_lead_s": 5.0,
        "lease_s": 30.0,  # executor heartbeat lease, seconds (Conductor's executor timeout is 60 s)
        "heartbeat_fraction": 1 / 3,  # heartbeat period as a fraction of lease_s
        "sweep_s": 5.0,  # seconds between looks for dead executors, per launch
        "queue_polling_s": 1.0,  # DBOS queue polling interval (DBOS's default)
        "sys_db_pool_size": 20,  # DBOS's system-database pool (DBOS's default)
        "dispatch_allowance_s": 15.0,  # seconds of DBOS step overhead a fire may take on top of its
        # wait in normal operation (see the lag bound in the module docstring)
        "pool_size": 12,  # this instance's own psycopg pool (arms, batches, heartbeats)
        **storage_options(fillfactor_pct=50),
    }
    conformance_options: dict[str, Any] = {
        "lease_s": 2.0,
        "sweep_s": 0.25,
        "queue_polling_s": 0.1,
        "batch": 50,
    }
    needs_postgres = True
    needs_temporal = False
    option_ranges: dict[str, Range] = {
        "fires_per_workflow": Range(lo=1),
        "batch": Range(lo=1),
        "inflight_batches": Range(lo=1),
        "heartbeat_fraction": Range(0, 1, open=True),
        "queue_polling_s": Range(lo=0.001),
        "lease_s": Range(lo=0, open=True),
    }

    def __init__(self, ctx: StoreContext, **options: Any) -> None:
        self.options = o = resolve_options(self.name, self.default_options, options, self.option_ranges)
        if not ctx.dsn:
            raise ValueError(f"{self.name} needs a Postgres DSN (StoreContext.dsn is empty)")
        if o["wait"] not in WAITS:
            raise ValueError(f"{self.name}: wait must be one of {', '.join(WAITS)}, got {o['wait']!r}")
        self.ctx = ctx
        self.wait = o["wait"]
        self.batch = int(o["batch"])
        self.lease_s = float(o["lease_s"])
        self.heartbeat_s = self.lease_s * float(o["heartbeat_fraction"])
        self.sweep_s = float(o["sweep_s"])
        queue_s = float(o["queue_polling_s"])
        self.capabilities = Capabilities(
            # A woken workflow's poll reaches a processor after DBOS checkpoints its wait and
            # checks the step (a few system-database round trips) and one batch wait; a new
            # holder is dequeued within two queue polls (plus DBOS's 1 s background job for a
            # DELAYED start).
            max_lag_s=2 * queue_s + 1.0 + float(o["dispatch_allowance_s"]),
            per_tenant_fairness=False,  # each trigger's workflow wakes itself; no claim sees tenants
            heartbeat_leases=True,  # the executor heartbeats: a slow poll in a live process keeps its fire
            # a dead executor's workflows: lease, a sweep, the queue poll of another executor, a
            # replay of the workflow's history (bounded by fires_per_workflow)
            redelivery_s=self.lease_s + self.sweep_s + 2 * queue_s + 2.0,
            cancel=True,  # disarm: the row fence ends the holder at its next poll
            multi_runner=True,
            at_least_once=True,
            state_writes="skip-unchanged",  # its commit writes the state only when the poll changed it
            state_writes_fixed=True,
        )
        self.q = Queries(HERE / "queries.sql", ctx.schema)
        self.pool: AsyncConnectionPool | None = None
        self._relations: list[str] | None = None
        self.last_tick_at = 0.0
        self.claimed_timers = 0  # fires handed to processors, redeliveries included (schedulers.base)
        self.fires = 0  # fires committed
        self.stale_polls = 0  # polls that found the row moved, disarmed or held by another workflow
        self.lost_commits = 0  # commits fenced out by a move in flight
        self.state_writes = 0
        self.batch_sizes = BatchSizes()  # fires per processor call (the report's batch-size histogram)
        self.holders_started = 0  # trigger workflows arm() enqueued

    # -- lifecycle -------------------------------------------------------------------------------

    async def _pool(self) -> AsyncConnectionPool:
        if self.pool is None:
            self.pool = await open_pool(
                self.ctx.dsn, min_size=1, max_size=int(self.options["pool_size"]), name=f"{self.name}-{self.ctx.schema}"
            )
        return self.pool

    async def setup(self) -> None:
        pool = await self._pool()
        async with pool.connection() as conn:
            await apply_schema(conn, self.ctx.schema, HERE / "schema.sql")
            await apply_storage(conn, self.ctx.schema, STORAGE_TABLES, self.options)
        await asyncio.to_thread(self._setup_dbos)
        async with pool.connection() as conn:
            rows = await (await conn.execute(self.q["schema_tables"], {"schema": self.ctx.schema})).fetchall()
        self._relations = [qualified(self.ctx.schema, r[0]) for r in rows]

    def _setup_dbos(self) -> None:
        """DBOS's system tables in the run's schema (its own migrations, idempotent), and the
        queue the trigger workflows go on (registered through DBOS's client, idempotent)."""
        from dbos import DBOS

        DBOS.migrate(self.ctx.dsn, schema=self.ctx.schema)
        client = DBOSClient(
            system_database_url=self.ctx.dsn,
            dbos_system_schema=self.ctx.schema,
            application_name=APPLICATION,
            system_database_pool_size=1,
        )
        try:
            client.register_queue(QUEUE, polling_interval_sec=float(self.options["queue_polling_s"]))
        finally:
            client.destroy()

    def _launch(self) -> Launch:
        o = self.options
        config = {
            "name": APPLICATION,
            "system_database_url": self.ctx.dsn,
            "dbos_system_schema": self.ctx.schema,
            "sys_db_pool_size": int(o["sys_db_pool_size"]),
            "log_level": "WARNING",
        }
        settings = Settings(
            queue=QUEUE,
            wait=self.wait,
            fires_per_workflow=int(o["fires_per_workflow"]),
            delayed_start_lead_s=float(o["delayed_start_lead_s"]),
        )
        return Launch(
            schema=self.ctx.schema,
            dsn=self.ctx.dsn,
            settings=settings,
            config=config,
            loop=asyncio.get_running_loop(),
            store=self,
        )

    async def teardown(self, drop: bool = True) -> None:
        await executor.end_for(self.ctx.schema)
        pool, self.pool = self.pool, None
        await close_store(pool, self.ctx.dsn, self.ctx.schema, drop)
        if drop:
            self._relations = None

    def relations(self) -> list[str]:
        """Every table in the run's schema, read after DBOS's migrations ran there (so a table
        a DBOS release adds is counted without a change here); before setup, the tables of DBOS's
        own schema definition and ours."""
        if self._relations is not None:
            return list(self._relations)
        names = sorted({t.name for t in SystemSchema.metadata_obj.tables.values()} | set(OUR_TABLES))
        return [qualified(self.ctx.schema, n) for n in names]

    # -- arming ----------------------------------------------------------------------------------

    def holder_id(self, trigger_id: str, version: int) -> str:
        return f"{trigger_id}@{version}"

    async def arm(self, timers: Sequence[Timer]) -> None:
        if not timers:
            return
        now = us(time.time())
        latest: dict[str, Timer] = {}
        for t in timers:  # one row takes one new fire time per statement: the last arm wins
            latest[t.id] = t
        ts = sorted(latest.values(), key=lambda t: t.id)  # row locks in id order, as commit_fires
        ids = [t.id for t in ts]
        fire_ats = [now if t.fire_at is None else us(t.fire_at) for t in ts]
        # wait=recv: a holder must be running to hear arm()'s message, so it never starts DELAYED
        lead_s = float(self.options["delayed_start_lead_s"]) if self.wait == "sleep" else 0.0
        early_s = float(self.options["early_s"])
        pool = await self._pool()
        async with pool.connection() as conn:
            async with conn.transaction():
                locked = await (await conn.execute(self.q["lock_triggers"], {"ids": ids})).fetchall()
                old = {tid: (fire_at, holder) for tid, fire_at, holder in locked}
                cur = await conn.execute(
                    self.q["arm_upsert"],
                    {
                        "ids": ids,
                        "types": [t.type for t in ts],
                        "tenants": [t.tenant_id for t in ts],
                        "priorities": [t.priority for t in ts],
                        "fire_ats": fire_ats,
                        "armed_at": now,
                    },
                )
                version = dict(await cur.fetchall())
                new = [i for i in ids if i not in old]
                if new:
                    size = self.ctx.state_bytes  # encrypted poll state is incompressible: random bytes
                    states = [os.urandom(size) if size else None for _ in new]
                    await conn.execute(self.q["state_insert"], {"ids": new, "states": states})
                start: list[tuple[str, float]] = []  # (trigger id, fire time): triggers that need a new holder
                wake: list[str] = []  # wait=recv: holders to wake with a message
                for tid, fire_at in zip(ids, fire_ats):
                    was = old.get(tid)
                    if was is None or was[0] is None or was[1] is None:
                        start.append((tid, fire_at))
                    elif self.wait == "recv":
                        wake.append(was[1])
                    elif fire_at < was[0]:
                        # The holder sleeps until the old time at the earliest; an earlier fire
                        # needs a holder of its own (the old one finds itself replaced and returns).
                        start.append((tid, fire_at))
                if start:
                    holders = [self.holder_id(tid, version[tid]) for tid, _ in start]
                    await conn.execute(self.q["set_holders"], {"ids": [s[0] for s in start], "holders": holders})
                    await conn.execute(
                        self.q["enqueue_workflows"],
                        {
                            "workflow": TRIGGER_WORKFLOW,
                            "queue": QUEUE,
                            "store": self.ctx.schema,
                            "application": APPLICATION,
                            "trigger_ids": [s[0] for s in start],
                            "holders": holders,
                            "fire_ats": [s[1] for s in start],
                            "wait_firsts": [f - now > early_s for _, f in start],
                            "delay_until_ms": [
                                int((f - lead_s) * 1000) if lead_s > 0 and f - now > lead_s else None for _, f in start
                            ],
                        },
                    )
                    self.holders_started += len(start)
                if wake:
                    await conn.execute(
                        self.q["wake_holders"], {"holders": wake, "message": json.dumps("moved"), "topic": ARM_TOPIC}
                    )

    async def disarm(self, ids: Sequence[str]) -> int:
        """Migration reconcile only: ``disarm`` in queries.sql (the holder fires nothing more)."""
        if not ids:
            return 0
        pool = await self._pool()
        async with pool.connection() as conn:
            return len(await (await conn.execute(self.q["disarm"], {"ids": list(ids)})).fetchall())

    async def export_armed(self) -> list[Timer]:
        pool = await self._pool()
        async with pool.connection() as conn:
            rows = await (await conn.execute(self.q["export_armed"])).fetchall()
        return [Timer(tid, us(fire_at), type_, tenant, prio) for tid, fire_at, type_, tenant, prio in rows]

    async def stats(self) -> dict[str, float]:
        """In-process counters only (no query: the sampler reads this every second)."""
        launch = executor.current(self.ctx.schema)
        return {
            "claimed_timers": float(self.claimed_timers),
            "fires": float(self.fires),
            "stale_polls": float(self.stale_polls),
            "lost_commits": float(self.lost_commits),
            "state_writes": float(self.state_writes),
            "holders_started": float(self.holders_started),
            "recovered_workflows": float(launch.recovered if launch else 0),
            "woken_waiting": float(len(launch.due) if launch else 0),
            **self.batch_sizes.gauges(),
        }

    # -- what the executor asks of the store ------------------------------------------------------

    async def _execute(self, name: str, params: Mapping[str, Any]) -> list[tuple]:
        pool = await self._pool()
        async with pool.connection() as conn:
            cur = await conn.execute(self.q[name], params)
            return await cur.fetchall() if cur.description else []

    async def executor_registered(self, executor_id: str) -> None:
        await self._execute("executor_register", {"executor_id": executor_id})

    async def executor_heartbeat(self, executor_id: str) -> None:
        await self._execute("executor_heartbeat", {"executor_id": executor_id})

    async def executor_stopped(self, executor_id: str) -> None:
        await self._execute("executor_stopped", {"executor_id": executor_id})

    async def executors_gone(self, executor_id: str) -> list[str]:
        rows = await self._execute("executors_gone", {"executor_id": executor_id, "lease_s": self.lease_s})
        return [r[0] for r in rows]

    async def executors_forget(self, ids: list[str]) -> None:
        await self._execute("executor_forget", {"ids": ids, "lease_s": self.lease_s})

    async def take_over(self, trigger_id: str, me: str, pred: str) -> list[Any] | None:
        """wait=recv: the successor of a restarted workflow becomes the holder (``take_over``)."""
        rows = await self._execute("take_over", {"id": trigger_id, "holder": me, "pred": pred})
        if not rows:
            return None
        (fire_at,) = rows[0]
        return None if fire_at is None else [fire_at]

    # -- the run loop ----------------------------------------------------------------------------

    async def run(self, processors: Mapping[str, Processor], stop: asyncio.Event, worker_id: str | None = None) -> None:
        worker = worker_id or f"dbos-{os.getpid()}-{os.urandom(3).hex()}"
        await self._pool()
        launch = await executor.acquire(self.ctx.schema, self._launch)
        crashed = False
        batch_no = 0
        try:
            # Cancelling is a crash (RunLoop): in-flight batches die uncommitted; release() then
            # ends this process's DBOS executor without releasing anything.
            async with RunLoop(fires_in_flight=int(self.options["inflight_batches"]) * self.batch) as loop:
                while not stop.is_set():
                    self.last_tick_at = time.time()
                    if launch.dead.is_set():  # another run loop of this process crashed the executor
                        await executor.release(launch, crashed=False)
                        launch = await executor.acquire(self.ctx.schema, self._launch)
                    room = await loop.take_slot(stop, self.batch, least=1)
                    if not room:
                        break
                    due = await launch.take(room, float(self.options["batch_wait_s"]), float(self.options["tick_s"]))
                    loop.give_back(room - len(due))
                    if due:
                        loop.start_stream(self._process, processors, due, worker, batch_no, size=len(due))
                        batch_no += 1
        except asyncio.CancelledError:
            crashed = True
            raise
        finally:
            await executor.release(launch, crashed)

    async def _process(
        self, processors: Mapping[str, Processor], due: list[DueRequest], worker: str, batch_no: int, room: Held
    ) -> None:
        """One batch of woken workflows: read their rows, answer the ones with nothing to fire,
        poll the rest, commit each group of outcomes, answer those workflows."""
        try:
            await self._process_batch(processors, due, worker, batch_no, room)
        except asyncio.CancelledError:
            raise  # a crash: nothing answered, nothing released
        except Exception as exc:
            for r in due:
                if not r.future.done():
                    r.future.set_exception(exc)  # the step asks again (a redelivery)
            raise

    async def _process_batch(
        self, processors: Mapping[str, Processor], due: list[DueRequest], worker: str, batch_no: int, room: Held
    ) -> None:
        now = time.time()
        rows = {
            r[0]: r
            for r in await self._execute(
                "fetch_fires", {"ids": [d.trigger_id for d in due], "due_by": now + float(self.options["early_s"])}
            )
        }
        fires: dict[str, list[tuple[DueRequest, Fire, int]]] = {}
        latest_due = 0.0
        for d in due:
            row = rows.get(d.trigger_id)
            if row is None or row[7] not in (d.me, d.pred) or row[4] is None:
                self.stale_polls += 1
                d.future.set_result(None)  # not (or no longer) this workflow's to fire
                room.give(1)
                continue
            tid, type_, tenant, prio, fire_at, armed_at, version, _, state = row
            if fire_at > now + float(self.options["early_s"]):
                d.future.set_result([fire_at, False])  # moved later: wait again
                room.give(1)
                continue
            if type_ not in processors:
                log.warning("%s %s: no processor for type %r; %s is polled again", self.name, worker, type_, tid)
                d.future.set_exception(LookupError(f"no processor for timer type {type_!r}"))
                room.give(1)
                continue
            fire = Fire(tid, tenant, type_, us(fire_at), us(armed_at), d.attempt, worker, batch_no, state, prio)
            fires.setdefault(type_, []).append((d, fire, version))
            latest_due = max(latest_due, fire_at)
        if not fires:
            return
        early_s = latest_due - time.time()
        if early_s > 0:  # never early (promise 1): the batch waits for its latest fire time
            await asyncio.sleep(early_s)
        for type_, items in fires.items():
            processor = processors[type_]
            self.claimed_timers += len(items)
            self.batch_sizes.add(len(items))
            async for positions, outcomes in outcomes_as_polls_finish(processor, [f for _, f, _ in items]):
                group = [items[i] for i in positions]
                delivered = await self._commit(group, outcomes)
                room.give(len(group))
                processor.committed([f for _, f, _ in group], [delivered[f.timer_id] for _, f, _ in group])

    async def _commit(self, group: list[tuple[DueRequest, Fire, int]], outcomes: Sequence) -> dict[str, bool]:
        """Commit one group of outcomes (``commit_fires``) and answer its workflows."""
        if len(outcomes) != len(group):
            raise ValueError(f"processor returned {len(outcomes)} outcomes for {len(group)} fires")
        order = sorted(range(len(group)), key=lambda i: group[i][1].timer_id)  # lock order, as arm()
        group = [group[i] for i in order]
        outcomes = [outcomes[i] for i in order]
        # unchanged poll state is not rewritten (no TOAST churn)
        states = [None if o.new_state == f.state else o.new_state for (_, f, _), o in zip(group, outcomes)]
        params = {
            "ids": [f.timer_id for _, f, _ in group],
            "versions": [v for _, _, v in group],
            "holders": [d.me for d, _, _ in group],
            "preds": [d.pred for d, _, _ in group],
            "next_fire_ats": [None if o.next_fire_at is None else us(o.next_fire_at) for o in outcomes],
            "states": states,
            "effect_dues": [f.due_at if o.effect else None for (_, f, _), o in zip(group, outcomes)],
            "now": time.time(),
        }
        pool = await self._pool()
        async with pool.connection() as conn:
            cur = await conn.execute(self.q["commit_fires"], params)
            committed, effects, states_written = await cur.fetchone()
        committed, effects = set(committed), set(effects)
        self.fires += len(committed)
        self.state_writes += int(states_written)
        fenced = [f.timer_id for _, f, _ in group if f.timer_id not in committed]
        now_rows = {}
        if fenced:
            self.lost_commits += len(fenced)
            now_rows = {r[0]: r for r in await self._execute("read_rows", {"ids": fenced})}
        for (d, f, _), o in zip(group, outcomes):
            if d.future.done():
                continue
            if f.timer_id in committed:
                d.future.set_result([None if o.next_fire_at is None else us(o.next_fire_at), True])
                continue
            row = now_rows.get(f.timer_id)  # moved or disarmed while polled: follow the row
            held = row is not None and row[2] in (d.me, d.pred) and row[1] is not None
            d.future.set_result([row[1], True] if held else None)
        return {f.timer_id: f.timer_id in effects for _, f, _ in group}
