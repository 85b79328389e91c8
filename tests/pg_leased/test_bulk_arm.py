"""pg_leased's bulk arm (COPY into a staging table, one upsert per id range) leaves the store
exactly as the per-call upsert does: the same rows, the same move semantics (version + 1, lease
dropped, back to scheduled), and a move keeps the poll state. Each scenario runs both paths, each
in its own schema, and compares the tables. tests/pg_partitioned runs the same on its partitions."""

from __future__ import annotations

import time

import psycopg
import pytest
from psycopg import sql

from schedulers.base import StoreContext, Timer
from schedulers.pg_leased import PgLeasedScheduler
from tests.conformance.helpers import RecordingProcessor, Runner, wait_until

FAST = {"tick_s": 0.05, "lease_s": 1.0, "sweep_s": 0.2, "batch": 50, "max_per_tenant": 10}
OLD_PATH = {"bulk_arm_min": 10**9}  # every call below it: the per-call upsert

ROWS = """
SELECT id, tenant_id, type, priority, next_fire_at, state, version, attempt, owner_id, lease_expires,
       poll_state IS NULL AS no_row_state, length(poll_state) AS row_state_bytes
  FROM {}.schedule ORDER BY id
"""
STATES = "SELECT id, poll_state FROM {}.state ORDER BY id"


def first_arm(now: float) -> list[Timer]:
    timers = [
        Timer(f"b-{i:05d}", None if i % 97 == 0 else now + 40 * 86400 + i, "poll", f"t{i % 7}", i % 3)
        for i in range(1500)
    ]
    # the same id twice in one call: the last arm wins
    return [*timers, Timer("b-00005", now + 50 * 86400, "poll", "t9", 2)]


def second_arm(now: float) -> list[Timer]:
    # 1,000 moves (some of rows a run loop holds) and 200 new ids, in no particular order
    moved = [Timer(f"b-{i:05d}", now + 3 + i * 0.001, "other", f"u{i % 5}", 1) for i in range(0, 2000, 2)]
    return moved[::-1] + [Timer(f"c-{i:05d}", now + 60 * 86400, "poll", "t1") for i in range(200)]


async def arm_scenario(scheduler, dsn: str, schema: str, rows_sql: str) -> tuple[list, list, dict]:
    """Two arms with a claim between them; returns the schedule rows (as ``rows_sql`` reads
    them), the state rows, and the state rows as they were before the second arm."""
    now = 1_900_000_000.0
    await scheduler.arm(first_arm(now))
    with psycopg.connect(dsn, autocommit=True) as conn:
        # a run loop holds 100 of the rows that the second arm moves (as claim_due leaves them)
        conn.execute(
            sql.SQL(
                "UPDATE {}.schedule SET state = 'running', owner_id = 'owner-1', attempt = 1, "
                "lease_expires = now() + interval '1 hour' WHERE id = ANY(%s)"
            ).format(sql.Identifier(schema)),
            ([f"b-{i:05d}" for i in range(0, 400, 4)],),
        )
        before = dict(conn.execute(sql.SQL(STATES).format(sql.Identifier(schema))).fetchall())
    await scheduler.arm(second_arm(now))
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(sql.SQL(rows_sql).format(sql.Identifier(schema))).fetchall()
        states = conn.execute(sql.SQL(STATES).format(sql.Identifier(schema))).fetchall()
    return rows, states, before


class CountsRanges(PgLeasedScheduler):
    """pg_leased, counting the id ranges its bulk path armed."""

    ranges = 0

    async def _arm_range(self, pool, ts, states):
        type(self).ranges += 1
        await super()._arm_range(pool, ts, states)


@pytest.mark.parametrize("split_state", [True, False], ids=["split-state", "state-in-row"])
async def test_bulk_arm_leaves_what_the_per_call_upsert_leaves(pg_dsn, schema, split_state):
    results = {}
    for path, options in (("bulk", {"arm_connections": 3}), ("per-call", OLD_PATH)):
        name = f"{schema}_{path.replace('-', '')}"
        CountsRanges.ranges = 0
        s = CountsRanges(
            StoreContext(dsn=pg_dsn, schema=name, state_bytes=32), **{**FAST, "split_state": split_state, **options}
        )
        await s.setup()
        try:
            results[path] = await arm_scenario(s, pg_dsn, name, ROWS)
        finally:
            await s.teardown(drop=True)
        assert CountsRanges.ranges == (6 if path == "bulk" else 0), f"{path}: {CountsRanges.ranges} bulk ranges"
    (bulk_rows, bulk_states, bulk_before), (old_rows, old_states, old_before) = results["bulk"], results["per-call"]
    assert bulk_rows == old_rows
    assert len(bulk_rows) == 1950  # 1,500 first armed, 250 + 200 new in the second arm
    moved = {r[0]: r for r in bulk_rows if r[0].startswith("b-") and int(r[0][2:]) % 2 == 0 and int(r[0][2:]) < 1500}
    assert all(
        r[5] == "scheduled" and r[6] == 1 and r[7] == 0 and r[8] is None and r[9] is None for r in moved.values()
    )
    assert {r[0] for r in bulk_rows if r[6] == 0} == {r[0] for r in bulk_rows} - set(moved)
    if split_state:
        # one state per timer; a move keeps the state the first arm made
        assert [i for i, _ in bulk_states] == [i for i, _ in old_states] == [r[0] for r in bulk_rows]
        assert all(bulk_before[i] == st for i, st in bulk_states if i in bulk_before)
        assert all(old_before[i] == st for i, st in old_states if i in old_before)
        assert all(r[10] for r in bulk_rows)
    else:
        assert not bulk_states and all(r[11] == 32 for r in bulk_rows)


async def test_bulk_arm_of_a_moved_timer_fires_once_at_its_new_time(pg_dsn, schema):
    """A population armed in bulk, then one of its far timers moved to a second from now (by a
    small arm): it fires at its new time, and nothing else does."""
    s = PgLeasedScheduler(StoreContext(dsn=pg_dsn, schema=schema, state_bytes=32), **FAST)
    await s.setup()
    runner = Runner(s)
    try:
        now = time.time()
        await s.arm([Timer(f"far-{i:05d}", now + 30 * 86400 + i) for i in range(2000)])
        proc = RecordingProcessor()
        runner.start(proc, "w1")
        moved_to = now + 1.0
        await s.arm([Timer("far-01234", moved_to)])
        assert await wait_until(lambda: "far-01234" in proc.ids(), 5.0)
        await wait_until(lambda: len(proc.received) > 1, 1.0)  # room for a stale or stray fire
        assert [(r.timer_id, round(r.due_at - moved_to, 3)) for r in proc.received] == [("far-01234", 0.0)]
    finally:
        await runner.stop_all()
        await s.teardown(drop=True)
