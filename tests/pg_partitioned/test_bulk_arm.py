"""pg_partitioned arms through pg_leased's bulk path, into the partitioned parents (Postgres routes
each staged row to its partition, and ``ON CONFLICT (id)`` holds there: the key is the partition
key). The same scenario as tests/pg_leased/test_bulk_arm.py, both paths compared."""

from __future__ import annotations

import psycopg
from psycopg import sql

from schedulers.base import StoreContext
from schedulers.pg_partitioned import PgPartitionedScheduler, partition_name
from tests.pg_leased.test_bulk_arm import FAST, OLD_PATH, ROWS, arm_scenario


async def test_bulk_arm_into_partitions_leaves_what_the_per_call_upsert_leaves(pg_dsn, schema):
    results, spread = {}, {}
    for path, options in (("bulk", {}), ("percall", OLD_PATH)):
        name = f"{schema}_{path}"
        s = PgPartitionedScheduler(
            StoreContext(dsn=pg_dsn, schema=name, state_bytes=32), **FAST, partitions=4, **options
        )
        await s.setup()
        try:
            results[path] = await arm_scenario(s, pg_dsn, name, ROWS)
            with psycopg.connect(pg_dsn, autocommit=True) as conn:
                spread[path] = [
                    conn.execute(
                        sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(name, partition_name(t, k)))
                    ).fetchone()[0]
                    for t in ("schedule", "state")
                    for k in range(4)
                ]
        finally:
            await s.teardown(drop=True)
    (bulk_rows, bulk_states, bulk_before), (old_rows, old_states, _) = results["bulk"], results["percall"]
    assert bulk_rows == old_rows and len(bulk_rows) == 1950
    assert [i for i, _ in bulk_states] == [i for i, _ in old_states] == [r[0] for r in bulk_rows]
    assert all(bulk_before[i] == st for i, st in bulk_states if i in bulk_before), "a move replaced the poll state"
    assert spread["bulk"] == spread["percall"] and all(n > 0 for n in spread["bulk"])
