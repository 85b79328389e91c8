"""pg_leased: the Postgres answer (the timer-wheel and durable-workflows articles, docs/sources.md):
SKIP LOCKED claims, heartbeat leases, a sweeper, and HOT-friendly storage.

Data flow of one fire (every statement is in ``queries.sql``, the tables in ``schema.sql``):

1. ``claim_due`` — one short transaction, committed before any work runs (claim-commit-execute: "claim,
   commit, then execute"; a claim held open across a slow poll pins the vacuum horizon). It
   locks due rows with ``FOR UPDATE SKIP LOCKED``, ranks them per tenant with ``ROW_NUMBER``
   outside the locking query, keeps ``max_per_tenant`` per tenant, and marks the picked rows
   ``running`` under a lease ``(owner_id, lease_expires)`` (lease-columns).
2. The same statement returns the poll state of the whole batch (batch-200: one query for
   the batch instead of per-row round trips).
3. The processor polls, and hands outcomes back in groups as their polls finish.
4. ``commit_batch`` per claim, or per group under load (``commit_per_group``) — one statement,
   hence one transaction: re-arm (next fire time, lease cleared, version + 1), the new poll
   state, and the effects under their ``(trigger_id, due_at)`` key (checkpoint-key, the idempotent
   checkpoint); ``RETURNING`` says which effects were new, and the processor hears it through
   ``committed``. Leases are per row, so nothing ties a row's commit to the rest of its claim:
   under load, committing per group keeps a claim's slowest poll from holding the other rows'
   re-arms and the run loop's room (head-of-line blocking).

Rows are updated in place, never deleted per fire. A finished timer stays as a ``done`` row,
outside the partial index. ``next_fire_at IS NULL`` is due now; it is stored as ``due_key =
-infinity`` (a generated column) so that "due" is one index range, NULLs first.

Leases (heartbeat-lease: "the timeout is not evidence of death, it is evidence of silence"): while a
batch is in flight, its run loop's heartbeat extends the lease of every row it holds every
``lease_s * heartbeat_fraction``; every run loop also runs the sweeper every ``sweep_s``, which
returns rows whose lease has lapsed to ``scheduled`` (safe on all nodes at once). A crashed
owner's rows come back after ``lease_s + sweep_s + tick_s`` at most; a slow owner that still
heartbeats keeps them. Cancelling ``run`` is a crash: leases are not released, heartbeats stop.

Re-arm versus move: ``arm()`` of an id that is in flight bumps its ``version``; the in-flight
batch's commit only re-arms rows whose ``(owner_id, version, attempt)`` still match its claim, so
the move wins. The same check drops a commit for a row swept away from an owner that looked dead.

Arming in bulk: an ``arm()`` of fewer than ``bulk_arm_min`` timers is one upsert of unnested
arrays (``arm``), one transaction. A larger one (populations of millions: bench scale, scripts)
copies the rows in binary into a temporary staging table and upserts from it with one statement
(``arm_bulk_*``, the same move semantics), split into contiguous id ranges (of up to
``schedulers.pg.BULK_RANGE_ROWS``) armed ``arm_connections`` at a time on connections of their
own, **each range its own transaction**: such an ``arm()`` is not atomic, a failure may leave
some ranges armed (arming is idempotent, so the caller retries the call). Every range takes its
row locks in id order, as ``commit_batch`` does.

Fairness: the timer-wheel article's claim over-selects ``limit * max_per_tenant`` rows so the per-tenant cap
still leaves a full batch. That holds while the big tenant's backlog is smaller than the
over-select; behind a larger one (the conformance suite's 2,000-row tenant against 500 locked
rows) every locked row belongs to one tenant. ``claim_due`` therefore adds a second locking
branch that takes each tenant's earliest due rows directly (a loose index scan over tenants,
capped at ``tenant_scan`` tenants per claim, each tenant's share of the over-select), and ranks
the union of both.

Wake-ups (the claim loops poll only when work may be there): the fairness branch of ``claim_due``
runs only when the time-ordered branch came back full and the per-tenant cap leaves it short of a
batch (otherwise it could add nothing, and a one-time filter skips it). Of the ``claimers`` claim
loops, ``idle_claimers`` claim while claims come back short of a batch; the rest wait until one
comes back full. After an empty claim a loop reads the earliest scheduled fire time
(``next_due``) and sleeps until then, at least a tick and at most ``idle_s``. What cuts a sleep
short: an ``arm()`` in this instance of a timer due within ``idle_s`` (a later one is found by a
claim that comes anyway), a re-arm due before the sleep ends, a sweep that returned rows, and a
``NOTIFY`` on the store's channel, which ``arm()`` sends (at its commit) when it arms a timer due
within ``idle_s``, for the loops of other processes (``listen_notify``: one LISTEN
connection per run, reopened with backoff when lost; reopening wakes the loops too). A NOTIFY
that never arrives delays a timer until the planned wake-up, at most ``idle_s``.

Capacity: what a claim reads and locks is bounded by ``limit * overselect + tenant_scan`` rows,
never by the backlog (the partial index is in the claim's order, so nothing sorts the due
range). A claim that cost more the further behind it was made pg_leased collapse under
overload; ``overselect`` (default 1, the article's is ``max_per_tenant``) is the knob
(MEASUREMENTS.md).

HOT-friendliness knobs (all options, all recorded in ``self.options``):

* ``split_state`` keeps the wide, incompressible poll state in its own key-value table updated
  only by primary key, so those updates can be HOT; the schedule row stays narrow. The schedule
  row itself is never HOT on a claim or re-arm: both change ``state`` (the partial indexes'
  predicate) and ``due_key`` (indexed). Heartbeats touch only ``lease_expires`` and can be HOT.
* ``skip_unchanged_state``: no state write when the poll did not change it.
* ``fillfactor_pct`` / ``state_fillfactor_pct``: free room on each page for HOT versions.
* ``inline_state`` keeps the state inside the row (``toast_tuple_target = 8160``) instead of
  TOAST, which turns one state write from a row update plus a delete and an insert per TOAST
  chunk into one row update. With a 4 kB state that update cannot be HOT (two versions do not
  fit in a page) and still costs fewer writes than TOAST's HOT one: the HOT ratio alone
  misleads here, writes per fire do not.
* ``autovacuum_tuned`` with per-table scale factor, threshold and cost delay.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import logging
import os
import socket
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg_pool import AsyncConnectionPool

from schedulers.base import (
    Capabilities,
    Fire,
    Held,
    Outcome,
    Processor,
    Range,
    RunLoop,
    StoreContext,
    Timer,
    nap,
    outcomes_as_polls_finish,
    resolve_options,
    us,
)
from schedulers.pg import apply_storage, drop_schema, in_id_ranges, open_pool, qualified, storage_options
from schedulers.sqlfile import Queries, load_blocks

log = logging.getLogger(__name__)

HERE = Path(__file__).parent
SCHEMA_SQL = HERE / "schema.sql"
QUERIES_SQL = HERE / "queries.sql"

COMMIT_PER_GROUP = ("auto", "always", "never")  # the commit_per_group option's values
TOAST_TUPLE_TARGET_DEFAULT = 2032  # Postgres' default for 8 kB pages: wider rows go to TOAST
TOAST_TUPLE_TARGET_MAX = 8160  # the largest Postgres accepts: a 4 kB state stays in the row
LISTEN_BACKOFF_S = (0.1, 5.0)  # first and longest wait before reopening a lost LISTEN connection
# the columns of arm_bulk_staging (queries.sql), in arm_bulk_copy's order, for the binary COPY
_STAGING_TYPES = ["text", "text", "text", "int4", "timestamptz", "bytea"]


def _ts(t: float | None) -> datetime | None:
    return None if t is None else datetime.fromtimestamp(us(t), tz=UTC)


def _release(held: Counter[str], items: Sequence[_Claimed]) -> None:
    """Stop heartbeating these rows (counted: a row may be swept and re-claimed by this same
    loop while a stalled batch still holds its older claim)."""
    held.subtract(c.fire.timer_id for c in items)
    for c in items:
        if held[c.fire.timer_id] <= 0:
            del held[c.fire.timer_id]


@dataclass(slots=True)
class _Claimed:
    fire: Fire
    version: int


class PgLeasedScheduler:
    name = "pg_leased"
    description = (
        "Postgres with SKIP LOCKED claims, per-tenant fairness, heartbeat leases, a sweeper, HOT-friendly state"
    )
    # Why each default is what it is, with the runs behind it: MEASUREMENTS.md ("Defaults").
    default_options: dict[str, Any] = {
        # seconds a run loop sleeps after an empty claim (tick-100ms: up to 100 ms of latency)
        "tick_s": 0.1,
        # rows per claim and per processor call (batch-200)
        "batch": 200,
        # rows one tenant may take in one claim: at most 30% of a batch, so a hot tenant keeps up
        "max_per_tenant": 60,
        # tenants the fairness branch of claim_due visits per claim (tenant_id order, two index
        # probes each); tenants past it are claimed by the time-ordered branch, without the guarantee
        "tenant_scan": 256,
        # the time-ordered branch locks batch x overselect rows; the article's is max_per_tenant,
        # but every lock is a WAL record and the fairness branch already finds the other tenants
        "overselect": 1,
        # seconds a lease lasts without a heartbeat (lease-trade-off: too short steals from slow
        # owners, safe with keyed effects; too long delays recovery)
        "lease_s": 30.0,
        # heartbeat period as a fraction of lease_s (1/3: two heartbeats may be lost in a row)
        "heartbeat_fraction": 1 / 3,
        # seconds between sweeps of expired leases, per run loop
        "sweep_s": 5.0,
        # claim statements one run loop keeps in flight (SKIP LOCKED keeps their rows disjoint)
        "claimers": 3,
        # claim loops that keep claiming while claims come back short of a batch; the others wait
        # until a claim comes back full (a backlog needs them). Three loops each polling every
        # tick were most of the design's Postgres CPU at 556/s (MEASUREMENTS.md)
        "idle_claimers": 1,
        # longest sleep after an empty claim: the loop sleeps until the earliest scheduled fire
        # time (at least a tick, at most this), and an arm due sooner wakes it (listen_notify)
        "idle_s": 1.0,
        # LISTEN for arms made by other processes: arm() sends a NOTIFY when it arms a timer due
        # within idle_s, which a sleeping loop elsewhere could otherwise miss for up to idle_s
        "listen_notify": True,
        # room of one run loop, in batches: inflight_batches x batch rows in flight; rows give
        # theirs back as their polls finish and commit
        "inflight_batches": 16,
        # "always": commit each group of outcomes as its polls finish; "never": the whole claim
        # when its slowest poll ends (the articles' batch); "auto": per group only when the claim
        # started with less than half the room free (head-of-line blocking would hold claims back)
        "commit_per_group": "auto",
        # connections in this instance's pool
        "pool_size": 12,
        # arm() of at least this many timers takes the bulk path (binary COPY into a staging table,
        # one upsert from it): below it, the per-call temp table costs more than it saves
        "bulk_arm_min": 1000,
        # connections a bulk arm() spreads its id ranges over, one transaction per range, at once
        # (so such an arm() is not one transaction): the server's upsert of one range overlaps
        # the client's encoding of the next; 4 armed no faster than 2 on 2 cores
        "arm_connections": 2,
        # percent; state table page fill: room for a second version of every row, since one commit
        # updates a whole batch and cannot prune its own old versions before it commits
        "state_fillfactor_pct": 50,
        # poll state in its own table, updated by primary key (HOT-able). False: in the row.
        "split_state": True,
        # skip the state write when the poll did not change it (skip-unchanged)
        "skip_unchanged_state": True,
        # keep the poll state inside the heap row (toast_tuple_target 8160) instead of TOAST:
        # fewer writes per fire, though the HOT ratio reads worse
        "inline_state": True,
        # The storage knobs every Postgres design accepts (schedulers.pg.STORAGE_OPTIONS), on the
        # schedule and state tables. Claims and re-arms are never HOT (they change indexed
        # columns): the free room serves HOT heartbeats. autovacuum_tuned: per-table settings.
        **storage_options(fillfactor_pct=90, autovacuum_tuned=True),
    }
    conformance_options: dict[str, Any] = {
        "tick_s": 0.05,
        "lease_s": 2.0,
        "sweep_s": 0.25,
        "batch": 50,
        "max_per_tenant": 10,
        # claimers: the default (3), as benchmarked, so fairness is not declared here (see
        # capabilities); tests/pg_leased checks it with one claimer
    }
    needs_postgres = True
    needs_temporal = False
    option_ranges: dict[str, Range] = {
        "batch": Range(lo=1),
        "max_per_tenant": Range(lo=1),
        "tenant_scan": Range(lo=1),
        "overselect": Range(lo=1),
        "heartbeat_fraction": Range(0, 1, open=True),
        "idle_claimers": Range(lo=1),
        "idle_s": Range(lo=0),
        "bulk_arm_min": Range(lo=1),
        "arm_connections": Range(lo=1),
    }

    def __init__(self, ctx: StoreContext, **options: Any) -> None:
        self.options = o = resolve_options(self.name, self.default_options, options, self.option_ranges)
        if not ctx.dsn:
            raise ValueError(f"{self.name} needs a Postgres DSN (StoreContext.dsn is empty)")
        self.ctx = ctx
        self.tick_s = o["tick_s"]
        self.batch = o["batch"]
        self.max_per_tenant = o["max_per_tenant"]
        self.tenant_scan = o["tenant_scan"]
        self.overselect = o["overselect"]
        self.lease_s = o["lease_s"]
        self.heartbeat_s = self.lease_s * o["heartbeat_fraction"]
        self.sweep_s = o["sweep_s"]
        self.inflight_batches = o["inflight_batches"]
        self.claimers = max(1, o["claimers"])
        self.idle_claimers = min(self.claimers, o["idle_claimers"])
        self.idle_s = max(self.tick_s, o["idle_s"])
        self.listen_notify = bool(o["listen_notify"])
        self.split_state = o["split_state"]
        self.skip_unchanged_state = o["skip_unchanged_state"]
        self.bulk_arm_min = o["bulk_arm_min"]
        self.arm_connections = o["arm_connections"]
        self.commit_per_group = str(o["commit_per_group"]).lower()
        if self.commit_per_group not in COMMIT_PER_GROUP:
            raise ValueError(
                f"{self.name}: commit_per_group must be one of {', '.join(COMMIT_PER_GROUP)}, "
                f"got {o['commit_per_group']!r}"
            )
        self.capabilities = Capabilities(
            # A due row waits at most one tick for the next claim (a sleeping loop is woken by
            # the arm, or by its NOTIFY; without LISTEN, an arm from elsewhere waits up to idle_s);
            # the rest is claim, state fetch and queueing behind in-flight batches in normal
            # (not overloaded) operation.
            max_lag_s=(self.tick_s if self.listen_notify else self.idle_s) + 1.0,
            # Fairness is a promise about what one claim takes: with several claim statements in
            # flight (claimers, default 3) a claim that skips the rows another one locked may hand
            # over only the big tenant's rows, and finish first. So it is declared for one claimer.
            per_tenant_fairness=self.claimers == 1,
            heartbeat_leases=True,
            redelivery_s=self.lease_s + self.sweep_s + self.tick_s,
            state_writes="skip-unchanged" if o["skip_unchanged_state"] else "always",
            lease_s=self.lease_s,
        )
        self.q = Queries(QUERIES_SQL, ctx.schema, schedule="schedule")
        self._pool: AsyncConnectionPool | None = None
        self._wake = asyncio.Event()  # an arm, a re-arm due soon, a NOTIFY or a sweep: claim now
        self._busy = asyncio.Event()  # the last claim came back full: every claim loop claims
        self.asleep_until = 0.0  # epoch s the latest sleep of a claim loop ends (a tick or a planned wake-up)
        self.channel = notify_channel(ctx.schema)
        self.claim_statements = 0  # claim statements run, empty ones included
        self.claims = 0  # claim statements that returned rows
        self.claimed_timers = 0  # schedulers.base: rows claimed, re-claims after a lapsed lease included
        self.fires = 0  # rows committed (re-armed or finished)
        self.lost = 0  # rows whose commit found them moved or taken (no re-arm)
        self.recovered = 0  # rows the sweeper returned from a silent owner
        self.state_writes = 0
        self.heartbeats = 0
        self.idle_sleeps = 0  # sleeps after an empty claim, until the earliest fire time
        self.notifies = 0  # NOTIFYs heard from arms (this process's included)
        self.listens = 0  # LISTEN connections opened
        self.listen_drops = 0  # LISTEN connections lost (then reopened, with backoff)
        self.last_tick_at = 0.0  # epoch s of the latest claim-loop iteration (health checks)

    # -- lifecycle --------------------------------------------------------------------------

    async def _pool_(self) -> AsyncConnectionPool:
        if self._pool is None:
            self._pool = await open_pool(
                self.ctx.dsn, min_size=1, max_size=self.options["pool_size"], name=f"{self.name}-{self.ctx.schema}"
            )
        return self._pool

    def _schema_params(self) -> dict[str, Any]:
        o = self.options
        return {
            "fillfactor_pct": o["fillfactor_pct"],
            "state_fillfactor_pct": o["state_fillfactor_pct"],
            "toast_tuple_target": TOAST_TUPLE_TARGET_MAX if o["inline_state"] else TOAST_TUPLE_TARGET_DEFAULT,
        }

    def _schema_blocks(self) -> dict[str, str]:
        """The blocks of ``schema.sql`` that setup runs, in order (the storage knobs follow them:
        :meth:`_apply_storage`)."""
        return dict(load_blocks(SCHEMA_SQL))

    def _render(self, body: str, schema: str, **tables: str) -> sql.Composed:
        """One schema block for ``schema``, ``tables`` binding its table placeholders."""
        params = {k: sql.Literal(v) for k, v in self._schema_params().items()}
        identifiers = {name: sql.Identifier(schema, table) for name, table in tables.items()}
        return sql.SQL(body).format(schema=sql.Identifier(schema), **identifiers, **params)

    async def setup(self) -> None:
        pool = await self._pool_()
        async with pool.connection() as conn:
            async with conn.transaction():
                await conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self.ctx.schema)))
                for body in self._schema_blocks().values():
                    await conn.execute(self._render(body, self.ctx.schema, schedule="schedule", state="state"))
                await self._apply_storage(conn, self.ctx.schema)

    async def _apply_storage(self, conn, schema: str, schedule: str = "schedule", state: str = "state") -> None:
        """The storage knobs every Postgres design accepts (schedulers/storage.sql: fillfactor,
        per-table autovacuum) on the two churning tables; the state table keeps its own
        fillfactor (``state_fillfactor_pct``). pg_partitioned calls it once per partition."""
        await apply_storage(
            conn,
            schema,
            (schedule, state),
            self.options,
            fillfactors={state: int(self.options["state_fillfactor_pct"])},
        )

    async def teardown(self, drop: bool = True) -> None:
        if drop and self.ctx.dsn:
            pool = await self._pool_()
            async with pool.connection() as conn:
                await drop_schema(conn, self.ctx.schema)
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    def relations(self) -> list[str]:
        return [qualified(self.ctx.schema, t) for t in ("schedule", "state", "effects")]

    # -- arming -----------------------------------------------------------------------------

    async def arm(self, timers: Sequence[Timer]) -> None:
        if not timers:
            return
        latest: dict[str, Timer] = {}
        for t in timers:  # one upsert may not touch a row twice: the last arm of an id wins
            latest.pop(t.id, None)
            latest[t.id] = t
        ts = sorted(latest.values(), key=lambda t: t.id)  # row locks in id order (see commit_batch)
        ids = [t.id for t in ts]
        size = self.ctx.state_bytes
        # Encrypted poll state is incompressible: random bytes, created at first arm.
        states = [os.urandom(size) if size else b"" for _ in ts]
        pool = await self._pool_()
        if len(ts) >= self.bulk_arm_min:
            await self._arm_bulk(pool, ts, states)
            self._wake_for(ts)
            return
        async with pool.connection() as conn:
            async with conn.transaction():
                await conn.execute(
                    self.q["arm"],
                    {
                        "ids": ids,
                        "tenant_ids": [t.tenant_id for t in ts],
                        "types": [t.type for t in ts],
                        "priorities": [t.priority for t in ts],
                        "fire_ats": [_ts(t.fire_at) for t in ts],
                        "poll_states": [None] * len(ts) if self.split_state else states,
                    },
                    binary=True,
                )
                if self.split_state:
                    await conn.execute(self.q["arm_states"], {"ids": ids, "poll_states": states}, binary=True)
                if self._due_soon(ts):  # sent at commit, so a woken loop finds the rows
                    await conn.execute(self.q["notify_due"], {"channel": self.channel})
        self._wake_for(ts)

    def _due_within_idle(self, timers: Sequence[Timer]) -> bool:
        """Whether one of ``timers`` is due within idle_s, the longest a claim loop sleeps: a
        later one is found by a claim that comes anyway."""
        soon = time.time() + self.idle_s
        return any(t.fire_at is None or t.fire_at < soon for t in timers)

    def _due_soon(self, timers: Sequence[Timer]) -> bool:
        """Whether the arm of ``timers`` must NOTIFY: one is due within idle_s, and a claim loop of
        another process may be asleep past its fire time."""
        return self.listen_notify and self._due_within_idle(timers)

    def _wake_for(self, timers: Sequence[Timer]) -> None:
        """Cut this instance's claim loops' sleep short only for an arm due within idle_s: waking
        them for every arm made each move of a far timer a claim of its own (MEASUREMENTS.md)."""
        if self._due_within_idle(timers):
            self._wake.set()

    async def _arm_bulk(self, pool: AsyncConnectionPool, ts: list[Timer], states: list[bytes]) -> None:
        """``ts`` (sorted by id) in contiguous id ranges, each copied and upserted in a
        transaction of its own, ``arm_connections`` at once (module docstring, "Arming in bulk")."""
        await in_id_ranges(len(ts), self.arm_connections, lambda a, b: self._arm_range(pool, ts[a:b], states[a:b]))

    async def _arm_range(self, pool: AsyncConnectionPool, ts: list[Timer], states: list[bytes]) -> None:
        async with pool.connection() as conn:
            async with conn.transaction():
                await conn.execute(self.q["arm_bulk_staging"])
                async with conn.cursor() as cur:
                    async with cur.copy(self.q["arm_bulk_copy"]) as copy:
                        copy.set_types(_STAGING_TYPES)
                        for t, state in zip(ts, states):
                            await copy.write_row((t.id, t.tenant_id, t.type, t.priority, _ts(t.fire_at), state))
                await conn.execute(self.q["arm_bulk_upsert"], {"state_in_row": not self.split_state})
                if self.split_state:
                    await conn.execute(self.q["arm_bulk_states"])
                if self._due_soon(ts):  # at this range's commit, as arm()'s single statement does
                    await conn.execute(self.q["notify_due"], {"channel": self.channel})

    async def export_armed(self) -> list[Timer]:
        pool = await self._pool_()
        async with pool.connection() as conn:
            rows = await (await conn.execute(self.q["export_armed"])).fetchall()
        return [Timer(i, None if f is None else f.timestamp(), ty, te, p) for i, f, ty, te, p in rows]

    async def disarm(self, ids: Sequence[str]) -> int:
        """Migration reconcile only: the rows become finished (``disarm`` in queries.sql)."""
        if not ids:
            return 0
        pool = await self._pool_()
        async with pool.connection() as conn:
            cur = await conn.execute(self.q["disarm"], {"ids": list(ids)})
            return len(await cur.fetchall())

    async def stats(self) -> dict[str, float]:
        """In-process counters only (how many rows are due or leased is the engine's to count:
        counting them here would scan the table the run measures)."""
        return {
            "claim_statements": float(self.claim_statements),
            "claims": float(self.claims),
            "claimed_timers": float(self.claimed_timers),
            "fires": float(self.fires),
            "lost_commits": float(self.lost),
            "recovered_leases": float(self.recovered),
            "state_writes": float(self.state_writes),
            "heartbeats": float(self.heartbeats),
            "idle_sleeps": float(self.idle_sleeps),
            "notifies": float(self.notifies),
            "listens": float(self.listens),
            "listen_drops": float(self.listen_drops),
        }

    # -- the run loop -----------------------------------------------------------------------

    async def run(self, processors: Mapping[str, Processor], stop: asyncio.Event, worker_id: str | None = None) -> None:
        owner = worker_id or f"pgl-{socket.gethostname()}-{os.getpid()}-{os.urandom(3).hex()}"
        held: Counter[str] = Counter()  # rows this loop holds under lease, for the heartbeat
        batch_no = 0

        statements = itertools.cycle(self._claim_statements())  # the claim loops take them in turn

        async def claim_loop(loop: RunLoop, index: int) -> None:
            nonlocal batch_no
            while not stop.is_set():
                if index >= self.idle_claimers and not self._busy.is_set():
                    await _either(self._busy, stop)  # joins while claims come back full
                    continue
                self.last_tick_at = time.time()
                # Cleared before the claim, not before the sleep: an arm or a NOTIFY that lands
                # while the claim runs still cuts the sleep after it short.
                self._wake.clear()
                # claim only what this loop can start processing now: up to a batch, once at
                # least half a batch of room is free (smaller claims cost more per row)
                room = await loop.take_slot(stop, self.batch, least=(self.batch + 1) // 2)
                if not room:
                    break
                number = batch_no  # taken before the await: the other claimers share the counter
                batch_no += 1
                began = time.time()
                try:
                    claimed = await self._claim(next(statements), owner, number, room)
                    self.last_tick_at = time.time()
                except Exception:
                    loop.give_back(room)
                    log.exception("%s %s: claim failed; retrying after a tick", self.name, owner)
                    await self._nap(stop, self.tick_s)
                    continue
                loop.give_back(room - len(claimed))
                more = self._maybe_more(claimed, room)
                if more:
                    self._busy.set()
                else:
                    self._busy.clear()
                if not claimed:
                    await self._sleep_until_due(stop)
                    continue
                held.update(c.fire.timer_id for c in claimed)  # Counter: +1 each
                per_group = self.commit_per_group == "always" or (
                    self.commit_per_group == "auto" and loop.room.free < loop.room.size // 2
                )
                loop.start_stream(self._process, processors, claimed, owner, held, per_group, size=len(claimed))
                if not more:
                    # a tick from the claim's start, not its end: with one loop claiming, its
                    # claim time and the event loop's delays would add to every row's wait
                    await self._nap(stop, max(0.0, began + self.tick_s - time.time()))

        # Cancelling is a crash (RunLoop): in-flight batches die uncommitted, heartbeats stop,
        # and their leases are left to lapse. Room is counted in rows: a batch commits its rows
        # in groups as their polls finish and gives each group's room back, so the batch's
        # slowest poll holds back one row, not the room of a whole batch.
        async with RunLoop(fires_in_flight=self.inflight_batches * self.batch) as loop:
            loop.keep(self._heartbeat_loop(owner, held))
            loop.keep(self._sweep_loop())
            if self.listen_notify:
                loop.keep(self._listen_loop())
            # Several claim statements in flight (SKIP LOCKED keeps them disjoint): one at a time
            # caps a loop at claims/s x batch, and under a backlog a claim takes tens of ms.
            # Only idle_claimers of them claim while the claims come back short of a batch.
            await asyncio.gather(*(claim_loop(loop, i) for i in range(self.claimers)))

    def _claim_statements(self) -> list[sql.Composed]:
        """The claim statements the claim loops take in turn: ``claim_due`` on the one schedule
        table (pg_partitioned: one per partition)."""
        return [self.q["claim_due"]]

    def _maybe_more(self, claimed: list[_Claimed], limit: int) -> bool:
        """More may be due right now: the claim was full (``limit`` rows), or a tenant hit its cap."""
        if len(claimed) >= limit:
            return True
        per_tenant: dict[str, int] = {}
        for c in claimed:
            n = per_tenant.get(c.fire.tenant_id, 0) + 1
            if n >= self.max_per_tenant:
                return True
            per_tenant[c.fire.tenant_id] = n
        return False

    async def _nap(self, stop: asyncio.Event, seconds: float) -> None:
        """Sleep ``seconds``, or less when this instance arms something, a NOTIFY or a sweep
        wakes it, or stop is set (the claim loop cleared the wake-up before its claim)."""
        self.asleep_until = time.time() + seconds
        await nap(seconds, self._wake, stop)

    async def _sleep_until_due(self, stop: asyncio.Event) -> None:
        """After an empty claim: sleep until the earliest scheduled fire time, at least a tick
        and at most idle_s (the planned wake-up; an arm due sooner cuts it short)."""
        seconds = self.tick_s
        if self.idle_s > self.tick_s:
            try:
                pool = await self._pool_()
                async with pool.connection() as conn:
                    (due,) = await (await conn.execute(self.q["next_due"])).fetchone()
            except Exception:
                log.exception("%s: reading the next fire time failed; sleeping a tick", self.name)
            else:
                # None: nothing scheduled; -inf: a NULL fire time, due now
                wait = self.idle_s if due is None else float(due) - time.time()
                seconds = min(self.idle_s, max(self.tick_s, wait))
                self.idle_sleeps += 1
        await self._nap(stop, seconds)

    def claim_params(self, owner: str, limit: int) -> dict[str, Any]:
        """The bind parameters of ``claim_due`` for ``owner``, at most ``limit`` rows."""
        return {
            "limit": limit,
            "max_per_tenant": self.max_per_tenant,
            "tenant_scan": self.tenant_scan,
            "overselect": self.overselect,
            "owner": owner,
            "lease_s": self.lease_s,
            "split_state": self.split_state,
        }

    async def _claim(self, statement: sql.Composed, owner: str, batch_no: int, limit: int) -> list[_Claimed]:
        """Run one claim statement (``claim_due`` rendered for the table it claims from) for at
        most ``limit`` rows; the fires carry their poll state."""
        pool = await self._pool_()
        async with pool.connection() as conn:  # autocommit: the claim commits on return
            # binary: the 4 kB states as bytes, not hex
            cur = await conn.execute(statement, self.claim_params(owner, limit), binary=True)
            rows = await cur.fetchall()
        self.claim_statements += 1
        out = [
            _Claimed(Fire(tid, tenant, type_, due, armed_at, attempt, owner, batch_no, state, prio), version)
            for tid, tenant, type_, prio, due, armed_at, version, attempt, state in rows
        ]
        if out:
            self.claims += 1
            self.claimed_timers += len(out)
        return out

    async def _process(
        self,
        processors: Mapping[str, Processor],
        claimed: list[_Claimed],
        owner: str,
        held: Counter[str],
        per_group: bool,
        room: Held,
    ) -> None:
        pending = {id(c): c for c in claimed}  # claims this batch still holds

        def release(items: list[_Claimed]) -> None:
            _release(held, items)
            for c in items:
                pending.pop(id(c), None)

        try:
            by_type: dict[str, list[_Claimed]] = {}
            for c in claimed:
                by_type.setdefault(c.fire.type, []).append(c)
            for type_, items in by_type.items():
                processor = processors.get(type_)
                if processor is None:
                    # Not ours to run: stop heartbeating so the lease lapses and a loop that
                    # has this type's processor gets it from the sweeper.
                    log.warning(
                        "%s %s: no processor for type %r; %d rows left to lapse", self.name, owner, type_, len(items)
                    )
                    release(items)
                    continue
                fires = [c.fire for c in items]
                # Leases are per row, so each group of finished polls commits on its own.
                async for positions, outcomes in outcomes_as_polls_finish(processor, fires, per_group):
                    group = [items[i] for i in positions]
                    delivered = await self._commit(group, outcomes, owner)
                    release(group)
                    room.give(len(group))
                    processor.committed([c.fire for c in group], [delivered[c.fire.timer_id] for c in group])
        except asyncio.CancelledError:
            raise  # a crash: keep the leases, they lapse
        except Exception:
            # The rows stay leased until they lapse; the sweeper then hands them out again.
            log.exception("%s %s: batch failed; its rows come back after the lease", self.name, owner)
            release(list(pending.values()))

    async def _commit(self, items: list[_Claimed], outcomes: Sequence[Outcome], owner: str) -> dict[str, bool]:
        """Commit one batch in one statement; returns timer id -> effect newly recorded."""
        if len(outcomes) != len(items):
            raise ValueError(f"processor returned {len(outcomes)} outcomes for {len(items)} fires")
        # id order, as arm() and commit_batch's lock step: effect-key inserts queue, not deadlock
        order = sorted(range(len(items)), key=lambda i: items[i].fire.timer_id)
        items = [items[i] for i in order]
        outcomes = [outcomes[i] for i in order]
        poll_states: list[bytes | None] = []
        for c, o in zip(items, outcomes):
            new, old = o.new_state, c.fire.state
            if self.skip_unchanged_state:
                poll_states.append(None if new is None or new == old else new)
            else:  # write every fire, as a design that does not track changes would
                poll_states.append(new if new is not None else old)
        params = {
            "ids": [c.fire.timer_id for c in items],
            "versions": [c.version for c in items],
            "attempts": [c.fire.attempt for c in items],
            "next_fire_ats": [o.next_fire_at for o in outcomes],  # epoch s (queries.sql: exact to the us)
            "finished": [o.next_fire_at is None for o in outcomes],
            "poll_states": poll_states,
            "effect_dues": [c.fire.due_at if o.effect else None for c, o in zip(items, outcomes)],
            "owner": owner,
        }
        name = "commit_batch" if self.split_state else "commit_batch_inline"
        pool = await self._pool_()
        async with pool.connection() as conn:
            cur = await conn.execute(self.q[name], params, binary=True)
            delivered_ids, rearmed, states_written = await cur.fetchone()
        fresh = set(delivered_ids)
        self.fires += rearmed
        self.lost += len(items) - rearmed
        self.state_writes += states_written
        soon = max(time.time() + self.tick_s, self.asleep_until)
        if rearmed and any(o.next_fire_at is not None and o.next_fire_at < soon for o in outcomes):
            # A re-arm is due before the claim loops' next claim (a tick, or a longer sleep after
            # an empty claim). Only then: with commits per group, waking on every commit made the
            # claim loops claim a few rows each time (measured at 556/s: 3.4 rows per claim, 167
            # claims/s, a core of Postgres).
            self._wake.set()
        return {c.fire.timer_id: c.fire.timer_id in fresh for c in items}

    # -- leases -----------------------------------------------------------------------------

    async def _heartbeat_loop(self, owner: str, held: Counter[str]) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_s)
            if not held:
                continue
            try:
                pool = await self._pool_()
                async with pool.connection() as conn:
                    await conn.execute(
                        self.q["extend_leases"], {"ids": list(held), "owner": owner, "lease_s": self.lease_s}
                    )
                self.heartbeats += 1
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("%s %s: heartbeat failed; retrying", self.name, owner)

    async def _sweep_loop(self) -> None:
        while True:
            await asyncio.sleep(self.sweep_s)
            try:
                pool = await self._pool_()
                async with pool.connection() as conn:
                    cur = await conn.execute(self.q["sweep_expired_leases"])
                    swept = len(await cur.fetchall())
                self.recovered += swept
                if swept:
                    self._wake.set()  # they are due now: a sleeping claim loop should not wait
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("%s: sweep failed; retrying", self.name)

    async def _listen_loop(self) -> None:
        """Wake the claim loops on every NOTIFY of this schema's channel (an arm of a timer due
        soon, from any process). A lost connection is reopened with backoff; meanwhile the
        planned wake-ups (idle_s) still find every row, only later."""
        backoff = LISTEN_BACKOFF_S[0]
        while True:
            try:
                conn = await psycopg.AsyncConnection.connect(
                    self.ctx.dsn, autocommit=True, application_name=f"{self.name}-listen"
                )
                async with conn:
                    await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
                    self.listens += 1
                    backoff = LISTEN_BACKOFF_S[0]
                    self._wake.set()  # an arm made while nobody listened: the next claim finds it
                    async for _ in conn.notifies():
                        self.notifies += 1
                        self._wake.set()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.listen_drops += 1
                log.warning("%s: LISTEN connection lost (%s); reopening in %.1fs", self.name, exc, backoff)
            await asyncio.sleep(backoff)
            backoff = min(LISTEN_BACKOFF_S[1], backoff * 2)


async def _either(*events: asyncio.Event) -> None:
    """Wait until one of ``events`` is set."""
    waits = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()


def notify_channel(schema: str) -> str:
    """The NOTIFY channel of one schema's store: readable when it fits Postgres' 63-byte names."""
    name = f"{schema}.due"
    if len(name.encode()) <= 63:
        return name
    return "timerbench_due_" + hashlib.sha1(schema.encode()).hexdigest()[:24]
