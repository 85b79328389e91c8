"""pg_queue reproduces the Composio article's "before" system: its write pattern and the first ingredient
of its MVCC doom loop, measured from Postgres' own statistics views."""

from __future__ import annotations

import asyncio
import random
import time

import psycopg
from psycopg import sql

from schedulers.base import StoreContext, Timer
from tests.conformance.helpers import wait_until as _wait_for
from tests.pg_queue.conftest import PollingProcessor, due_scan_buffers, make_scheduler, settled_stats, table_stats

STATE_BYTES = 4096  # the Composio article: encrypted poll state, TOASTed


def _population(n: int, first_within_s: float, interval_s: tuple[float, float], seed: int = 3):
    rng = random.Random(seed)
    now = time.time()
    intervals = {f"trig-{i:05d}": rng.uniform(*interval_s) for i in range(n)}
    timers = [
        Timer(tid, now + rng.uniform(0, first_within_s), type="poll", tenant_id=f"tenant-{i % 20}")
        for i, tid in enumerate(intervals)
    ]
    return timers, intervals


async def test_each_fire_writes_one_insert_two_updates_one_delete_and_few_are_hot(pg_dsn, schema, pg_queue_ctx):
    n = 2000
    cycles = 4
    s = await make_scheduler(pg_queue_ctx(STATE_BYTES), tick_s=0.2, batch=800, inflight_batches=4)
    timers, intervals = _population(n, first_within_s=1.5, interval_s=(1.0, 2.0))
    await s.arm(timers)
    await s.teardown(drop=False)  # close the arming connections so their counters flush
    before, toast_before = await settled_stats(pg_dsn, schema, "triggers")

    proc = PollingProcessor(intervals, STATE_BYTES)
    stop = asyncio.Event()
    started = time.time()
    task = asyncio.create_task(s.run({"poll": proc}, stop, worker_id="w1"))
    ok = await _wait_for(lambda: len(proc.fired) == n and min(proc.fired.values()) >= cycles, 30.0)
    stop.set()
    await asyncio.wait_for(task, 30)
    elapsed_s = time.time() - started
    await s.teardown(drop=False)
    assert ok, (
        f"not every trigger fired {cycles} times: {len(proc.fired)} fired, min {min(proc.fired.values(), default=0)}"
    )

    after, toast_after = await settled_stats(pg_dsn, schema, "triggers")
    fires = proc.committed_fires
    delta = {k: after[k] - before[k] for k in ("n_tup_ins", "n_tup_upd", "n_tup_hot_upd", "n_tup_del")}
    per_fire = {k: v / fires for k, v in delta.items()}
    hot_ratio = delta["n_tup_hot_upd"] / delta["n_tup_upd"]
    toast_delta = {k: toast_after[k] - toast_before[k] for k in ("n_tup_ins", "n_tup_del")}
    print(
        f"\npg_queue write pattern: {fires} fires of {n} triggers in {elapsed_s:.1f}s; per fire "
        f"ins {per_fire['n_tup_ins']:.3f} upd {per_fire['n_tup_upd']:.3f} del {per_fire['n_tup_del']:.3f}; "
        f"HOT ratio {hot_ratio:.1%}; TOAST per fire ins {toast_delta['n_tup_ins'] / fires:.2f} "
        f"del {toast_delta['n_tup_del'] / fires:.2f}; n_dead_tup {after['n_dead_tup']} "
        f"(toast {toast_after['n_dead_tup']}) vs n_live_tup {after['n_live_tup']}"
    )
    # the Composio article: "Each poll made four writes to its row, one insert, two updates, and one delete."
    for column, expected in (("n_tup_ins", 1.0), ("n_tup_upd", 2.0), ("n_tup_del", 1.0)):
        assert abs(per_fire[column] - expected) <= 0.1 * expected, (
            f"{column} per fire {per_fire[column]:.3f}, expected {expected} within 10% ({delta[column]} over {fires} "
            "fires)"
        )
    # the Composio article: "Only 18% of our updates qualified" as HOT.
    assert hot_ratio < 0.35, f"HOT ratio {hot_ratio:.1%} is not well under 50%"
    # The poll state really is out of line: every re-insert writes TOAST chunks.
    assert toast_delta["n_tup_ins"] >= fires, f"only {toast_delta['n_tup_ins']} TOAST inserts for {fires} fires"


