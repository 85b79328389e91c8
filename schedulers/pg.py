"""Postgres plumbing shared by the Postgres-backed designs: pools and schemas.

Each design keeps its own tables and queries in its folder; this module only opens connections
and creates or drops the per-run schema (always through :mod:`psycopg.sql` identifiers).
"""

from __future__ import annotations

from pathlib import Path

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


def qualified(schema: str, table: str) -> str:
    """``schema.table`` as the statistics views name it (``schemaname``, ``relname``)."""
    return f"{schema}.{table}"
