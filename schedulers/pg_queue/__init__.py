"""pg_queue: the "before" design of the Composio article (docs/sources.md), a Postgres table used
as the timer queue.

It exists to be measured and migrated away from, so it behaves like the production system the
article describes, not like an improved one: the MVCC doom loop is part of the spec.

The table (``schema.sql``)
    One wide row per polling trigger: id, tenant, type, priority, interval, next fire time, claim
    columns (``claimed_by``, ``claimed_at``), status, timestamps and ``poll_state``, the encrypted
    poll state: ``StoreContext.state_bytes`` of incompressible random bytes (default 4096), so with
    the default storage Postgres moves it out of line into TOAST (``toasted-state``). Six indexes: the
    primary key, ``next_fire_at`` (the one the due-work query walks), ``tenant_id``, ``type``,
    ``claimed_by`` and ``created_at``. Default fillfactor, default autovacuum: a first version
    (the storage knobs every Postgres design accepts, :data:`schedulers.pg.STORAGE_OPTIONS`,
    default to the server's values here; ``bench compare --tuned-control`` runs it with
    pg_leased's autovacuum settings, to tell tuning from design).
    Effects go to ``effects`` keyed ``(trigger_id, due_at)``.

The cycle, and its four writes per poll (``four-writes``: "one insert, two updates, and one delete")
    Every ``tick_s`` (``tick-1s``) a run loop takes one batch:

    * **Write 1, UPDATE** ``claim_due``, its own autocommit transaction, before any polling:
      select up to ``batch`` due rows (``batch-800``), oldest ``next_fire_at`` first, with
      ``FOR UPDATE SKIP LOCKED``, and mark them claimed (``status``, ``claimed_by``,
      ``claimed_at``, ``attempts``). ``claimed_by`` is indexed, so this update is never HOT.
    * The processor of the timers' type polls (no write) and returns one outcome per fire. With
      ``hold_tick_tx`` (the default, as the article's tick did it) the tick's transaction is open
      around the claim and this hand-off: it takes an xid before the claim (``tick_hold``) and
      ends once the processor has the outcomes, so the vacuum horizon stays where it was for as
      long as the tick takes (``slow-ticks``: "Slower ticks held transactions and snapshots open
      longer, delaying cleanup further", the feedback that made the doom loop a loop). The claim
      itself still commits on its own: held in the tick's transaction, its row locks would make
      an ``arm()`` moving an in-flight timer wait for the poll (and a processor that waits for
      that arm, never return). With ``hold_tick_tx`` off nothing stays open while the processor
      polls (the improvement a team would try first).

    Then one transaction commits the poll:

    * **Write 2, UPDATE** ``mark_polled``: record the outcome on the row (``status='polled'``,
      ``last_polled_at``, ``last_poll_found_events``, ``poll_count``). It changes no indexed
      column, so it is HOT when the heap page has room, which on a default-fillfactor table
      packed with fresh inserts it often does not (tests/pg_queue measures 14-22% of all
      updates HOT; the article saw 18%, ``hot-18pct``).
    * **Write 3, DELETE** ``delete_fired``: the fired row goes, with its TOAST chunks.
    * **Write 4, INSERT** ``insert_next_run``: the row for the next run, carrying the poll state
      (the poll's new state when it changed, else the state read at claim), so every fire
      rewrites all TOAST chunks and adds an entry to each of the six indexes. A finished timer
      (``next_fire_at`` None) gets no insert.
    * ``record_effects`` (the effects table, not a trigger-table write): ``INSERT .. ON CONFLICT
      DO NOTHING RETURNING`` tells which effects were newly delivered.

    After the commit the processor's ``committed(fires, delivered)`` is called. Every statement
    covers the whole batch (arrays and ``unnest``), yet every row is still written four times,
    each write leaving a dead heap version behind: three dead versions per fire, plus the dead
    TOAST chunks of the deleted row.

Arming in bulk
    An ``arm()`` of fewer than ``bulk_arm_min`` timers is one upsert of unnested arrays
    (``arm_upsert``). A larger one (populations of millions) copies the rows in binary into a
    temporary staging table and upserts from it with one statement (``arm_bulk_*``, the same
    semantics), split into contiguous id ranges (of up to ``schedulers.pg.BULK_RANGE_ROWS``)
    armed ``arm_connections`` at a time on connections of their own, **each range its own
    transaction**: such an ``arm()`` is not atomic, a failure may leave some ranges armed
    (arming is idempotent: the caller retries the call).
    Arming is the loader's path, not the doom loop's, so a faster one changes nothing measured.

Choices the article does not state (what a typical first version does)
    * Claims are recovered by a **stale-claim timeout**, not leases: a claim older than
      ``stale_claim_s`` (default 300 s) is treated as abandoned and the due-work query takes it
      again. There is no heartbeat, so a processor slower than ``stale_claim_s`` loses its
      timers to another runner (``heartbeat_leases=False``), or re-claims them itself on a later
      tick (a second delivery, ``attempt`` 2, whose first commit fences out the other), and a
      crashed runner's timers come back after ``stale_claim_s`` plus one tick.
    * The commit is fenced by the claim (``claimed_by`` and ``claimed_at``): if ``arm()`` moved a
      row while it was in flight (the upsert clears the claim), or another runner took it over
      after it went stale, the old fire's update, delete and re-insert skip it, so the newer arm
      wins. The poll's new state for such a row is dropped with it (the row belongs to the newer
      arm; its next poll reads the state again); its effect is still recorded under its key.
    * Claimed rows keep their past ``next_fire_at`` until their commit deletes them, so every
      tick's due-work scan also walks past the rows in flight.
    * Claim order is ``next_fire_at`` only; ``priority`` is stored but not ordered on, and there is
      no per-tenant fairness: one tenant's backlog fills the batch.
    * One claim per tick per run loop: a run loop cannot fire more than ``batch / tick_s`` timers
      a second, and a tick that slows down (walking dead index entries) lowers that ceiling.
      Up to ``inflight_batches`` claimed batches are polled concurrently; when all are busy the
      next tick waits.
    * Cancelling ``run`` is a crash (see :mod:`schedulers.base`): in-flight batches are cancelled
      and their claims are left for the stale-claim timeout. Setting ``stop`` lets in-flight
      batches commit.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from schedulers.base import (
    Capabilities,
    Fire,
    Outcome,
    Processor,
    RunLoop,
    StoreContext,
    Timer,
    nap,
    resolve_options,
    us,
)
from schedulers.pg import (
    apply_schema,
    apply_storage,
    drop_schema,
    in_id_ranges,
    open_pool,
    qualified,
    storage_options,
)
from schedulers.sqlfile import Queries

_HERE = Path(__file__).parent
SCHEMA_SQL = _HERE / "schema.sql"
QUERIES_SQL = _HERE / "queries.sql"

TABLES = ("triggers", "effects")
# the columns of arm_bulk_staging (queries.sql), in arm_bulk_copy's order, for the binary COPY
_STAGING_TYPES = ["text", "text", "text", "int4", "timestamptz", "bytea"]
STORAGE_TABLES = ("triggers",)  # the churning table the storage knobs apply to
# The six indexes of the trigger table (``six-indexes``), plus the effects key.
INDEXES = (
    "triggers_pkey",
    "triggers_next_fire_at_idx",
    "triggers_tenant_id_idx",
    "triggers_type_idx",
    "triggers_claimed_by_idx",
    "triggers_created_at_idx",
    "effects_pkey",
)


def _ts(t: float | None) -> datetime | None:
    return None if t is None else datetime.fromtimestamp(us(t), tz=UTC)


class PgQueueScheduler:
    name = "pg_queue"
    description = (
        "the Composio article's 'before': Postgres table as queue, delete + re-insert per poll (the doom loop)"
    )
    default_options: dict[str, Any] = {
        "tick_s": 1.0,  # the scheduler wakes this often and claims one batch, seconds (tick-1s)
        "batch": 800,  # rows claimed per tick (batch-800)
        "stale_claim_s": 300.0,  # a claim older than this is abandoned and claimable again, seconds
        "inflight_batches": 4,  # claimed batches polled concurrently per run loop
        "batch_time_s": 1.0,  # allowance to claim and hand over one batch, seconds (enters max_lag_s)
        "pool_size": 8,  # Postgres connections per scheduler instance
        # arm() of at least this many timers takes the bulk path (binary COPY into a staging table,
        # one upsert from it): below it, the per-call temp table costs more than it saves
        "bulk_arm_min": 1000,
        # connections a bulk arm() spreads its id ranges over, one transaction each, concurrently
        # (so such an arm() is not one transaction): two server backends upsert at once, 2 cores
        "arm_connections": 2,
        # True: the tick's transaction (an xid: the vacuum horizon) stays open through the claim and
        # the hand-off to the processor, as the Composio article's tick did; False: nothing open while polling
        "hold_tick_tx": True,
        # fillfactor_pct, autovacuum_*: schedulers.pg.STORAGE_OPTIONS, at the server's values
        **storage_options(),
    }
    conformance_options: dict[str, Any] = {"tick_s": 0.1, "stale_claim_s": 2.0, "batch": 50}
    needs_postgres = True
    needs_temporal = False

    def __init__(self, ctx: StoreContext, **options: Any) -> None:
        self.ctx = ctx
        self.options = o = resolve_options(self.name, self.default_options, options)
        self.tick_s = o["tick_s"]
        self.batch = o["batch"]
        self.stale_claim_s = o["stale_claim_s"]
        self.inflight_batches = o["inflight_batches"]
        self.batch_time_s = o["batch_time_s"]
        self.pool_size = o["pool_size"]
        self.hold_tick_tx = o["hold_tick_tx"]
        self.bulk_arm_min = max(1, int(o["bulk_arm_min"]))
        self.arm_connections = max(1, int(o["arm_connections"]))
        self.capabilities = Capabilities(
            max_lag_s=self.tick_s + self.batch_time_s,
            per_tenant_fairness=False,
            heartbeat_leases=False,  # stale-claim timeout, no heartbeat
            redelivery_s=self.stale_claim_s + self.tick_s,
            # every fire deletes the row and inserts the next one, state included: no skipping
            state_writes="always",
            state_writes_fixed=True,
            lease_s=self.stale_claim_s,
        )
        self.q = Queries(QUERIES_SQL, ctx.schema)
        self._pool: AsyncConnectionPool | None = None
        self._pool_lock = asyncio.Lock()
        self.last_tick_at = 0.0  # epoch s of the latest claim (health checks); 0.0 before run()
        self.claimed_timers = 0  # schedulers.base: rows claimed, stale claims taken over included
        self.fires = 0
        self.ticks = 0
        self.fenced = 0  # fires whose row was moved or taken over while in flight
        self.batch_errors = 0  # batches whose processor or commit raised (claims left to go stale)
        self.claim_errors = 0  # ticks whose claim failed on a lost connection (server restart); retried
        self.last_error: BaseException | None = None

    # -- lifecycle ------------------------------------------------------------------------

    async def _get_pool(self) -> AsyncConnectionPool:
        if self._pool is None:
            if not self.ctx.dsn:
                raise ValueError("pg_queue needs a Postgres DSN (StoreContext.dsn is empty); pass --dsn")
            async with self._pool_lock:
                if self._pool is None:
                    self._pool = await open_pool(
                        self.ctx.dsn, min_size=1, max_size=self.pool_size, name="timerbench-pg_queue"
                    )
        return self._pool

    async def setup(self) -> None:
        pool = await self._get_pool()
        async with pool.connection() as conn:
            await apply_schema(conn, self.ctx.schema, SCHEMA_SQL)
            await apply_storage(conn, self.ctx.schema, STORAGE_TABLES, self.options)

    async def teardown(self, drop: bool = True) -> None:
        if drop and self.ctx.dsn:
            pool = await self._get_pool()
            async with pool.connection() as conn:
                await drop_schema(conn, self.ctx.schema)
        if self._pool is not None:
            pool, self._pool = self._pool, None
            await pool.close()

    def relations(self) -> list[str]:
        return [qualified(self.ctx.schema, t) for t in TABLES]

    def indexes(self) -> list[str]:
        """Schema-qualified index names, for ``pg_stat_user_indexes``."""
        return [qualified(self.ctx.schema, i) for i in INDEXES]

    # -- arming ---------------------------------------------------------------------------

    async def arm(self, timers: Sequence[Timer]) -> None:
        if not timers:
            return
        # One upsert cannot touch a row twice: the last arm of an id in this call wins.
        latest: dict[str, Timer] = {}
        for t in timers:
            latest[t.id] = t
        batch = list(latest.values())
        size = self.ctx.state_bytes
        if len(batch) >= self.bulk_arm_min:
            await self._arm_bulk(sorted(batch, key=lambda t: t.id), size)
            return
        params = {
            "ids": [t.id for t in batch],
            "tenants": [t.tenant_id for t in batch],
            "types": [t.type for t in batch],
            "priorities": [t.priority for t in batch],
            "fire_ats": [None if t.fire_at is None else us(t.fire_at) for t in batch],
            # Fresh encrypted state for a new trigger; ignored by the upsert for an existing one.
            "states": [os.urandom(size) if size else None for _ in batch],
        }
        pool = await self._get_pool()
        async with pool.connection() as conn:
            await conn.execute(self.q["arm_upsert"], params)

    async def _arm_bulk(self, batch: list[Timer], size: int) -> None:
        """``batch`` (sorted by id) in contiguous id ranges, each copied and upserted in a
        transaction of its own, ``arm_connections`` at once (module docstring, "Arming in bulk")."""
        pool = await self._get_pool()
        await in_id_ranges(len(batch), self.arm_connections, lambda a, b: self._arm_range(pool, batch[a:b], size))

    async def _arm_range(self, pool: AsyncConnectionPool, batch: list[Timer], size: int) -> None:
        async with pool.connection() as conn:
            async with conn.transaction():
                await conn.execute(self.q["arm_bulk_staging"])
                async with conn.cursor() as cur:
                    async with cur.copy(self.q["arm_bulk_copy"]) as copy:
                        copy.set_types(_STAGING_TYPES)
                        for t in batch:
                            # fresh encrypted state for a new trigger; the upsert keeps an existing one's
                            state = os.urandom(size) if size else None
                            await copy.write_row((t.id, t.tenant_id, t.type, t.priority, _ts(t.fire_at), state))
                await conn.execute(self.q["arm_bulk_upsert"])

    async def export_armed(self) -> list[Timer]:
        pool = await self._get_pool()
        async with pool.connection() as conn:
            cur = await conn.execute(self.q["export_armed"])
            rows = await cur.fetchall()
        return [Timer(id_, fire_at, type_, tenant, prio) for id_, fire_at, type_, tenant, prio in rows]

    async def disarm(self, ids: Sequence[str]) -> int:
        """Migration reconcile only: delete these timers' rows (``disarm`` in queries.sql)."""
        if not ids:
            return 0
        pool = await self._get_pool()
        async with pool.connection() as conn:
            cur = await conn.execute(self.q["disarm"], {"ids": list(ids)})
            return len(await cur.fetchall())

    async def stats(self) -> dict[str, float]:
        """In-process counters only: the queue's depth is the engine's to count (the sampler's
        ``backlog``), and counting it here would scan the table the run measures."""
        return {
            "claimed_timers": float(self.claimed_timers),
            "fires": float(self.fires),
            "ticks": float(self.ticks),
            "fenced": float(self.fenced),
            "batch_errors": float(self.batch_errors),
            "claim_errors": float(self.claim_errors),
        }

    # -- the scheduler loop ---------------------------------------------------------------

    async def run(self, processors: Mapping[str, Processor], stop: asyncio.Event, worker_id: str | None = None) -> None:
        owner = worker_id or f"pgq-{os.getpid()}-{id(stop):x}"
        pool = await self._get_pool()
        batch_no = 0
        # Cancelling is a crash (RunLoop): in-flight batches die with their owner and their
        # claims are NOT released; they come back when the stale-claim timeout lapses.
        async with RunLoop(self.inflight_batches) as loop:
            while not stop.is_set():
                started = time.monotonic()
                if not await loop.take_slot(stop):  # all batches busy: this tick waits (no overlap beyond the limit)
                    break
                try:
                    if self.hold_tick_tx:
                        # The tick's transaction lives in its batch task, in the slot just taken
                        # (it ends after the hand-off); the loop waits for its claim only.
                        claimed: asyncio.Future = asyncio.get_running_loop().create_future()
                        task = loop.start_batch(self._held_tick, pool, processors, owner, batch_no + 1, claimed)
                        task.add_done_callback(self._note_error)
                        fires = await claimed
                        self.ticks += 1
                        self.last_tick_at = time.time()
                        if fires:
                            batch_no += 1
                        await self._sleep_out_tick(started, stop)
                        continue
                    fires, claimed_at = await self._claim(pool, owner, batch_no)
                except psycopg.OperationalError as exc:
                    # The server went away (a restart, a failover): the claim's statement either
                    # committed or did not; either way retry next tick -- a claim lost with its
                    # connection comes back after stale_claim_s, like a crashed owner's.
                    if not self.hold_tick_tx:  # else the tick's task gave its slot back
                        loop.give_back()
                    self.claim_errors += 1
                    self.last_error = exc
                    await nap(self.tick_s, stop)
                    continue
                except BaseException:
                    if not self.hold_tick_tx:  # else the tick's task gives its slot back itself
                        loop.give_back()
                    raise
                self.ticks += 1
                self.last_tick_at = time.time()
                if fires:
                    batch_no += 1
                    task = loop.start_batch(self._process, pool, processors, fires, claimed_at, owner)
                    task.add_done_callback(self._note_error)
                else:
                    loop.give_back()
                await self._sleep_out_tick(started, stop)

    async def _sleep_out_tick(self, started: float, stop: asyncio.Event) -> None:
        """One claim per tick, as the Composio article's scheduler: sleep out the rest of the tick."""
        wait_s = self.tick_s - (time.monotonic() - started)
        if wait_s > 0:
            await nap(wait_s, stop)

    async def _held_tick(
        self,
        pool: AsyncConnectionPool,
        processors: Mapping[str, Processor],
        owner: str,
        batch_no: int,
        claimed: asyncio.Future,
    ) -> None:
        """One tick as the Composio article's scheduler ran it (``hold_tick_tx``): open the tick's
        transaction with an xid, claim (committed on its own), hand the batch to the processor and
        end the tick's transaction once the processor has the outcomes; then write the poll's
        results in the commit transaction. ``claimed`` gets the claimed fires (or the error of the
        tick's first statements, which the run loop handles as a claim's)."""
        try:
            async with pool.connection() as held:
                async with held.transaction():
                    await held.execute(self.q["tick_hold"])
                    fires, claimed_at = await self._claim(pool, owner, batch_no)
                    claimed.set_result(fires)
                    if not fires:
                        return
                    # The hand-off, with the tick's xid running: vacuum keeps every dead tuple
                    # younger than it until the processor has answered.
                    polled = [
                        (group, await self._poll(processors, type_, group))
                        for type_, group in self._by_type(fires).items()
                    ]
        except BaseException as exc:
            if not claimed.done():  # the claim itself failed: the tick's error, not a batch's
                claimed.set_exception(exc)
                if isinstance(exc, Exception):
                    return
            raise
        for group, (processor, outcomes) in polled:
            delivered = await self._commit(pool, group, outcomes, claimed_at, owner)
            processor.committed(group, delivered)

    @staticmethod
    def _by_type(fires: list[Fire]) -> dict[str, list[Fire]]:
        by_type: dict[str, list[Fire]] = {}
        for f in fires:
            by_type.setdefault(f.type, []).append(f)
        return by_type

    @staticmethod
    async def _poll(
        processors: Mapping[str, Processor], type_: str, group: list[Fire]
    ) -> tuple[Processor, list[Outcome]]:
        processor = processors[type_]
        outcomes = list(await processor.process(group))
        if len(outcomes) != len(group):
            raise ValueError(f"processor for type {type_!r} returned {len(outcomes)} outcomes for {len(group)} fires")
        return processor, outcomes

    def _note_error(self, task: asyncio.Task) -> None:
        # A batch that failed keeps its claims until the stale-claim timeout (a first version
        # does not release them); the failure is counted so a run can report it.
        if not task.cancelled() and task.exception() is not None:
            self.batch_errors += 1
            self.last_error = task.exception()

    async def _claim(self, pool: AsyncConnectionPool, owner: str, batch_no: int) -> tuple[list[Fire], Any]:
        async with pool.connection() as conn:  # autocommit: the claim commits on its own
            cur = await conn.execute(
                self.q["claim_due"],
                {"owner": owner, "batch": self.batch, "stale_claim_s": self.stale_claim_s},
            )
            rows = await cur.fetchall()
        if not rows:
            return [], None
        claimed_at = rows[0][8]  # one statement, one now(): the same for the whole batch
        fires = [
            Fire(id_, tenant, type_, due_at, armed_at, attempts, owner, batch_no, state, prio)
            for id_, tenant, type_, prio, due_at, armed_at, attempts, state, _ in rows
        ]
        self.claimed_timers += len(fires)
        return fires, claimed_at

    async def _process(
        self,
        pool: AsyncConnectionPool,
        processors: Mapping[str, Processor],
        fires: list[Fire],
        claimed_at: Any,
        owner: str,
    ) -> None:
        for type_, group in self._by_type(fires).items():
            processor, outcomes = await self._poll(processors, type_, group)
            delivered = await self._commit(pool, group, outcomes, claimed_at, owner)
            processor.committed(group, delivered)

    async def _commit(
        self,
        pool: AsyncConnectionPool,
        fires: list[Fire],
        outcomes: list[Outcome],
        claimed_at: Any,
        owner: str,
    ) -> list[bool]:
        """Writes 2-4 of the cycle plus the effects, in one transaction."""
        ids = [f.timer_id for f in fires]
        fence = {"owner": owner, "claimed_at": claimed_at}
        effect_fires = [f for f, o in zip(fires, outcomes) if o.effect]
        async with pool.connection() as conn:
            async with conn.transaction():
                # Write 2: UPDATE, record the poll on the row.
                cur = await conn.execute(
                    self.q["mark_polled"],
                    {**fence, "ids": ids, "found_events": [o.effect for o in outcomes]},
                )
                ours = [r[0] for r in await cur.fetchall()]
                carried: dict[str, tuple[Any, int]] = {}
                if ours:
                    # Write 3: DELETE the fired row.
                    cur = await conn.execute(self.q["delete_fired"], {**fence, "ids": ours})
                    carried = {id_: (created, count) for id_, created, count in await cur.fetchall()}
                # Write 4: INSERT the next-run row, carrying the poll state.
                nxt = [(f, o) for f, o in zip(fires, outcomes) if f.timer_id in carried and o.next_fire_at is not None]
                if nxt:
                    await conn.execute(
                        self.q["insert_next_run"],
                        {
                            "ids": [f.timer_id for f, _ in nxt],
                            "tenants": [f.tenant_id for f, _ in nxt],
                            "types": [f.type for f, _ in nxt],
                            "priorities": [f.priority for f, _ in nxt],
                            "intervals_s": [o.next_fire_at - f.due_at for f, o in nxt],
                            "next_fire_ats": [us(o.next_fire_at) for _, o in nxt],
                            "poll_counts": [carried[f.timer_id][1] for f, _ in nxt],
                            "states": [o.new_state if o.new_state is not None else f.state for f, o in nxt],
                            "created_ats": [carried[f.timer_id][0] for f, _ in nxt],
                        },
                    )
                fresh: set[tuple[str, float]] = set()
                if effect_fires:
                    cur = await conn.execute(
                        self.q["record_effects"],
                        {
                            "owner": owner,
                            "ids": [f.timer_id for f in effect_fires],
                            "due_ats": [us(f.due_at) for f in effect_fires],
                        },
                    )
                    fresh = {(tid, us(due)) for tid, due in await cur.fetchall()}
        self.fires += len(fires)
        self.fenced += len(fires) - len(ours)
        delivered = []
        for f, o in zip(fires, outcomes):
            key = (f.timer_id, us(f.due_at))
            if o.effect and key in fresh:
                fresh.discard(key)  # the same key twice in one batch is one effect
                delivered.append(True)
            else:
                delivered.append(False)
        return delivered
