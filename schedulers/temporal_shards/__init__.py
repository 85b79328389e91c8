"""temporal_shards: the "after" design of the Composio article -- time lives in Temporal timer shards.

Data flow:

* ``arm()`` upserts the trigger rows by key (new fire time, version + 1), then hashes each id
  onto a consistent-hash ring with bounded loads (``ring.py``) and sends **one signal per shard
  per call** with signal-with-start, so a shard that does not exist yet is created.
* Each shard (``workflows.ShardWorkflow``) holds a min-heap per timer type; due timers move to a
  pending batch that flushes as one batch-poller workflow when full (``batch``, the Composio article: 800)
  or when its oldest has waited ``max_lag_s`` (the Composio article: 10 s). Between events it sleeps until
  the earliest fire time plus MaxLag, so at a steady rate a shard flushes every ~MaxLag and its
  batches hold about rate x MaxLag / shards timers (the Composio article: 200-250 at 556 fires/s); a full
  batch closes only under a backlog. It continues as new, carrying the heap, when Temporal
  suggests it or its history passes ``history_bound``; its Continue-As-New payload is measured
  and a shard nearing Temporal's 2 MB limit splits (``workflows``).
* The batch poller's activity (``activities.py``) claims the rows **by primary key** with a lease
  (only rows still at the version the shard fired: a moved timer's stale copy claims nothing),
  calls the processor, commits effects + changed state + the next fire time in one transaction,
  then re-arms through the ring. Postgres is never scanned by due time.
* Shards write their timer counts to a utilisation table; a controller workflow grows the shard
  count above 80 % average utilisation, targeting 60 %. Rebalancing is lazy: a timer moves when it
  re-arms, and an overloaded shard forwards its long-horizon timers.
* The initial shard count (``shards`` 0, the default) is the count the controller would grow to
  for ``expected_timers`` (a run sets it to its population's size): ceil(expected / (grow_target x
  timer_cap)), so a run starts within the 5,000-timer cap instead of measuring a scale-out in
  progress. ``shards=N`` starts with exactly N; with neither, 4.

Where it follows the Composio article and where an option departs (every default is the article's):

* ``batch`` 800 flushed at MaxLag (the Composio article); a smaller ``batch`` closes batches on size.
* ``skip_unchanged_state`` off: every commit writes the poll state, as the article measured (TOAST
  writes up a third); on, the optimisation the article lists as "next on the list".
* ``payload_limit_bytes`` 2 MiB (Temporal's default blob limit) and ``split_payload_frac`` 0.5.

Crash semantics: cancelling ``run()`` shuts its worker down without releasing claims; Temporal
retries the interrupted batch activity (on failure, or after the heartbeat timeout ``lease_s``
when a process dies), and the retry, owning the same batch, takes the rows over. Shard state is
Temporal's: another worker replays it.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import re
import time
import uuid
from collections.abc import Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Worker

from schedulers import temporal
from schedulers.base import (
    EXPECTED_TIMERS,
    BatchSizes,
    Capabilities,
    Processor,
    StoreContext,
    Timer,
    resolve_options,
    us,
)
from schedulers.pg import apply_schema, apply_storage, close_store, open_pool, qualified, storage_options, upsert_armed
from schedulers.sqlfile import Queries
from schedulers.temporal_shards.ring import Ring
from schedulers.temporal_shards.workflows import (
    ARM_SIGNAL,
    ARMED_QUERY,
    CONTROLLER_WORKFLOW,
    E_ID,
    PAYLOAD_LIMIT_BYTES,
    SHARD_WORKFLOW,
    ArmSignal,
    BatchPollerWorkflow,
    ControllerInput,
    ControllerWorkflow,
    ShardConfig,
    ShardInput,
    ShardWorkflow,
    chunk_bytes,
    chunks,
    timer_bytes,
)

HERE = Path(__file__).parent
EXPORT_QUERY_TIMEOUT_S = 10.0  # a shard answers its 'armed' query within this (a worker must run) ...
EXPORT_QUERY_TRIES = 3  # ... in one of this many tries
STORAGE_TABLES = ("trigger", "trigger_state")  # the tables every fire rewrites (storage knobs)
SHARDS_WHEN_UNKNOWN = 4  # the initial shard count when neither shards nor expected_timers is given


def initial_shards(shards: int, expected_timers: int, timer_cap: int, grow_target: float) -> int:
    """``shards`` when given (> 0); else the count the controller would grow to for
    ``expected_timers`` timers: average utilisation ``grow_target`` of ``timer_cap`` (the Composio article:
    60 % of 5,000); else :data:`SHARDS_WHEN_UNKNOWN`."""
    if shards > 0:
        return shards
    if expected_timers > 0:
        return max(1, math.ceil(expected_timers / (grow_target * timer_cap)))
    return SHARDS_WHEN_UNKNOWN


def parse_types(spec: str | Mapping[str, Any]) -> dict[str, list[float]]:
    """Per-type overrides: ``"callback=50/60,poll=250/10"`` (type=batch/max_lag_s) or a dict."""
    if isinstance(spec, Mapping):
        return {k: [float(v[0]), float(v[1])] for k, v in spec.items()}
    out: dict[str, list[float]] = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        try:
            type_, _, rest = part.partition("=")
            batch, _, lag = rest.partition("/")
            out[type_.strip()] = [float(int(batch)), float(lag)]
        except ValueError:
            raise ValueError(f"bad timer type option {part!r}; use type=batch/max_lag_s, e.g. callback=50/60") from None
    return out


class RowStateQueries:
    """The design's statements with the poll state in the trigger row (``state_in_row``): the
    arm (a new trigger's first state goes in with its row), the claim and the commit read and
    write the row's own ``state``."""

    ALIASES = {
        "claim": "claim_row_state",
        "arm_upsert_with_state": "arm_upsert_row",
        "commit_rows": "commit_row_state",
    }

    def __init__(self, queries: Queries) -> None:
        self.queries = queries

    def __getitem__(self, name: str):
        return self.queries[self.ALIASES.get(name, name)]

    def __contains__(self, name: str) -> bool:
        return self.ALIASES.get(name, name) in self.queries


class TemporalShardsScheduler:
    name = "temporal_shards"
    description = (
        "Temporal timer-shard workflows, bounded-load ring, MaxLag batch pollers, Postgres by key "
        "(the Composio article's after)"
    )
    default_options: dict[str, Any] = {
        # initial shard count; 0: what the controller would grow to for expected_timers, 60 % of the
        # 5,000-timer cap (the Composio article), so a run starts within the cap (initial_shards). It grows from there
        "shards": 0,
        EXPECTED_TIMERS: 0,  # timers the run will arm (a run sets its population size); 0: unknown
        "eps": 0.25,  # bounded-load slack: a shard holds at most ceil((1 + eps) * m / n) timers
        "batch": 800,  # timers per full batch, default for every type (the Composio article: full batches of 800)
        "max_lag_s": 10.0,  # seconds a due timer may wait for its batch (the Composio article: polling MaxLag)
        "types": "",  # per-type overrides "type=batch/max_lag_s,..." (the Composio article: callbacks differ)
        "timer_cap": 5000,  # timers per shard = 100 % utilisation (the Composio article: 5,000 for headroom)
        "history_bound": 10_000,  # events; a shard continues as new past this or when suggested
        "controller_period_s": 30.0,  # seconds between controller reads (the Composio article: 30 s)
        "grow_above": 0.8,  # average utilisation that grows the ring (the Composio article: 80 %)
        "grow_target": 0.6,  # utilisation the grown ring aims at (the Composio article: 60 %)
        "util_report_s": 10.0,  # seconds between a shard's utilisation reports
        "forward_horizon_s": 86_400.0,  # an overloaded shard forwards timers due later than this
        "lease_s": 30.0,  # batch activity heartbeat timeout and Postgres lease, seconds
        "retry_initial_s": 0.5,  # first retry of an interrupted batch, seconds
        # poller start + claim + commit, added to MaxLag in the lag bound: 5 s, what the
        # conformance suite measured on a loaded 2-core machine (MEASUREMENTS.md), not 2 s
        "poll_overhead_s": 5.0,
        # a batch's re-arms wait this long for other batches' to go in the same signal per shard
        # (not in the article, whose pollers re-arm one by one): at most this much later to a shard
        "rearm_coalesce_s": 0.5,
        "ring_refresh_s": 1.0,  # callers re-read shard count and loads this often, seconds
        "sticky_timeout_s": 5.0,  # a dead worker's cached shards move after this, seconds
        "max_concurrent_activities": 32,  # batch activities per worker
        "drain_s": 30.0,  # graceful stop waits this long for in-flight batches, seconds
        "controller": True,  # run the controller workflow
        "skip_unchanged_state": False,  # True: no state write when the poll left it unchanged ("next on the list")
        # the poll state in the trigger row, as the Composio article's table (heap-halved: claim sets
        # a lease, commit rewrites the state: two heap writes a fire); false: in its own table
        # trigger_state, a third heap write per fire (this design's first layout, kept to measure)
        "state_in_row": True,
        "payload_limit_bytes": PAYLOAD_LIMIT_BYTES,  # bytes; Temporal's limit on a payload (the article: 2 MB)
        # a shard whose Continue-As-New payload passes this share of the limit splits (not in the article,
        # which caps shards at 5,000 timers, ~1/4 of what 2 MB holds: half leaves room for arms mid-split)
        "split_payload_frac": 0.5,
        # fillfactor_pct (of trigger and trigger_state; 50 leaves room for the two versions a fire
        # writes), autovacuum_*: schedulers.pg.STORAGE_OPTIONS, autovacuum at the server's values
        **storage_options(fillfactor_pct=50),
    }
    conformance_options: dict[str, Any] = {
        "shards": 2,
        "batch": 50,
        "max_lag_s": 0.3,
        "lease_s": 2.0,
        "retry_initial_s": 0.2,
        "util_report_s": 1.0,
        "controller_period_s": 5.0,
        "poll_overhead_s": 5.0,  # as by default: the suite holds it to the bound it declares
        "sticky_timeout_s": 1.0,
        "drain_s": 5.0,
    }
    needs_postgres = True
    needs_temporal = True

    def __init__(self, ctx: StoreContext, **options: Any) -> None:
        self.ctx = ctx
        self.options = o = resolve_options(self.name, self.default_options, options)
        if int(o["payload_limit_bytes"]) <= 0 or not 0 < float(o["split_payload_frac"]) <= 1:
            raise ValueError(
                "temporal_shards: payload_limit_bytes must be > 0 and split_payload_frac in (0, 1], got "
                f"{o['payload_limit_bytes']} and {o['split_payload_frac']}"
            )
        # The resolved options carry the shard count the run starts with, so config.json says it
        # and nodes given these options start the same ring.
        o["shards"] = initial_shards(
            int(o["shards"]), int(o[EXPECTED_TIMERS]), int(o["timer_cap"]), float(o["grow_target"])
        )
        self.skip_unchanged_state = bool(o["skip_unchanged_state"])
        self.per_type = parse_types(o["types"])
        self.lease_s = o["lease_s"]
        self.eps = o["eps"]
        self.ring_refresh_s = o["ring_refresh_s"]
        # Workflow ids and the task queue carry the schema, so concurrent runs never meet.
        self.prefix = "tb-" + re.sub(r"[^A-Za-z0-9_-]", "-", ctx.schema)
        self.task_queue = self.prefix
        self.shard_config = ShardConfig(
            prefix=self.prefix,
            task_queue=self.task_queue,
            batch=o["batch"],
            max_lag_s=o["max_lag_s"],
            per_type=self.per_type,
            timer_cap=o["timer_cap"],
            history_bound=o["history_bound"],
            util_report_s=o["util_report_s"],
            forward_horizon_s=o["forward_horizon_s"],
            lease_s=self.lease_s,
            retry_initial_s=o["retry_initial_s"],
            payload_limit_bytes=o["payload_limit_bytes"],
            split_payload_frac=o["split_payload_frac"],
        )
        max_lag = max([o["max_lag_s"]] + [v[1] for v in self.per_type.values()])
        self.capabilities = Capabilities(
            max_lag_s=max_lag + o["poll_overhead_s"],
            per_tenant_fairness=False,  # a shard batches by fire time, not by tenant
            heartbeat_leases=True,  # the batch activity heartbeats Temporal and the Postgres lease
            redelivery_s=self.lease_s + 2 * o["retry_initial_s"] + 1.0,
            # no lease_s floor: a crashed worker's activity can be retried before its heartbeat
            # timeout (the conformance crash check saw a batch back 0.99 s into a 2 s lease)
            cancel=False,  # the Composio article: "There is no cancel operation"
            multi_runner=True,
            at_least_once=True,
            state_writes="skip-unchanged" if o["skip_unchanged_state"] else "always",
        )
        self.state_in_row = bool(o["state_in_row"])
        queries = Queries(HERE / "queries.sql", ctx.schema)
        self.q = RowStateQueries(queries) if self.state_in_row else queries
        self.pool = None
        self.client: Client | None = None
        self.last_tick_at = 0.0  # set by run() while its worker runs
        # schedulers.base: rows the batch activities of this instance's workers claimed by key,
        # counted again when a retried activity (after a crash or a lapsed lease) takes them over
        self.claimed_timers = 0
        self.batch_sizes = BatchSizes()  # batches this process's batch activities received (first attempts)
        self._rings: dict[int, Ring] = {}
        self._view: tuple[Ring, list[int], float] | None = None
        self._reported: dict[int, tuple[float, int]] = {}  # shard -> (reported_at, count) last seen
        self._placed: dict[int, int] = {}  # shard -> timers this process placed since that report
        self._view_lock = asyncio.Lock()
        self.rearm_coalesce_s = float(o["rearm_coalesce_s"])
        self._rearms: tuple[list[list], asyncio.Future] | None = None  # held re-arms, and their send
        self._rearm_sends: set[asyncio.Future] = set()

    # -- lifecycle ---------------------------------------------------------------------------

    async def setup(self) -> None:
        created = self.pool is None
        await self._connect()
        if created:
            async with self.pool.connection() as conn:
                await apply_schema(conn, self.ctx.schema, HERE / "schema.sql")
                await apply_storage(conn, self.ctx.schema, STORAGE_TABLES, self.options)
                await conn.execute(self.q["ring_init"], {"shards": self.options["shards"]})

    async def _connect(self) -> None:
        """The pool and the Temporal client, without touching the schema: enough to read, arm
        and disarm on a store that exists (migration reconcile opens stores this way)."""
        if not self.ctx.dsn or not self.ctx.temporal_address:
            raise ValueError("temporal_shards needs both a Postgres DSN and a Temporal address")
        if self.pool is None:
            self.pool = await open_pool(self.ctx.dsn, min_size=1, max_size=12, name="timerbench-temporal-shards")
        if self.client is None:
            self.client = await temporal.connect(self.ctx)

    async def teardown(self, drop: bool = True) -> None:
        # a held send whose batches are gone (a crashed worker) must not outlive the pool
        for t in list(self._rearm_sends):
            t.cancel()
        await asyncio.gather(*self._rearm_sends, return_exceptions=True)
        if drop and self.client is not None:
            await self._terminate_workflows()
        pool, self.pool = self.pool, None
        await close_store(pool, self.ctx.dsn, self.ctx.schema, drop)
        self.client = None

    async def _terminate_workflows(self) -> None:
        """Shards and controller first (they start pollers), then whatever still runs on this
        scheduler's task queue (batch pollers), twice to catch a poller started meanwhile."""
        assert self.client is not None
        ids: set[str] = {f"{self.prefix}-controller"}
        with contextlib.suppress(Exception):
            n = (await self.ring_view(fresh=True))[0].n_shards
            ids |= {self.shard_id(s) for s in range(n)}
        await self._terminate(ids)
        for _ in range(2):
            found: set[str] = set()
            with contextlib.suppress(Exception):
                query = f"TaskQueue = '{self.task_queue}' AND ExecutionStatus = 'Running'"
                async for wf in self.client.list_workflows(query):
                    found.add(wf.id)
            await self._terminate(found)
            await asyncio.sleep(0.2)

    async def _terminate(self, ids: set[str]) -> None:
        async def one(wid: str) -> None:
            with contextlib.suppress(Exception):
                await self.client.get_workflow_handle(wid).terminate("timerbench teardown")

        await asyncio.gather(*(one(w) for w in ids))

    def relations(self) -> list[str]:
        s = self.ctx.schema
        return [qualified(s, t) for t in ("trigger", "trigger_state", "effects", "shard_util")]

    def shard_id(self, shard: int) -> str:
        return f"{self.prefix}-shard-{shard}"

    # -- the ring ----------------------------------------------------------------------------

    async def ring_view(self, fresh: bool = False) -> tuple[Ring, list[int], float]:
        """(ring over the current shard count, timers per shard, read time).

        A shard's load is its last reported count plus what this process placed on it since
        that report, so a burst of arms between reports still respects the bound.
        """
        view = self._view
        if view is not None and not fresh and time.time() - view[2] < self.ring_refresh_s:
            return view
        async with self._view_lock:
            view = self._view
            if view is not None and not fresh and time.time() - view[2] < self.ring_refresh_s:
                return view
            async with self.pool.connection() as conn:
                n = (await (await conn.execute(self.q["ring_read"])).fetchone())[0]
                rows = await (await conn.execute(self.q["loads_read"])).fetchall()
            loads = [0] * n
            for shard, timers, reported_at in rows:
                if shard >= n:
                    continue
                seen = self._reported.get(shard)
                if seen is None or seen[0] != reported_at:
                    self._reported[shard] = (reported_at, timers)
                    self._placed[shard] = 0
                loads[shard] = timers
            for shard, extra in self._placed.items():
                if shard < n:
                    loads[shard] += extra
            ring = self._rings.get(n)
            if ring is None:
                ring = self._rings[n] = Ring(n, self.eps)
            self._view = (ring, loads, time.time())
            return self._view

    async def send(self, timers: list[list], key: str) -> None:
        """Place timers on the ring (bounded loads over the known counts) and signal shards."""
        ring, loads, _ = await self.ring_view()
        cap = ring.capacity(sum(loads) + len(timers))
        placed = []
        for t in timers:
            s = ring.place(t[E_ID], loads, cap)
            loads[s] += 1  # the cached view sees it too, until the shard's next report
            self._placed[s] = self._placed.get(s, 0) + 1
            placed.append((s, t))
        await self.send_to(placed, key)

    async def send_rearms(self, timers: list[list]) -> None:
        """Re-arms of a committed batch, held up to ``rearm_coalesce_s`` so that the batches
        finishing together reach each shard in one signal: every signal is a workflow task on its
        shard (its sleep's timer cancelled and started again), and at a high rate those tasks,
        not the batches, were most of the server's work (MEASUREMENTS.md). Returns once the
        shards have them, as :meth:`send` does; a failed send fails every batch that waited."""
        if self.rearm_coalesce_s <= 0:
            await self.send(timers, key=uuid.uuid4().hex)
            return
        if self._rearms is None:
            self._rearms = ([], asyncio.get_running_loop().create_future())
            asyncio.get_running_loop().call_later(self.rearm_coalesce_s, self._send_held_rearms)
        held, sent = self._rearms
        held.extend(timers)
        await asyncio.shield(sent)  # a cancelled batch leaves the others' send alone

    def _send_held_rearms(self) -> None:
        (held, sent), self._rearms = self._rearms, None

        async def go() -> None:
            try:
                await self.send(held, key=uuid.uuid4().hex)
            except asyncio.CancelledError:
                sent.cancel()
                raise
            except Exception as e:
                sent.set_exception(e)
                sent.exception()  # retrieved: every waiter may be gone (a crash)
            else:
                sent.set_result(None)

        self._rearm_sends.add(t := asyncio.ensure_future(go()))
        t.add_done_callback(self._rearm_sends.discard)

    async def send_to(self, placed: Sequence[tuple[int, list]], key: str) -> None:
        """One signal-with-start per shard, each with its own idempotency key; a shard's timers
        that would make a signal over a quarter of the payload limit go in several signals."""
        by_shard: dict[int, list[list]] = {}
        for s, t in placed:
            by_shard.setdefault(s, []).append(t)
        limit = chunk_bytes(int(self.options["payload_limit_bytes"]))
        signals = []
        for s, ts in by_shard.items():
            for i, piece in enumerate(chunks(ts, limit)):
                signals.append(self._signal(s, piece, f"{key}/{s}" if i == 0 else f"{key}/{s}.{i}"))
        await asyncio.gather(*signals)

    async def _signal(self, shard: int, timers: list[list], key: str) -> None:
        assert self.client is not None, "call setup() first"
        for attempt in range(5):
            try:
                await self.client.start_workflow(
                    SHARD_WORKFLOW,
                    ShardInput(shard, self.shard_config),
                    id=self.shard_id(shard),
                    task_queue=self.task_queue,
                    start_signal=ARM_SIGNAL,
                    start_signal_args=[ArmSignal(key, timers)],
                )
                return
            except RPCError:
                if attempt == 4:
                    raise
                await asyncio.sleep(0.1 * 2**attempt)  # same key: the shard drops a duplicate

    # -- arming --------------------------------------------------------------------------------

    async def arm(self, timers: Sequence[Timer]) -> None:
        if not timers:
            return
        self._refuse_oversized(timers)
        if self.pool is None or self.client is None:
            await self._connect()
        armed = await upsert_armed(self.pool, self.q, timers, self.ctx.state_bytes)
        entries = [
            [t.id, f, v, armed.armed_at, t.type, t.tenant_id, t.priority]
            for t, f, v in zip(armed.timers, armed.fire_ats, armed.versions)
        ]
        await self.send(entries, key=uuid.uuid4().hex)

    def _refuse_oversized(self, timers: Sequence[Timer]) -> None:
        """A timer that alone would fill a quarter of the payload limit could never travel in a
        signal or be carried across Continue-As-New safely: refuse the arm, before any write."""
        limit = chunk_bytes(int(self.options["payload_limit_bytes"]))
        for t in timers:
            size = timer_bytes([t.id, 0.0, 0, 0.0, t.type, t.tenant_id, t.priority]) + 40  # times, version
            if size > limit:
                raise ValueError(
                    f"temporal_shards: timer {t.id[:40]!r} encodes to ~{size} bytes, over the {limit}-byte share of "
                    f"payload_limit_bytes={self.options['payload_limit_bytes']} one timer may take; shorten its id, "
                    "type or tenant, or raise payload_limit_bytes"
                )

    # -- the worker ----------------------------------------------------------------------------

    async def run(self, processors: Mapping[str, Processor], stop: asyncio.Event, worker_id: str | None = None) -> None:
        from schedulers.temporal_shards.activities import ShardActivities

        assert self.client is not None, "call setup() first"
        worker_id = worker_id or f"ts-{os.getpid()}-{id(stop):x}"
        stopping = asyncio.Event()
        acts = ShardActivities(self, processors, worker_id, stopping)
        worker = Worker(
            await temporal.connect(self.ctx),
            task_queue=self.task_queue,
            workflows=[ShardWorkflow, BatchPollerWorkflow, ControllerWorkflow],
            activities=acts.all(),
            workflow_runner=temporal.workflow_runner(sandbox=True),
            identity=worker_id,
            max_concurrent_activities=self.options["max_concurrent_activities"],
            sticky_queue_schedule_to_start_timeout=timedelta(seconds=self.options["sticky_timeout_s"]),
            graceful_shutdown_timeout=timedelta(0),  # a graceful stop drains first (temporal.serve)
        )

        def alive(now: float) -> None:
            self.last_tick_at = now

        await temporal.serve(
            worker,
            stop,
            stopping,
            in_flight=lambda: acts.in_flight,
            drain_s=self.options["drain_s"],
            alive=alive,
            started=self._ensure_controller if self.options["controller"] else None,
        )

    async def _ensure_controller(self) -> None:
        o = self.options
        await self.client.start_workflow(
            CONTROLLER_WORKFLOW,
            ControllerInput(
                period_s=o["controller_period_s"],
                timer_cap=o["timer_cap"],
                grow_above=o["grow_above"],
                grow_target=o["grow_target"],
                # a forward needs a ring refresh, then both shards' next reports
                settle_s=o["ring_refresh_s"] + 2 * o["util_report_s"],
            ),
            id=f"{self.prefix}-controller",
            task_queue=self.task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        )

    # -- gauges and export -----------------------------------------------------------------------

    async def stats(self) -> dict[str, float]:
        """From what this process already knows, without a query: the shard count and timers per
        shard of its latest ring view (refreshed by its own placements every ``ring_refresh_s``)
        and its in-process counters. :meth:`shard_report` reads the shards' reports afresh."""
        out: dict[str, float] = {"claimed_timers": float(self.claimed_timers)}
        if self._view is not None:
            ring, loads, read_at = self._view
            cap = self.options["timer_cap"]
            out.update(
                shards=float(ring.n_shards),
                timers=float(sum(loads)),
                utilisation=sum(loads) / (ring.n_shards * cap),
                max_shard_utilisation=(max(loads) / cap) if loads else 0.0,
                ring_view_age_s=max(0.0, time.time() - read_at),
            )
        out.update(self.batch_sizes.gauges())  # in-process counters: the run's batch-size histogram
        return out

    async def shard_report(self) -> dict[str, float]:
        """The shards' own reports, read now from the ring and utilisation tables: shard count and
        growths, timers and history per shard, Continue-As-New counts. A query per call: for
        tests and inspection, not for the per-second sampler (:meth:`stats`)."""
        async with self.pool.connection() as conn:
            n, grows = await (await conn.execute(self.q["ring_read"])).fetchone()
            rows = await (await conn.execute(self.q["util_read"])).fetchall()
        out: dict[str, float] = {
            "shards": float(n),
            "ring_grows": float(grows),
            "claimed_timers": float(self.claimed_timers),
        }
        timers = [0] * n
        cans = 0
        max_can = 0
        payload = {
            "payload_bytes_max": 0,
            "max_payload_bytes": 0,
            "max_can_payload_bytes": 0,
            "splits": 0,
            "can_postponed": 0,
        }
        for (
            shard,
            count,
            _util,
            hist,
            can,
            _last_can,
            max_can_h,
            p_bytes,
            max_p_bytes,
            last_can_p,
            max_can_p,
            splits,
            postponed,
        ) in rows:
            if shard < n:
                timers[shard] = count
            out[f"shard_{shard}_timers"] = float(count)
            out[f"shard_{shard}_history"] = float(hist)
            # the Continue-As-New payload: measured at the shard's last report, and the one its
            # last Continue-As-New carried (a step in the samples at each Continue-As-New)
            out[f"shard_{shard}_payload_bytes"] = float(p_bytes)
            out[f"shard_{shard}_can_payload_bytes"] = float(last_can_p)
            cans += can
            max_can = max(max_can, max_can_h)
            payload["payload_bytes_max"] = max(payload["payload_bytes_max"], p_bytes)  # largest now
            payload["max_payload_bytes"] = max(payload["max_payload_bytes"], max_p_bytes)  # largest ever
            payload["max_can_payload_bytes"] = max(payload["max_can_payload_bytes"], max_can_p)
            payload["splits"] += splits
            payload["can_postponed"] += postponed
        out.update({k: float(v) for k, v in payload.items()})
        out["payload_limit_bytes"] = float(self.options["payload_limit_bytes"])
        out.update(self.batch_sizes.gauges())
        total = sum(timers)
        cap = self.options["timer_cap"]
        out["timers"] = float(total)
        out["utilisation"] = total / (n * cap)
        out["max_shard_utilisation"] = max(timers) / cap if timers else 0.0
        out["continue_as_new"] = float(cans)
        out["max_history_at_continue"] = float(max_can)
        return out

    async def export_armed(self) -> list[Timer]:
        """The timers that will fire: a trigger row with a fire time is armed only when a shard
        holds its current version (or a newer one), or a batch holds it in flight.

        The row alone is not enough: ``arm()`` writes the row first and signals the shard
        second, so a signal lost in a Temporal outage leaves a row that no shard will ever fire
        (migration reconcile must see that as drift). The shards answer a query, which a worker
        on this scheduler's task queue serves: call this while one runs. A shard reports what it
        handed to batch pollers lately too (until their claim leases the rows). A timer between
        its batch's commit and the re-arm signal (held up to ``rearm_coalesce_s``) counts as in
        flight for a lease after the commit, as the batch's retry would re-send it; past that it
        is missing.
        """
        await self._connect()
        async with self.pool.connection() as conn:
            rows = await (await conn.execute(self.q["export_armed"], {"lease_s": self.options["lease_s"]})).fetchall()
            n = (await (await conn.execute(self.q["ring_read"])).fetchone())[0]
        # rows first, shards second: a re-arm in between only raises the shard's version
        held: dict[str, int] = {}
        for timers in await asyncio.gather(*(self._shard_armed(s) for s in range(n))):
            for tid, version in timers:
                if version > held.get(tid, -1):
                    held[tid] = version
        return [
            Timer(tid, us(fire_at), type_, tenant, prio)
            for tid, fire_at, type_, tenant, prio, version, in_flight in rows
            if in_flight or held.get(tid, -1) >= version
        ]

    async def _shard_armed(self, shard: int) -> list[list]:
        assert self.client is not None, "call setup() first"
        handle = self.client.get_workflow_handle(self.shard_id(shard))
        why = ""
        for _ in range(EXPORT_QUERY_TRIES):  # a busy worker may miss one deadline
            try:
                return await handle.query(ARMED_QUERY, rpc_timeout=timedelta(seconds=EXPORT_QUERY_TIMEOUT_S))
            except RPCError as exc:
                if exc.status == RPCStatusCode.NOT_FOUND:
                    return []  # a shard no timer was ever placed on has no workflow yet
                why = f"{exc.status.name}: {exc.message}"
                if exc.status not in (
                    RPCStatusCode.CANCELLED,
                    RPCStatusCode.DEADLINE_EXCEEDED,
                    RPCStatusCode.UNAVAILABLE,
                ):
                    break
            except Exception as exc:  # the query failed or was rejected inside the workflow
                why = f"{type(exc).__name__}: {exc}"
                break
        raise RuntimeError(
            f"temporal_shards: shard workflow {self.shard_id(shard)} did not answer the '{ARMED_QUERY}' query "
            f"({why}); a worker on task queue {self.task_queue} must be running"
        )

    async def disarm(self, ids: Sequence[str]) -> int:
        """Migration reconcile only (the Composio article has no cancel): see ``disarm`` in queries.sql."""
        if not ids:
            return 0
        await self._connect()
        async with self.pool.connection() as conn:
            cur = await conn.execute(self.q["disarm"], {"ids": list(ids)})
            return len(await cur.fetchall())
