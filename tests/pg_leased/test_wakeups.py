"""pg_leased's wake-ups lose nothing: after an empty claim a claim loop sleeps until the earliest
scheduled fire time (at most ``idle_s``), and an arm of a timer due sooner wakes it, here or in
another process (NOTIFY). A NOTIFY that never arrives is found by the planned wake-up instead.

Each test makes ``idle_s`` several seconds, so a fire well inside it can only come from a wake-up
and one after it only from the planned one. A second scheduler instance on the same schema plays
the other process (its own pool; an arm there sets nothing in the running instance)."""

from __future__ import annotations

import time

import psycopg

from schedulers.base import StoreContext, Timer
from schedulers.pg_leased import PgLeasedScheduler
from tests.conformance.helpers import CLOCK_TOLERANCE_S, RecordingProcessor, Runner, wait_until

FAST = {"tick_s": 0.05, "lease_s": 2.0, "sweep_s": 0.25, "batch": 50, "max_per_tenant": 10}


async def make(dsn: str, schema: str, **options) -> PgLeasedScheduler:
    s = PgLeasedScheduler(StoreContext(dsn=dsn, schema=schema, state_bytes=16), **{**FAST, **options})
    await s.setup()
    return s


async def asleep(s: PgLeasedScheduler) -> bool:
    """Wait until the run loop is in a planned sleep (after an empty claim) with most of it left."""
    return await wait_until(lambda: s.asleep_until - time.time() > s.idle_s / 2, 30.0, poll_s=0.01)


async def start_listening_and_asleep(s: PgLeasedScheduler, runner: Runner, proc: RecordingProcessor) -> None:
    """Arm one far timer (the planned wake-up is then idle_s away), start the run, and wait until
    it listens (opening the LISTEN connection wakes the loops too) and sleeps."""
    await s.arm([Timer("far", time.time() + 3600)])
    runner.start(proc, "w1")
    assert await wait_until(lambda: s.listens >= 1, 30.0), "the run never listened"
    assert await asleep(s), "the claim loop never went to a planned sleep"


def lag(proc: RecordingProcessor, timer_id: str) -> float:
    (fire,) = proc.of(timer_id)
    assert fire.received_at >= fire.due_at - CLOCK_TOLERANCE_S, f"{timer_id} fired before its time"
    return fire.received_at - fire.due_at


async def test_a_timer_armed_due_sooner_than_the_planned_wake_up_fires_on_time(pg_dsn, schema):
    idle_s = 8.0
    runner_side = await make(pg_dsn, schema, idle_s=idle_s)
    elsewhere = await make(pg_dsn, schema, idle_s=idle_s)
    runner = Runner(runner_side)
    proc = RecordingProcessor()
    try:
        await runner_side.arm([Timer("far", time.time() + 3600)])  # the planned wake-up: idle_s away
        runner.start(proc, "w1")
        assert await asleep(runner_side), "the claim loop never went to a planned sleep"

        # armed by another process: only its NOTIFY can wake the sleeping loop before idle_s
        await elsewhere.arm([Timer("sooner-elsewhere", time.time() + 0.5)])
        assert await wait_until(lambda: proc.ids() >= {"sooner-elsewhere"}, idle_s), "the NOTIFY woke nothing"
        assert lag(proc, "sooner-elsewhere") < idle_s / 2, "it waited for the planned wake-up"
        assert runner_side.notifies >= 1

        # armed by the running instance itself: its own wake-up, no NOTIFY needed
        assert await asleep(runner_side), "the claim loop did not go back to sleep"
        await runner_side.arm([Timer("sooner-here", time.time() + 0.5)])
        assert await wait_until(lambda: proc.ids() >= {"sooner-here"}, idle_s), "the arm woke nothing"
        assert lag(proc, "sooner-here") < idle_s / 2, "it waited for the planned wake-up"
        assert "far" not in proc.ids()
    finally:
        await runner.stop_all()
        await elsewhere.teardown(drop=False)
        await runner_side.teardown(drop=True)


