"""Checks the two job-library backends (procrastinate, pgqueuer) share beyond the conformance
suite: a worker crash mid-poll left to the library's own recovery, a move of a pending timer
(the superseded job cancelled through the library), a restart that resumes a re-arming chain,
the library's tables on the bill, and a teardown that leaves nothing running. Each backend's test
file runs them with what differs: how to read the library's jobs of a trigger, and what the
library does on a crash.

Real Postgres; the library's tables in each test's own schema.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import psycopg
from psycopg import sql

from schedulers.base import Fire, Outcome, Scheduler, Timer, us
from tests.conformance.helpers import RecordingProcessor, Runner, bound_s, wait_until

# (scheduler, trigger id) -> the library's jobs of that trigger, as (status, attempts) rows
JobsOf = Callable[[Scheduler, str], list[tuple[str, int]]]


@dataclass
class Rearming(RecordingProcessor):
    """Records, and re-arms each fire ``every_s`` after its due time (fixed cadence) until an id
    has fired ``times`` times."""

    every_s: float = 0.3
    times: int = 12

    async def process(self, fires: Sequence[Fire]) -> list[Outcome]:
        await super().process(fires)
        seen = [len({r.due_at for r in self.of(f.timer_id)}) for f in fires]
        return [
            Outcome(next_fire_at=f.due_at + self.every_s if n < self.times else None, effect=True)
            for f, n in zip(fires, seen)
        ]


EFFECTS = "SELECT trigger_id, extract(epoch FROM due_at)::float8 FROM {schema}.effects ORDER BY 1, 2"


def rows(s: Scheduler, query: str, *params) -> list[tuple]:
    with psycopg.connect(s.ctx.dsn) as conn:
        return conn.execute(sql.SQL(query).format(schema=sql.Identifier(s.ctx.schema)), params).fetchall()


async def crash_mid_poll(s: Scheduler, jobs_of: JobsOf, claimed_status: str, redelivered_attempt: int) -> None:
    """The run loop is cancelled while its processor holds the polls: the library's jobs stay
    claimed (``claimed_status``: the worker wrote nothing on its way out), the next worker gets
    them through the library's own recovery, each effect is recorded once, and nothing is left."""
    runner = Runner(s)
    try:
        dead = RecordingProcessor(hold=asyncio.Event())
        timers = [Timer(f"mid-{i}", time.time() - 0.1) for i in range(5)]
        ids = {t.id for t in timers}
        await s.arm(timers)
        task = runner.start(dead, "doomed")
        assert await wait_until(lambda: dead.ids() >= ids and dead.in_process > 0, bound_s(s)), "never polled"
        await runner.crash(task)
        left = {tid: jobs_of(s, tid) for tid in ids}
        assert all(j == [(claimed_status, 0)] for j in left.values()), f"after the crash the jobs are {left}"
        heir = RecordingProcessor()
        runner.start(heir, "heir")
        limit = s.capabilities.redelivery_s + bound_s(s)
        assert await wait_until(lambda: {k[0] for k in heir.delivered} >= ids, limit), "not redelivered"
        assert not dead.delivered, "the crashed owner's polls committed"
        assert {r.attempt for r in heir.received} == {redelivered_attempt}, [r.attempt for r in heir.received]
        assert all(n == 1 for n in heir.delivered.values()), heir.delivered
        assert await wait_until(lambda: all(not jobs_of(s, tid) for tid in ids), bound_s(s)), (
            f"finished jobs left behind: { ({tid: jobs_of(s, tid) for tid in ids}) }"
        )
        assert not await s.export_armed(), "finished timers are still armed"
    finally:
        await runner.stop_all()
        await s.teardown(drop=True)


async def move_of_a_pending_timer(s: Scheduler, jobs_of: JobsOf, pending_status: str) -> None:
    """A timer armed an hour out is moved to half a second out, another from +0.5 s to +1.5 s:
    each has exactly one pending job after the move (the superseded one cancelled through the
    library), and each fires once, at its new time."""
    runner = Runner(s)
    try:
        proc = RecordingProcessor()
        now = time.time()
        await s.arm([Timer("earlier", now + 3600), Timer("later", now + 0.5)])
        earlier_to, later_to = us(time.time() + 0.5), us(now + 1.5)
        await s.arm([Timer("earlier", earlier_to), Timer("later", later_to)])
        for tid in ("earlier", "later"):
            assert jobs_of(s, tid) == [(pending_status, 0)], f"{tid}: {jobs_of(s, tid)} after the move"
        assert (await s.stats())["cancelled_jobs"] == 2
        runner.start(proc, "w1")
        keys = {("earlier", earlier_to), ("later", later_to)}
        assert await wait_until(lambda: set(proc.delivered) >= keys, 1.5 + bound_s(s)), proc.delivered
        await asyncio.sleep(0.5)  # room for a stale job to fire
        assert sorted((r.timer_id, r.due_at) for r in proc.received) == sorted(keys), proc.received
        assert all(r.received_at >= dict(keys)[r.timer_id] - 0.1 for r in proc.received), "fired before its new time"
    finally:
        await runner.stop_all()
        await s.teardown(drop=True)


