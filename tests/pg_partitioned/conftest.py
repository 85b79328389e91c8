"""Helpers for the pg_partitioned tests: per-partition statistics and the buffers a real claim
touches, read from Postgres itself.

``isolated_dsn`` (a database of the test's own) comes from tests/pg_leased: the vacuum horizon
is per database, so a held snapshot in another suite's test cannot blur these measurements,
and ours cannot blur theirs.
"""

from __future__ import annotations

import asyncio
import time

import psycopg
from psycopg import sql

from schedulers.pg_leased import PgLeasedScheduler
from tests.pg_leased.conftest import isolated_dsn  # noqa: F401  (a fixture, used by name)

STAT_COLUMNS = ("n_live_tup", "n_dead_tup", "n_tup_upd", "n_tup_hot_upd", "autovacuum_count", "vacuum_count")


def partition_stats(conn: psycopg.Connection, schema: str, tables: list[str]) -> dict[str, dict[str, int]]:
    """``pg_stat_user_tables`` counters of each table, by name."""
    query = sql.SQL("SELECT relname, {} FROM pg_stat_user_tables WHERE schemaname = %s AND relname = ANY(%s)").format(
        sql.SQL(", ").join(map(sql.Identifier, STAT_COLUMNS))
    )
    out = {name: dict(zip(STAT_COLUMNS, values)) for name, *values in conn.execute(query, (schema, tables)).fetchall()}
    assert sorted(out) == sorted(tables), f"pg_stat_user_tables has no row for {sorted(set(tables) - set(out))}"
    return out


async def settled_partition_stats(
    dsn: str, schema: str, tables: list[str], quiet_s: float = 0.6, timeout_s: float = 15.0
) -> dict[str, dict[str, int]]:
    """Counters of every table once the writers have flushed them: read until two reads
    ``quiet_s`` apart agree (callers close the writers' connections first; see
    tests/pg_queue/conftest.settled_stats)."""
    deadline = time.time() + timeout_s
    with psycopg.connect(dsn, autocommit=True) as conn:
        last = partition_stats(conn, schema, tables)
        while time.time() < deadline:
            await asyncio.sleep(quiet_s)
            now = partition_stats(conn, schema, tables)
            if now == last:
                return now
            last = now
    raise AssertionError(f"statistics of {tables} did not settle within {timeout_s}s")


def vacuum(conn: psycopg.Connection, schema: str, tables: list[str]) -> None:
    for t in tables:
        conn.execute(sql.SQL("VACUUM {}").format(sql.Identifier(schema, t)))


def claim_buffers(conn: psycopg.Connection, scheduler: PgLeasedScheduler, statement: sql.Composed) -> tuple[int, int]:
    """(shared buffers touched, rows claimed) by one real claim statement, run under EXPLAIN
    (ANALYZE, BUFFERS) in a transaction that is rolled back, so it claims nothing. The planner
    is left free: this is the claim as the scheduler runs it."""
    explain = sql.Composed([sql.SQL("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "), statement])
    params = scheduler.claim_params("probe", scheduler.batch)
    conn.execute("BEGIN")
    try:
        plan = conn.execute(explain, params).fetchone()[0][0]["Plan"]
    finally:
        conn.execute("ROLLBACK")
    return plan["Shared Hit Blocks"] + plan["Shared Read Blocks"], round(plan["Actual Rows"])  # PG 18: a float