async def test_a_lost_notify_falls_back_to_the_planned_wake_up(isolated_dsn, schema):
    # Its own database: the LISTEN connection to drop is the only one of its name there.
    idle_s = 5.0
    runner_side = await make(isolated_dsn, schema, idle_s=idle_s)
    silent = await make(isolated_dsn, schema, idle_s=idle_s, listen_notify=False)  # sends no NOTIFY
    notifying = await make(isolated_dsn, schema, idle_s=idle_s)
    runner = Runner(runner_side)
    proc = RecordingProcessor()
    try:
        await start_listening_and_asleep(runner_side, runner, proc)

        # The listener's connection drops: it is reopened (with backoff), and the loop sleeps again.
        with psycopg.connect(isolated_dsn, autocommit=True) as conn:
            dropped = conn.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE datname = current_database() AND application_name = %s",
                [f"{runner_side.name}-listen"],
            ).fetchone()[0]
        assert dropped == 1, f"expected one LISTEN connection to drop, found {dropped}"
        assert await wait_until(lambda: runner_side.listen_drops >= 1 and runner_side.listens >= 2, 30.0), (
            "the LISTEN connection was not reopened"
        )
        assert await asleep(runner_side), "the claim loop did not go back to sleep"

        # An arm whose NOTIFY never arrives: nothing wakes the loop, and its planned wake-up (at
        # most idle_s later) claims the timer.
        planned = runner_side.asleep_until
        await silent.arm([Timer("unannounced", time.time() + 0.3)])
        # Lateness is the conformance suite's business; here: not lost, not woken by anything else,
        # and found by the planned wake-up rather than a later one. (A shared server's checkpoint
        # can stall the claim that finds it by seconds, so the wait itself is generous.)
        assert await wait_until(lambda: proc.ids() >= {"unannounced"}, 60.0), "a lost NOTIFY lost the timer"
        received_at = proc.of("unannounced")[0].received_at
        assert lag(proc, "unannounced") >= 0
        assert received_at >= planned - CLOCK_TOLERANCE_S, "something else woke the loop"
        assert received_at < planned + idle_s, "the planned wake-up did not find it; a later one did"

        # After the reconnect a NOTIFY wakes the loop again, well before its planned wake-up.
        assert await asleep(runner_side), "the claim loop did not go back to sleep"
        await notifying.arm([Timer("announced", time.time() + 0.5)])
        assert await wait_until(lambda: proc.ids() >= {"announced"}, idle_s + 5.0), "the reopened LISTEN heard nothing"
        assert lag(proc, "announced") < idle_s / 2, "the NOTIFY after the reconnect woke nothing"
        assert "far" not in proc.ids()
    finally:
        await runner.stop_all()
        for s in (silent, notifying):
            await s.teardown(drop=False)
        await runner_side.teardown(drop=True)


async def test_an_arm_due_after_idle_s_leaves_the_planned_sleep_alone(pg_dsn, schema):
    # A move of a far timer is the common arm at scale: it must not cost a claim of its own, in
    # either arm path (one upsert, or the bulk copy from bulk_arm_min timers).
    idle_s = 6.0
    runner_side = await make(pg_dsn, schema, idle_s=idle_s, bulk_arm_min=20)
    runner = Runner(runner_side)
    proc = RecordingProcessor()
    try:
        await start_listening_and_asleep(runner_side, runner, proc)
        planned = runner_side.asleep_until
        for batch in (
            [Timer("moved-far", time.time() + 7200)],
            [Timer(f"bulk-{i}", time.time() + 7200) for i in range(40)],
        ):
            await runner_side.arm(batch)
            assert not runner_side._wake.is_set(), f"an arm of {len(batch)} far timers woke the claim loops"
        await runner_side.arm([Timer("far", time.time() + 5400)])  # a move of an armed timer
        assert not runner_side._wake.is_set(), "the move of a far timer woke the claim loops"
        # Had any of them woken the loop, it would have claimed and begun a new planned sleep.
        assert await wait_until(lambda: runner_side.asleep_until != planned, 1.0, poll_s=0.05) is False
        assert proc.ids() == set()

        # The same instance's arm of a timer due within idle_s still wakes it.
        await runner_side.arm([Timer("soon", time.time() + 0.3)])
        assert runner_side._wake.is_set(), "an arm due within idle_s did not wake the claim loops"
        assert await wait_until(lambda: proc.ids() >= {"soon"}, idle_s), "the timer due soon never fired"
        assert lag(proc, "soon") < idle_s / 2, "it waited for the planned wake-up"
    finally:
        await runner.stop_all()
        await runner_side.teardown(drop=True)
