"""pg_queue's bulk arm (COPY into a staging table, one upsert per id range) leaves the trigger
table exactly as the per-call upsert does: the same rows, a move clears the claim and keeps the
poll state. Both paths run the same two arms, each in its own schema, and the tables compare."""

from __future__ import annotations

import psycopg
from psycopg import sql

from schedulers.base import StoreContext, Timer
from schedulers.pg_queue import PgQueueScheduler

NOW = 1_900_000_000.0
# fire_at None is due now: now() of the arm's transaction, so it reads as NULL here
ROWS = """
SELECT id, tenant_id, type, priority, nullif(next_fire_at, armed_at), status, claimed_by, claimed_at,
       attempts, poll_state
  FROM {}.triggers ORDER BY id
"""


class CountsRanges(PgQueueScheduler):
    """pg_queue, counting the id ranges its bulk path armed."""

    ranges = 0

    async def _arm_range(self, pool, batch, size):
        type(self).ranges += 1
        await super()._arm_range(pool, batch, size)


async def scenario(s: PgQueueScheduler, dsn: str, schema: str) -> tuple[list, dict]:
    first = [
        Timer(f"q-{i:05d}", None if i % 97 == 0 else NOW + 40 * 86400 + i, "poll", f"t{i % 7}", i % 3)
        for i in range(1500)
    ]
    await s.arm([*first, Timer("q-00005", NOW + 50 * 86400, "poll", "t9", 2)])  # the last arm of an id wins
    with psycopg.connect(dsn, autocommit=True) as conn:
        # a run loop holds 100 of the rows the second arm moves (as claim_due leaves them)
        conn.execute(
            sql.SQL(
                "UPDATE {}.triggers SET status = 'claimed', claimed_by = 'owner-1', claimed_at = now(), "
                "attempts = 1 WHERE id = ANY(%s)"
            ).format(sql.Identifier(schema)),
            ([f"q-{i:05d}" for i in range(0, 400, 4)],),
        )
        before = dict(
            conn.execute(sql.SQL("SELECT id, poll_state FROM {}.triggers").format(sql.Identifier(schema))).fetchall()
        )
    moved = [Timer(f"q-{i:05d}", NOW + 3 + i * 0.001, "other", f"u{i % 5}", 1) for i in range(0, 2000, 2)]
    await s.arm(moved[::-1] + [Timer(f"r-{i:05d}", NOW + 60 * 86400, "poll", "t1") for i in range(200)])
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(sql.SQL(ROWS).format(sql.Identifier(schema))).fetchall(), before


async def test_bulk_arm_leaves_what_the_per_call_upsert_leaves(pg_dsn, schema):
    results = {}
    for path, options in (("bulk", {"arm_connections": 3}), ("percall", {"bulk_arm_min": 10**9})):
        name = f"{schema}_{path}"
        CountsRanges.ranges = 0
        s = CountsRanges(StoreContext(dsn=pg_dsn, schema=name, state_bytes=32), tick_s=0.1, **options)
        await s.setup()
        try:
            results[path] = await scenario(s, pg_dsn, name)
        finally:
            await s.teardown(drop=True)
        assert CountsRanges.ranges == (6 if path == "bulk" else 0), f"{path}: {CountsRanges.ranges} bulk ranges"
    (bulk, bulk_before), (old, old_before) = results["bulk"], results["percall"]
    strip = [r[:-1] for r in bulk]  # the poll state is random per schema; compared below
    assert strip == [r[:-1] for r in old] and len(bulk) == 1950
    moved = [r for r in bulk if r[0].startswith("q-") and int(r[0][2:]) % 2 == 0 and int(r[0][2:]) < 1500]
    assert len(moved) == 750
    assert all(r[5] == "scheduled" and r[6] is None and r[7] is None and r[8] == 0 for r in moved)
    # a move keeps the poll state; a new trigger gets one of its own
    assert all(r[9] == bulk_before[r[0]] for r in bulk if r[0] in bulk_before)
    assert all(r[9] == old_before[r[0]] for r in old if r[0] in old_before)
    assert all(r[9] is not None and len(r[9]) == 32 for r in bulk)
