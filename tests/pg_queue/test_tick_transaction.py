"""pg_queue's tick transaction (``hold_tick_tx``): the Composio article's tick held its transaction open
through the hand-off to the processor ("Slower ticks held transactions and snapshots open longer,
delaying cleanup further"), the feedback that made the doom loop a loop. Shown from Postgres' own
views: the tick's session in ``pg_stat_activity`` during a slow poll, and what VACUUM can remove
meanwhile. The claim commits on its own either way (an arm() moving an in-flight timer does not
wait for the poll); with the option off nothing stays open while the processor polls.

In a database of its own (``isolated_dsn``): the vacuum horizon is per database, and other tests
in the shared one hold snapshots (on purpose, or for a moment while arming) for longer than the
few seconds this one allows them (seen failing beside the rest of the suite)."""

from __future__ import annotations

import asyncio
import time

import psycopg
import pytest
from psycopg import sql

from schedulers.base import StoreContext, Timer
from schedulers.pg_queue import PgQueueScheduler
from tests.conformance.helpers import RecordingProcessor, wait_until
from tests.pg_queue.conftest import make_scheduler, table_stats

APP = "timerbench-pg_queue"  # the pool's application_name (schedulers.pg.open_pool)
SCRATCH_ROWS = 200


def open_ticks(conn: psycopg.Connection, schema: str) -> list[tuple]:
    """This test's scheduler's sessions with a transaction open and idle: (state, backend_xid,
    backend_xmin). Its last statement names its schema (the held tick's says so in a comment):
    pg_queue schedulers of other tests running at the same time share the application name."""
    return conn.execute(
        "SELECT state, backend_xid::text, backend_xmin::text FROM pg_stat_activity "
        "WHERE application_name = %s AND datname = current_database() AND state LIKE 'idle in transaction%%' "
        "AND position(%s in query) > 0",
        (APP, schema),
    ).fetchall()


def churn_and_vacuum(conn: psycopg.Connection, schema: str) -> int:
    """Leave SCRATCH_ROWS dead versions in a table nobody else touches, VACUUM it, and return the
    dead tuples VACUUM had to keep (those some open transaction may still see)."""
    scratch = sql.Identifier(schema, "scratch")
    conn.execute(sql.SQL("UPDATE {} SET v = v + 1").format(scratch))
    conn.execute(sql.SQL("VACUUM {}").format(scratch))
    return table_stats(conn, schema, "scratch")["n_dead_tup"]


@pytest.mark.parametrize("in_tick_tx", [True, False], ids=["hold_tick_tx", "short_claim_tx"])
async def test_tick_transaction_holds_the_vacuum_horizon_through_a_slow_poll(isolated_dsn, schema, in_tick_tx):
    assert PgQueueScheduler.default_options["hold_tick_tx"] is True, "the default is the article's tick"
    pg_dsn = isolated_dsn
    ctx = StoreContext(dsn=pg_dsn, schema=schema, state_bytes=256)
    s = await make_scheduler(ctx, tick_s=0.1, hold_tick_tx=in_tick_tx)
    scratch = sql.Identifier(schema, "scratch")
    hold = asyncio.Event()
    proc = RecordingProcessor(hold=hold)  # a poll that does not answer until released
    stop = asyncio.Event()
    task = None
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE TABLE {} (id int PRIMARY KEY, v int) WITH (autovacuum_enabled = off)").format(scratch)
        )
        conn.execute(
            sql.SQL("INSERT INTO {} SELECT g, 0 FROM generate_series(1, %s) g").format(scratch), (SCRATCH_ROWS,)
        )
        try:
            await s.arm([Timer(f"tick-{i}", time.time() - 1.0) for i in range(20)])
            task = asyncio.create_task(s.run({"poll": proc}, stop, worker_id="w1"))
            assert await wait_until(lambda: len(proc.received) == 20, 10), "the batch never reached the processor"
            await asyncio.sleep(0.3)  # the poll is now slow: the tick has long claimed
            ticks = open_ticks(conn, schema)
            kept = churn_and_vacuum(conn, schema)
            for _ in range(20):  # a concurrent short transaction may pin the horizon for a moment
                if in_tick_tx or kept == 0:
                    break
                await asyncio.sleep(0.1)
                kept = churn_and_vacuum(conn, schema)
            # the claim committed on its own: visible to others, and no lock an arm() would wait for
            claimed = conn.execute(
                sql.SQL("SELECT count(*) FROM {} WHERE claimed_by IS NOT NULL").format(
                    sql.Identifier(schema, "triggers")
                )
            ).fetchone()[0]
            await asyncio.wait_for(s.arm([Timer("tick-0", time.time() + 3600)]), 5)  # moves an in-flight timer
            print(
                f"\nhold_tick_tx={in_tick_tx}: during a slow poll, open ticks {ticks}; VACUUM kept {kept} of "
                f"{SCRATCH_ROWS} fresh dead tuples in an unrelated table; {claimed} claims visible to others"
            )
            assert claimed == 20, "the claim did not commit before the poll"
            if in_tick_tx:
                # the tick holding the slow batch; the next tick (every 0.1 s) may be caught
                # between its statements, in a transaction of its own, at the same moment
                assert any(xid is not None for _, xid, _ in ticks), (
                    f"no tick transaction with an xid open during the slow poll: {ticks}"
                )
                assert kept == SCRATCH_ROWS, f"VACUUM removed dead tuples the open tick still pins: kept {kept}"
            else:
                for _ in range(20):  # a tick caught between two statements is not one that stays open
                    if not ticks:
                        break
                    await asyncio.sleep(0.1)
                    ticks = open_ticks(conn, schema)
                assert ticks == [], f"a transaction stayed open during the poll: {ticks}"
                assert kept == 0, f"VACUUM kept {kept} dead tuples with no transaction open"
            hold.set()
            ok = await wait_until(lambda: len(proc.delivered) == 20, 10)
            assert ok, "the batch did not commit after the poll answered"
            stop.set()
            await asyncio.wait_for(task, 15)
            task = None
            assert open_ticks(conn, schema) == []
            kept = churn_and_vacuum(conn, schema)
            for _ in range(20):
                if kept == 0:
                    break
                await asyncio.sleep(0.1)
                kept = churn_and_vacuum(conn, schema)
            assert kept == 0, f"VACUUM still kept {kept} dead tuples after the tick committed"
            assert all(n == 1 for n in proc.delivered.values())
            moved = conn.execute(
                sql.SQL("SELECT extract(epoch FROM next_fire_at) > %s FROM {} WHERE id = 'tick-0'").format(
                    sql.Identifier(schema, "triggers")
                ),
                (time.time() + 3000,),
            ).fetchone()
            assert moved == (True,), "the move made during the poll did not survive the batch's commit"
        finally:
            hold.set()
            if task is not None:
                stop.set()
                await asyncio.wait_for(task, 15)
            await s.teardown(drop=True)
