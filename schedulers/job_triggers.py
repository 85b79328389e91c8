"""What the job-library designs (``procrastinate``, ``pgqueuer``) share: the trigger rows beside
the library's own tables, and one fire as a job runs it.

A trigger is one row here (``job_triggers.sql``: fire time, version, poll state, keyed effects)
and one pending job in the library's table, deferred for the row's version at its fire time. A
job that runs reads its row by key; when the row's version is no longer the job's (a move, a
disarm, or the job's own commit already went through before a crash), the job fires nothing.
Otherwise its fire goes to the processor as a batch of one (the library's unit of work is a
job), and one transaction commits the outcome, fenced on the version, **and defers the next
job through the library's own API on that transaction's connection**: a re-arm is never
committed without its job, nor a job deferred for a fire that did not commit. The library then
finishes the job it ran (its own statement, after ours), so a crash between the two leaves the
job running under a dead worker; the library's recovery hands it to another worker, which finds
the version moved on and fires nothing.

Every connection of these designs (the library's pools and listeners, and this module's pool,
on which the library's defers and cancels run inside our transactions) has ``search_path`` set to
the run's schema: the library creates its tables, types and functions there with its own
installer, so each test and run has its own, and ``relations()`` finds them in the catalog.

Crash emulation: a library worker that sees its task cancelled shuts down gracefully (it lets
running jobs finish, or marks them aborted or cancelled, and unregisters itself), which is not
what a process that dies does. So cancelling ``run`` first closes the worker's own connections
(what it would write on the way out fails, as in a dead process), then makes every job this run
is executing abandon its poll (:class:`Crash`), then cancels the worker: its jobs stay claimed
under a worker whose heartbeat stops, for the library's own recovery to find.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from schedulers.base import BatchSizes, Fire, Outcome, Processor, StoreContext, Timer, outcomes_as_polls_finish, us
from schedulers.pg import apply_schema, apply_storage, close_store, qualified
from schedulers.sqlfile import Queries

HERE = Path(__file__).parent
SCHEMA_SQL = HERE / "job_triggers.sql"
QUERIES_SQL = HERE / "job_triggers_queries.sql"
OUR_TABLES = ("trigger", "trigger_state", "effects")
STORAGE_TABLES = ("trigger", "trigger_state")  # the tables fires rewrite (storage knobs)
_PLAIN = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def search_path_options(name: str, schema: str) -> str:
    """libpq ``options`` that put a connection's ``search_path`` on the run's schema (a plain
    lower-case identifier: the library's unqualified SQL resolves there)."""
    if not _PLAIN.match(schema):
        raise ValueError(f"{name} needs a plain lower-case schema name (letters, digits, _), got {schema!r}")
    return f"-c search_path={schema}"


async def open_search_path_pool(dsn: str, schema: str, name: str, max_size: int) -> AsyncConnectionPool:
    """An open autocommit pool whose connections resolve unqualified names in ``schema``."""

    async def configure(conn: psycopg.AsyncConnection) -> None:
        await conn.set_autocommit(True)

    pool = AsyncConnectionPool(
        dsn,
        min_size=1,
        max_size=max_size,
        open=False,
        configure=configure,
        name=name,
        kwargs={"application_name": name, "options": search_path_options(name, schema)},
    )
    await pool.open(wait=True, timeout=30)
    return pool


class Crash(Exception):
    """The run this job belongs to crashed: the job abandons its poll and commits nothing."""


async def unless_crashed(aw: Awaitable[Any], crashed: asyncio.Event) -> Any:
    """``aw``'s result, or :class:`Crash` as soon as ``crashed`` is set (``aw`` is cancelled)."""
    if crashed.is_set():
        if asyncio.iscoroutine(aw):
            aw.close()
        raise Crash("the run crashed")
    work = asyncio.ensure_future(aw)
    dead = asyncio.ensure_future(crashed.wait())
    try:
        await asyncio.wait({work, dead}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        work.cancel()
        raise
    finally:
        dead.cancel()
    if not work.done():
        work.cancel()
        with contextlib.suppress(BaseException):
            await work
        raise Crash("the run crashed")
    return work.result()


@dataclass
class Pending:
    """A job to defer: the trigger's id, the row's version, its fire time and priority."""

    trigger_id: str
    version: int
    fire_at: float
    priority: int = 0


@dataclass
class RunState:
    """One ``run()`` loop: its processors, its worker name, and the event a crash sets."""

    processors: Mapping[str, Processor]
    worker: str
    crashed: asyncio.Event = field(default_factory=asyncio.Event)
    jobs: int = 0  # jobs this run's worker handed to fire()


class JobTriggers:
    """The rows, the pool and the counters of one job-library store; the design supplies how its
    library defers, cancels and lists a trigger's jobs (``defer``, ``cancel``)."""

    def __init__(
        self,
        name: str,
        ctx: StoreContext,
        options: Mapping[str, Any],
        defer: Callable[[psycopg.AsyncConnection, list[Pending]], Awaitable[None]],
        cancel: Callable[[psycopg.AsyncConnection, list[tuple[str, int]]], Awaitable[int]],
    ) -> None:
        if not ctx.dsn:
            raise ValueError(f"{name} needs a Postgres DSN (StoreContext.dsn is empty)")
        search_path_options(name, ctx.schema)  # a schema the library's SQL cannot resolve: say so now
        self.name = name
        self.ctx = ctx
        self.options = options
        self.defer = defer
        self.cancel = cancel
        self.q = Queries(QUERIES_SQL, ctx.schema)
        self.pool: AsyncConnectionPool | None = None
        self.claimed_timers = 0  # jobs that reached fire() for their row's current version
        self.fires = 0  # fires committed
        self.stale_jobs = 0  # jobs whose row had moved on (moved, disarmed, or committed before a crash)
        self.fenced_commits = 0  # commits fenced out by a move or disarm that landed during the poll
        self.state_writes = 0
        self.cancelled_jobs = 0  # pending jobs a move or disarm cancelled through the library
        self.batch_sizes = BatchSizes()

    def application_name(self, role: str) -> str:
        """``<schema> <design> <role>``: the sessions of one store, told apart in pg_stat_activity."""
        return f"{self.ctx.schema} {self.name} {role}"[:63]

    async def open(self) -> AsyncConnectionPool:
        if self.pool is None:
            self.pool = await open_search_path_pool(
                self.ctx.dsn, self.ctx.schema, self.application_name("pool"), int(self.options["pool_size"])
            )
        return self.pool

    async def setup_rows(self) -> None:
        pool = await self.open()
        async with pool.connection() as conn:
            await apply_schema(conn, self.ctx.schema, SCHEMA_SQL)
            await apply_storage(conn, self.ctx.schema, STORAGE_TABLES, self.options)

    async def table_exists(self, table: str) -> bool:
        pool = await self.open()
        async with pool.connection() as conn:
            row = await (
                await conn.execute(self.q["table_exists"], {"table": qualified(self.ctx.schema, table)})
            ).fetchone()
        return bool(row[0])

    async def schema_tables(self) -> list[str]:
        pool = await self.open()
        async with pool.connection() as conn:
            rows = await (await conn.execute(self.q["schema_tables"], {"schema": self.ctx.schema})).fetchall()
        return [qualified(self.ctx.schema, r[0]) for r in rows]

    async def close(self, drop: bool) -> None:
        pool, self.pool = self.pool, None
        await close_store(pool, self.ctx.dsn, self.ctx.schema, drop)

    # -- arming ----------------------------------------------------------------------------------

    async def arm(self, timers: Sequence[Timer]) -> None:
        """One transaction: lock the rows, upsert them (version + 1), cancel the job each armed
        row had pending (a move), defer one job per row at its new fire time."""
        if not timers:
            return
        now = us(time.time())
        latest: dict[str, Timer] = {}
        for t in timers:  # one row takes one new fire time per statement: the last arm wins
            latest[t.id] = t
        ts = sorted(latest.values(), key=lambda t: t.id)  # row locks in id order, as commit_fire
        ids = [t.id for t in ts]
        pool = await self.open()
        async with pool.connection() as conn:
            async with conn.transaction():
                old = {
                    r[0]: (r[1], r[2])
                    for r in await (await conn.execute(self.q["lock_triggers"], {"ids": ids})).fetchall()
                }
                rows = await (
                    await conn.execute(
                        self.q["arm_upsert"],
                        {
                            "ids": ids,
                            "types": [t.type for t in ts],
                            "tenants": [t.tenant_id for t in ts],
                            "priorities": [t.priority for t in ts],
                            "fire_ats": [now if t.fire_at is None else us(t.fire_at) for t in ts],
                            "armed_at": now,
                        },
                    )
                ).fetchall()
                new = [i for i in ids if i not in old]
                if new:
                    size = self.ctx.state_bytes  # encrypted poll state is incompressible: random bytes
                    states = [os.urandom(size) if size else None for _ in new]
                    await conn.execute(self.q["state_insert"], {"ids": new, "states": states})
                moved = [(tid, version) for tid, (version, armed) in old.items() if armed]
                if moved:
                    self.cancelled_jobs += await self.cancel(conn, moved)
                prio = {t.id: t.priority for t in ts}
                await self.defer(
                    conn, [Pending(tid, version, us(fire_at), prio[tid]) for tid, version, fire_at in rows]
                )

    async def disarm(self, ids: Sequence[str]) -> int:
        if not ids:
            return 0
        pool = await self.open()
        async with pool.connection() as conn:
            async with conn.transaction():
                await conn.execute(self.q["lock_triggers"], {"ids": sorted(set(ids))})
                rows = await (await conn.execute(self.q["disarm"], {"ids": list(ids)})).fetchall()
                if rows:
                    self.cancelled_jobs += await self.cancel(conn, [(r[0], r[1]) for r in rows])
        return len(rows)

    async def export(self, query: str) -> list[Timer]:
        """``query`` (the design's): armed rows whose current version has a live job."""
        pool = await self.open()
        async with pool.connection() as conn:
            rows = await (await conn.execute(query)).fetchall()
        return [Timer(tid, us(fire_at), type_, tenant, prio) for tid, fire_at, type_, tenant, prio in rows]

    def gauges(self) -> dict[str, float]:
        return {
            "claimed_timers": float(self.claimed_timers),
            "fires": float(self.fires),
            "stale_jobs": float(self.stale_jobs),
            "fenced_commits": float(self.fenced_commits),
            "state_writes": float(self.state_writes),
            "cancelled_jobs": float(self.cancelled_jobs),
            **self.batch_sizes.gauges(),
        }

    # -- one fire --------------------------------------------------------------------------------

    async def fire(self, run: RunState, trigger_id: str, version: int, attempt: int) -> None:
        """Run one job: read its row, fire it (a batch of one) unless the row moved on, commit the
        outcome and defer the next job in one transaction. Raises :class:`Crash` when the run
        crashed meanwhile (the library's worker must then persist nothing)."""
        run.jobs += 1
        crashed = run.crashed
        pool = await self.open()

        async def read() -> tuple | None:
            async with pool.connection() as conn:
                return await (await conn.execute(self.q["fetch_fire"], {"id": trigger_id})).fetchone()

        row = await unless_crashed(read(), crashed)
        if row is None or row[3] is None or row[5] != version:
            self.stale_jobs += 1  # not (or no longer) this job's fire: nothing to do
            return
        type_, tenant, prio, fire_at, armed_at, _, state = row
        processor = run.processors.get(type_)
        if processor is None:
            raise LookupError(f"{self.name}: no processor for timer type {type_!r} (trigger {trigger_id})")
        early = fire_at - time.time()
        if early > 0:  # never early: the library's clock (or a delay from now()) may run ahead
            await unless_crashed(asyncio.sleep(early), crashed)
        self.claimed_timers += 1
        self.batch_sizes.add(1)
        fire = Fire(trigger_id, tenant, type_, us(fire_at), us(armed_at), attempt, run.worker, run.jobs, state, prio)
        stream = outcomes_as_polls_finish(processor, [fire])
        try:
            while True:
                try:
                    _, outcomes = await unless_crashed(anext(stream), crashed)
                except StopAsyncIteration:
                    break
                if not outcomes:
                    continue
                if len(outcomes) != 1:
                    raise ValueError(f"processor returned {len(outcomes)} outcomes for 1 fire")
                delivered = await unless_crashed(self._commit(fire, version, outcomes[0]), crashed)
                processor.committed([fire], [delivered])
        finally:
            with contextlib.suppress(BaseException):
                await stream.aclose()

    async def _commit(self, fire: Fire, version: int, outcome: Outcome) -> bool:
        next_fire_at = None if outcome.next_fire_at is None else us(outcome.next_fire_at)
        params = {
            "id": fire.timer_id,
            "version": version,
            "next_fire_at": next_fire_at,
            # unchanged poll state is not rewritten (no TOAST churn)
            "state": None if outcome.new_state == fire.state else outcome.new_state,
            "effect_due": fire.due_at if outcome.effect else None,
            "now": time.time(),
        }
        pool = await self.open()
        async with pool.connection() as conn:
            async with conn.transaction():
                new_version, effect, state_written = await (
                    await conn.execute(self.q["commit_fire"], params)
                ).fetchone()
                if new_version is None:
                    self.fenced_commits += 1  # moved or disarmed while polled: the move's job fires instead
                    return False
                if next_fire_at is not None:
                    await self.defer(conn, [Pending(fire.timer_id, int(new_version), next_fire_at, fire.priority)])
        self.fires += 1
        self.state_writes += int(state_written)
        return bool(effect)
