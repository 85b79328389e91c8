"""Postgres plumbing shared by the Postgres-backed designs: pools and schemas.

Each design keeps its own tables and queries in its folder; this module only opens connections
and creates or drops the per-run schema (always through :mod:`psycopg.sql` identifiers).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import psycopg
from psycopg import sql
from psycopg_pool import AsyncConnectionPool

from schedulers.sqlfile import load_blocks


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
        await conn.execute(sql.SQL(body).format(schema=sql.Identifier(schema), **{
            k: sql.Literal(v) for k, v in params.items()
        }))


async def drop_schema(conn: psycopg.AsyncConnection, schema: str) -> None:
    await conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


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


async def apply_storage(conn: psycopg.AsyncConnection, schema: str, tables: Sequence[str],
                        options: Mapping[str, Any], fillfactors: Mapping[str, int] | None = None) -> None:
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
