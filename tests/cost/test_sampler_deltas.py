"""The sampler against a real Postgres table: counters as deltas, and the TOAST table beside it."""

import time

import psycopg
from psycopg import sql

from metrics import rundir
from metrics.recorder import FireRecorder
from metrics.sampler import Sampler
from tests.conformance.helpers import wait_until
from tests.unit.test_sampler import OneTable

# A session's table counters reach the statistics when it ends, and at the latest within
# Postgres' idle flush interval (10 s); the rest is slack for a busy machine.
STATS_REACH_S = 15.0


def counters(dsn: str, schema: str) -> tuple[int, int]:
    """(updates, deletes) of the test's table as the statistics show them now."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT n_tup_upd, n_tup_del FROM pg_stat_all_tables WHERE schemaname = %s AND relname = 'triggers'",
            (schema,),
        ).fetchone()
    return (int(row[0]), int(row[1])) if row else (0, 0)


async def test_sampler_reads_table_and_toast_stats_as_deltas(pg_dsn, schema, tmp_path):
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        conn.execute(
            sql.SQL("CREATE TABLE {}.triggers (id int PRIMARY KEY, state bytea)").format(sql.Identifier(schema))
        )
        conn.execute(
            sql.SQL("INSERT INTO {}.triggers SELECT g, NULL FROM generate_series(1, 50) g").format(
                sql.Identifier(schema)
            )
        )
    now = time.time()
    sampler = Sampler(OneTable(schema), FireRecorder(tmp_path / "segments", now, now + 60), pg_dsn, tmp_path)
    await sampler.open()  # the baseline: the 50 inserts above are before the run
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        # incompressible 4 KB states go to the TOAST table (the Composio article)
        conn.execute(
            sql.SQL(
                "UPDATE {}.triggers t SET state = (SELECT decode(string_agg(md5(random()::text || g || t.id), ''), "
                "'hex') FROM generate_series(1, 256) g) WHERE id <= 10"
            ).format(sql.Identifier(schema))
        )
        conn.execute(sql.SQL("DELETE FROM {}.triggers WHERE id > 45").format(sql.Identifier(schema)))
    # the writing session has ended: its counters reach the statistics soon after
    flushed = await wait_until(lambda: counters(pg_dsn, schema) == (10, 5), STATS_REACH_S, poll_s=0.2)
    assert flushed, f"(updates, deletes) in the statistics: {counters(pg_dsn, schema)}, expected (10, 5)"
    await sampler.sample()
    await sampler.close()
    latest = sampler.latest
    table, toast = f"{schema}.triggers", f"{schema}.triggers#toast"
    assert latest[(table, "n_tup_ins")] == 0  # deltas since the baseline
    assert latest[(table, "n_tup_upd")] == 10
    assert latest[(table, "n_tup_del")] == 5
    assert latest[(toast, "n_tup_ins")] > 0  # the states' chunks
    assert latest[(table, "table_bytes")] > 0 and latest[(table, "index_bytes")] > 0
    assert 0.0 <= latest[(table, "hot_ratio")] <= 1.0
    assert latest[("run", "backend.depth")] == 7.0
    assert latest[("run", "wal_bytes")] > 0
    assert ("run", "oldest_xact_age_s") in latest
    sampler.save()
    assert rundir.read_samples(tmp_path).num_rows == sum(1 for _ in latest)  # one segment: this sample
