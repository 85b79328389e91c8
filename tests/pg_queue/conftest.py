"""Helpers for the pg_queue doom-loop tests: a re-arming polling processor and settled table stats."""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import psycopg
import pytest
from psycopg import sql

from schedulers.base import Fire, Outcome, StoreContext
from schedulers.pg_queue import PgQueueScheduler
from tests.pg_leased.conftest import isolated_dsn  # noqa: F401  (a fixture, used by name: a database of its own)

STAT_COLUMNS = ("n_tup_ins", "n_tup_upd", "n_tup_hot_upd", "n_tup_del", "n_live_tup", "n_dead_tup")


@dataclass
class PollingProcessor:
    """Polls instantly and re-arms each trigger at its own interval, like the article's polling
    triggers (interval compressed from 60-120 s to ``intervals_s``). A share of polls find events
    (an effect) and change the poll state (fresh encrypted bytes)."""

    intervals_s: dict[str, float]
    state_bytes: int
    change_share: float = 0.3
    seed: int = 3
    fired: dict[str, int] = field(default_factory=dict)
    committed_fires: int = 0
    delivered_effects: int = 0

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)

    async def process(self, fires: Sequence[Fire]) -> list[Outcome]:
        now = time.time()
        out = []
        for f in fires:
            changed = self._rng.random() < self.change_share
            out.append(
                Outcome(
                    next_fire_at=now + self.intervals_s[f.timer_id],
                    new_state=os.urandom(self.state_bytes) if changed else None,
                    effect=changed,
                )
            )
        return out

    def committed(self, fires: Sequence[Fire], delivered: Sequence[bool]) -> None:
        self.committed_fires += len(fires)
        self.delivered_effects += sum(delivered)
        for f in fires:
            self.fired[f.timer_id] = self.fired.get(f.timer_id, 0) + 1


def table_stats(conn: psycopg.Connection, schema: str, table: str) -> dict[str, int]:
    query = sql.SQL("SELECT {} FROM pg_stat_user_tables WHERE schemaname = %s AND relname = %s").format(
        sql.SQL(", ").join(map(sql.Identifier, STAT_COLUMNS))
    )
    row = conn.execute(query, (schema, table)).fetchone()
    assert row is not None, f"no pg_stat_user_tables row for {schema}.{table}"
    return dict(zip(STAT_COLUMNS, row))


def toast_stats(conn: psycopg.Connection, schema: str, table: str) -> dict[str, int]:
    query = sql.SQL(
        "SELECT {} FROM pg_class c JOIN pg_stat_all_tables s ON s.relid = c.reltoastrelid"
        " JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relname = %s"
    ).format(sql.SQL(", ").join(sql.Identifier("s", c) for c in STAT_COLUMNS))
    row = conn.execute(query, (schema, table)).fetchone()
    assert row is not None, f"{schema}.{table} has no TOAST table"
    return dict(zip(STAT_COLUMNS, row))


async def settled_stats(dsn: str, schema: str, table: str, quiet_s: float = 0.6, timeout_s: float = 15.0):
    """Table counters once every backend that wrote them has flushed: read until two reads
    ``quiet_s`` apart agree. Callers close the writers' connections first (a backend flushes its
    pending counters on exit); ``pg_stat_force_next_flush()`` covers this session's own."""
    deadline = time.time() + timeout_s
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_force_next_flush()")
        last = table_stats(conn, schema, table)
        while time.time() < deadline:
            await asyncio.sleep(quiet_s)
            now = table_stats(conn, schema, table)
            if now == last:
                return now, toast_stats(conn, schema, table)
            last = now
    raise AssertionError(f"statistics of {schema}.{table} did not settle within {timeout_s}s")


def due_scan_buffers(conn: psycopg.Connection, scheduler: PgQueueScheduler) -> int:
    """Shared buffers the due-work scan touches right now: the ``due`` CTE (index scan and row
    locks) of the real ``claim_due`` statement, not the claim's own writes. Run under EXPLAIN
    ANALYZE in a transaction that is rolled back, so it claims nothing.

    The scan is pinned to ``triggers_next_fire_at_idx``, the plan of the article's table at ~99k
    live rows ("walking an index full of dead entries"); at a test's few hundred rows the planner
    may pick a sequential scan instead, which walks the same dead versions in the heap."""
    explain = sql.Composed([sql.SQL("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "), scheduler.q["claim_due"]])
    params = {"owner": "probe", "batch": scheduler.batch, "stale_claim_s": scheduler.stale_claim_s}
    conn.execute("BEGIN")
    try:
        conn.execute("SET LOCAL enable_seqscan = off")
        conn.execute("SET LOCAL enable_bitmapscan = off")
        plan = conn.execute(explain, params).fetchone()[0][0]["Plan"]
    finally:
        conn.execute("ROLLBACK")

    def nodes(node):
        yield node
        for child in node.get("Plans", []):
            yield from nodes(child)

    cte = [n for n in nodes(plan) if n.get("Subplan Name") == "CTE due"]
    assert cte, "claim_due has no 'due' CTE in its plan"
    return cte[0]["Shared Hit Blocks"] + cte[0]["Shared Read Blocks"]


@pytest.fixture
def pg_queue_ctx(pg_dsn: str, schema: str):
    def build(state_bytes: int = 4096) -> StoreContext:
        return StoreContext(dsn=pg_dsn, schema=schema, state_bytes=state_bytes)

    return build


async def make_scheduler(ctx: StoreContext, **options) -> PgQueueScheduler:
    s = PgQueueScheduler(ctx, **options)
    await s.setup()
    return s
