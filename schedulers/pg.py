"""Postgres plumbing shared by the Postgres-backed designs: pools and schemas, and the arm of a
trigger row by key that both Temporal designs run.

Each design keeps its own tables and queries in its folder; this module only opens connections,
creates or drops the per-run schema (always through :mod:`psycopg.sql` identifiers), and runs a
design's own named ``arm_upsert`` / ``state_insert`` statements.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import os
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg_pool import AsyncConnectionPool

from schedulers.base import Timer, us
from schedulers.sqlfile import Queries, load_blocks


async def open_pool(dsn: str, min_size: int = 1, max_size: int = 8, name: str = "timerbench") -> AsyncConnectionPool:
    """An open async pool; connections autocommit unless a block opens ``conn.transaction()``."""

    async def configure(conn: psycopg.AsyncConnection) -> None:
        await conn.set_autocommit(True)

    pool = AsyncConnectionPool(
        dsn,
        min_size=min_size,
        max_size=max_size,
        open=False,
        configure=configure,
        name=name,
        kwargs={"application_name": name},
    )
    await pool.open(wait=True, timeout=30)
    return pool


async def apply_schema(conn: psycopg.AsyncConnection, schema: str, schema_sql: Path, **params) -> None:
    """Create ``schema`` and run every block of ``schema_sql`` in it (idempotent DDL)."""
    await conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
    for body in load_blocks(schema_sql).values():
        await conn.execute(
            sql.SQL(body).format(schema=sql.Identifier(schema), **{k: sql.Literal(v) for k, v in params.items()})
        )


async def drop_schema(conn: psycopg.AsyncConnection, schema: str) -> None:
    await conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


async def close_store(pool, dsn: str | None, schema: str, drop: bool) -> None:
    """A design's teardown of its Postgres side: drop its schema when asked, then close its pool.
    Without a pool (a store this process never set up) the drop goes through a one-connection
    pool of its own, so teardown works from any process."""
    if pool is not None:
        if drop:
            async with pool.connection() as conn:
                await drop_schema(conn, schema)
        await pool.close()
    elif drop and dsn:
        own = await open_pool(dsn, max_size=1)
        try:
            async with own.connection() as conn:
                await drop_schema(conn, schema)
        finally:
            await own.close()


STORAGE_SQL = Path(__file__).with_name("storage.sql")
# The storage and vacuum knobs every Postgres design accepts, with the server's own values as
# defaults (a design states its own defaults by overriding them in its default_options).
AUTOVACUUM_OPTIONS = ("autovacuum_scale_factor", "autovacuum_threshold_rows", "autovacuum_cost_delay_ms")
STORAGE_OPTIONS: dict[str, Any] = {
    # percent; page fill of the design's churning tables (server default 100).
    "fillfactor_pct": 100,
    # per-table autovacuum settings below on the churning tables (False: the server's settings).
    "autovacuum_tuned": False,
    # fraction of a table's rows that must be dead before autovacuum (server: 0.2).
    "autovacuum_scale_factor": 0.02,
    # rows; added to the scale-factor threshold (server: 50).
    "autovacuum_threshold_rows": 1000,
    # milliseconds of cost-based vacuum sleep (server: 2); 0 lets vacuum keep up with churn.
    "autovacuum_cost_delay_ms": 0,
}


def storage_options(**defaults: Any) -> dict[str, Any]:
    """:data:`STORAGE_OPTIONS` with a design's own defaults, for its ``default_options``."""
    unknown = set(defaults) - set(STORAGE_OPTIONS)
    if unknown:
        raise ValueError(f"not storage options: {', '.join(sorted(unknown))}")
    return {**STORAGE_OPTIONS, **defaults}