async def restart_resumes_the_chain(make: Callable[[], Scheduler], crash: bool) -> None:
    """Three triggers re-arm every 0.3 s for twelve fires. Midway the run loop stops (or
    crashes), the scheduler object is dropped, and a new one on the same store (a restarted
    process: setup again, a new worker) takes over: every due time fires exactly once, in
    sequence, with no gap, across the restart."""
    first = make()
    await first.setup()
    proc = Rearming(every_s=0.3, times=12)
    t0 = us(time.time() + 0.3)
    ids = [f"chain-{i}" for i in range(3)]
    runner = Runner(first)
    await first.arm([Timer(i, t0) for i in ids])
    task = runner.start(proc, "first")
    assert await wait_until(lambda: len(proc.received) >= 12, 12 * 0.3 + bound_s(first)), f"{len(proc.received)} fires"
    if crash:
        await runner.crash(task)
    else:
        await runner.stop_all()
    await first.teardown(drop=False)
    second = make()
    await second.setup()
    runner = Runner(second)

    def effects() -> list[tuple[str, float]]:
        # the store's record, not the processor's: a commit that went through just before the
        # crash is recorded although its processor was never told
        return [(tid, us(due)) for tid, due in rows(second, EFFECTS)]

    try:
        runner.start(proc, "second")
        limit = 12 * 0.3 + second.capabilities.redelivery_s + bound_s(second)
        assert await wait_until(lambda: len(effects()) >= 36, limit), f"{len(effects())} of 36 effects"
        for tid in ids:
            dues = sorted(due for t, due in effects() if t == tid)
            assert [round(d - t0, 3) for d in dues] == [round(0.3 * n, 3) for n in range(12)], (tid, dues)
        assert all(n == 1 for n in proc.delivered.values()), "an effect was delivered twice"
        assert not await second.export_armed(), "finished chains are still armed"
    finally:
        await runner.stop_all()
        await second.teardown(drop=True)


def tables_on_the_bill(s: Scheduler, theirs: Sequence[str]) -> None:
    """relations() lists every table in the run's schema, the library's (``theirs`` at least) and ours."""
    tables = {
        f"{s.ctx.schema}.{r[0]}"
        for r in rows(
            s, "SELECT relname FROM pg_class WHERE relnamespace = to_regnamespace(%s) AND relkind = 'r'", s.ctx.schema
        )
    }
    watched = set(s.relations())
    assert tables <= watched, f"not on the bill: {sorted(tables - watched)}"
    for t in (*theirs, "trigger", "trigger_state", "effects"):
        assert f"{s.ctx.schema}.{t}" in watched, t


async def teardown_leaves_nothing_running(s: Scheduler, application_prefix: str) -> None:
    """After a run (two loops, one stopped, one crashed) and teardown: no thread, no asyncio task
    and no database session of the backend is left (so no LISTEN either)."""
    threads = set(threading.enumerate())
    tasks = asyncio.all_tasks()
    runner = Runner(s)
    proc = RecordingProcessor()
    crashed = runner.start(proc, "w1")
    runner.start(proc, "w2")
    await s.arm([Timer(f"t-{i}", None) for i in range(20)])
    assert await wait_until(lambda: len(proc.delivered) >= 20, bound_s(s)), "never fired"
    await runner.crash(crashed)
    await runner.stop_all()
    await s.teardown(drop=True)
    await asyncio.sleep(0.2)
    extra_threads = [t for t in threading.enumerate() if t not in threads and t.is_alive()]
    assert not extra_threads, f"threads left running: {extra_threads}"
    extra_tasks = [t for t in asyncio.all_tasks() - tasks if not t.done() and t is not asyncio.current_task()]
    assert not extra_tasks, f"tasks left running: {extra_tasks}"

    def sessions() -> list[tuple]:
        with psycopg.connect(s.ctx.dsn) as conn:
            return conn.execute(
                "SELECT application_name, state FROM pg_stat_activity WHERE application_name LIKE %s",
                (f"{application_prefix}%",),
            ).fetchall()

    assert await wait_until(lambda: not sessions(), 5.0), f"sessions left open: {sessions()}"