async def test_old_snapshot_keeps_dead_tuples_out_of_vacuums_reach(isolated_dsn, schema):
    # A database of its own: the horizon is per database, and in the shared one another test's
    # snapshot can keep the dead tuples this test expects VACUUM to remove once its own is gone.
    pg_dsn = isolated_dsn
    n = 500
    s = await make_scheduler(StoreContext(dsn=pg_dsn, schema=schema, state_bytes=STATE_BYTES), tick_s=0.1, batch=800)
    timers, intervals = _population(n, first_within_s=0.5, interval_s=(0.5, 1.0))
    await s.arm(timers)
    triggers = sql.Identifier(schema, "triggers")

    # An idle session with an open transaction that once read something: its snapshot pins the
    # vacuum horizon, though it has nothing to do with polling (the Composio article).
    holder = await psycopg.AsyncConnection.connect(pg_dsn)
    try:
        await holder.set_isolation_level(psycopg.IsolationLevel.REPEATABLE_READ)
        await holder.execute(sql.SQL("SELECT count(*) FROM {}").format(triggers))

        proc = PollingProcessor(intervals, STATE_BYTES)
        stop = asyncio.Event()
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            # Probes compare like with like: every trigger due, so each scan returns all n rows.
            await asyncio.sleep(0.6)
            scan_before = due_scan_buffers(conn, s)
            task = asyncio.create_task(s.run({"poll": proc}, stop, worker_id="w1"))
            first_cycle = await _wait_for(lambda: len(proc.fired) == n, 20.0)
            assert first_cycle, f"{len(proc.fired)} of {n} triggers fired once"
            dead_mid = table_stats(conn, schema, "triggers")["n_dead_tup"]  # after the first cycle
            ok = await _wait_for(lambda: len(proc.fired) == n and min(proc.fired.values()) >= 3, 20.0)
            stop.set()
            await asyncio.wait_for(task, 30)
            all_due_at = time.time() + 1.0  # the longest interval
            await s.teardown(drop=False)
            assert ok, "the triggers did not fire three times each"
            settled, _ = await settled_stats(pg_dsn, schema, "triggers")
            dead_before_vacuum = settled["n_dead_tup"]
            fires = proc.committed_fires

            conn.execute(sql.SQL("VACUUM {}").format(triggers))
            dead_while_held = table_stats(conn, schema, "triggers")["n_dead_tup"]
            # The due-work query reads exactly where the dead versions pile up (the Composio article).
            await asyncio.sleep(max(0.0, all_due_at - time.time()))
            scan_held = due_scan_buffers(conn, s)

            await holder.commit()  # the idle transaction ends; the horizon moves on
            dead_released = dead_while_held
            for _ in range(20):  # another session's short transaction may briefly hold it too
                conn.execute(sql.SQL("VACUUM {}").format(triggers))
                dead_released = table_stats(conn, schema, "triggers")["n_dead_tup"]
                if dead_released <= 0.02 * dead_while_held:
                    break
                await asyncio.sleep(0.25)
            scan_released = due_scan_buffers(conn, s)
    finally:
        await holder.close()
        await s.teardown(drop=True)

    print(
        f"\npg_queue with an idle old snapshot: {fires} fires of {n} triggers; n_dead_tup "
        f"{dead_mid} after the first cycle, {dead_before_vacuum} at stop, {dead_while_held} after VACUUM while "
        f"held, {dead_released} after VACUUM once released; the due-work query touched "
        f"{scan_before} buffers before the run, {scan_held} while held, {scan_released} once vacuumed"
    )
    assert dead_before_vacuum > dead_mid, f"n_dead_tup did not grow: {dead_mid} -> {dead_before_vacuum}"
    # Each fire leaves three dead heap versions (claim, mark_polled, delete); none are removable
    # while the snapshot is held (what VACUUM does remove is the probe's rolled-back claim).
    assert dead_while_held >= 2.7 * fires, (
        f"VACUUM removed dead tuples an open snapshot can still see: {dead_while_held} remain after {fires} fires"
    )
    assert dead_released <= 0.02 * dead_while_held, (
        f"after the old transaction ended VACUUM still left {dead_released} of {dead_while_held} dead tuples"
    )
    assert scan_held >= 3 * scan_before, (
        f"the due-work query did not slow down on dead versions: {scan_before} -> {scan_held} buffers"
    )
    assert scan_released < scan_held / 2, (
        f"VACUUM after the release did not shorten the due-work scan: {scan_held} -> {scan_released} buffers"
    )