async def apply_storage(
    conn: psycopg.AsyncConnection,
    schema: str,
    tables: Sequence[str],
    options: Mapping[str, Any],
    fillfactors: Mapping[str, int] | None = None,
) -> None:
    """Set the storage and vacuum knobs of ``options`` on each of ``tables`` (in ``schema``);
    ``fillfactors`` gives a table a page fill of its own (a design's extra knob)."""
    blocks = load_blocks(STORAGE_SQL)
    params = {
        "fillfactor_pct": sql.Literal(int(options["fillfactor_pct"])),
        "autovacuum_scale_factor": sql.Literal(float(options["autovacuum_scale_factor"])),
        "autovacuum_threshold_rows": sql.Literal(int(options["autovacuum_threshold_rows"])),
        "autovacuum_cost_delay_ms": sql.Literal(float(options["autovacuum_cost_delay_ms"])),
    }
    vacuum = "autovacuum_tuned" if options["autovacuum_tuned"] else "autovacuum_server_defaults"
    for table in tables:
        fill = {"fillfactor_pct": sql.Literal(int((fillfactors or {}).get(table, options["fillfactor_pct"])))}
        for block in ("fillfactor", vacuum):
            await conn.execute(sql.SQL(blocks[block]).format(table=sql.Identifier(schema, table), **{**params, **fill}))


def qualified(schema: str, table: str) -> str:
    """``schema.table`` as the statistics views name it (``schemaname``, ``relname``)."""
    return f"{schema}.{table}"


@dataclass
class ArmedRows:
    """What :func:`upsert_armed` wrote: one entry per distinct id, in the same order."""

    timers: list[Timer]  # the last arm of each id in the call
    fire_ats: list[float]  # their fire times (fire_at=None resolved to ``armed_at``: due now)
    versions: list[int]  # each row's version after the arm
    armed_at: float


async def upsert_armed(pool: AsyncConnectionPool, q: Queries, timers: Sequence[Timer], state_bytes: int) -> ArmedRows:
    """Arm or move trigger rows by key for the designs whose time lives in Temporal: the design's
    ``arm_upsert`` (new fire time, version + 1) and, for ids it created, ``state_insert`` with
    ``state_bytes`` of random (incompressible) poll state, in one transaction. A design with an
    ``arm_upsert_with_state`` statement writes a new row's state with the row instead: every
    timer's state is sent, and the statement keeps it only for the rows it creates."""
    now = us(time.time())
    latest: dict[str, Timer] = {}
    for t in timers:  # one row can take one new fire time per statement: the last wins
        latest[t.id] = t
    ts = list(latest.values())
    fire_ats = [now if t.fire_at is None else us(t.fire_at) for t in ts]
    params = {
        "ids": [t.id for t in ts],
        "types": [t.type for t in ts],
        "tenants": [t.tenant_id for t in ts],
        "priorities": [t.priority for t in ts],
        "fire_ats": fire_ats,
        "armed_at": now,
    }
    with_state = "arm_upsert_with_state" in q
    if with_state:
        params["states"] = [os.urandom(state_bytes) if state_bytes else None for _ in ts]
    async with pool.connection() as conn:
        async with conn.transaction():
            cur = await conn.execute(q["arm_upsert_with_state" if with_state else "arm_upsert"], params)
            rows = await cur.fetchall()
            new = [tid for tid, _, inserted in rows if inserted]
            if new and not with_state:
                await conn.execute(
                    q["state_insert"],
                    {"ids": new, "states": [os.urandom(state_bytes) if state_bytes else None for _ in new]},
                )
    version = {tid: v for tid, v, _ in rows}
    return ArmedRows(ts, fire_ats, [version[t.id] for t in ts], now)


# Rows per transaction of a bulk arm (pg_leased, pg_queue): ranges this size keep the client's
# binary COPY of one range overlapping the server's upsert of another (1M timers on 2 cores:
# 35 s against 40-45 s for one range per connection, MEASUREMENTS.md "Arming in bulk").
BULK_RANGE_ROWS = 50_000


async def in_id_ranges(
    count: int, connections: int, arm_range: Callable[[int, int], Awaitable[None]], range_rows: int = BULK_RANGE_ROWS
) -> None:
    """``arm_range(a, b)`` for contiguous slices ``[a, b)`` of ``count`` items sorted by id, at
    least ``connections`` slices of about ``range_rows`` items each at most, ``connections`` of
    them running at once (each slice is the caller's transaction on a connection of its own). A
    failing slice cancels the others; the slices already done stay done."""
    k = max(1, min(count, max(connections, math.ceil(count / range_rows))))
    slices = iter(itertools.pairwise([count * i // k for i in range(k + 1)]))

    async def worker() -> None:
        for a, b in slices:  # shared: each worker takes the next slice when it is done with one
            await arm_range(a, b)

    async with asyncio.TaskGroup() as tg:
        for _ in range(min(connections, k)):
            tg.create_task(worker())
