"""dbos_workflows beyond the shared promises: a worker crash mid-poll recovered by the next DBOS
executor, a move of a pending timer (both ways of waiting), DBOS's restart recovery across a
chain of restarted workflows, and the tables on the bill.

Real Postgres, DBOS's system tables in each test's own schema. Populations are tiny: every
workflow start and every fire is several system-database round trips, and the machine is shared.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass

import psycopg
import pytest

from schedulers.base import Fire, Outcome, Timer, us
from schedulers.dbos_workflows import DbosWorkflowsScheduler
from tests.conformance.helpers import RecordingProcessor, Runner, bound_s, wait_until

FAST = dict(DbosWorkflowsScheduler.conformance_options)


@dataclass
class Rearming(RecordingProcessor):
    """Records like :class:`RecordingProcessor` (``delivered``: effects recorded per key), and
    re-arms each fire ``every_s`` after its due time (fixed cadence) until an id has fired
    ``times`` times."""

    every_s: float = 0.3
    times: int = 12

    async def process(self, fires: Sequence[Fire]) -> list[Outcome]:
        await super().process(fires)
        seen = [len(self.of(f.timer_id)) for f in fires]
        return [
            Outcome(next_fire_at=f.due_at + self.every_s if n < self.times else None, effect=True)
            for f, n in zip(fires, seen)
        ]


async def started(make_ctx, **options) -> DbosWorkflowsScheduler:
    s = DbosWorkflowsScheduler(make_ctx(DbosWorkflowsScheduler), **{**FAST, **options})
    await s.setup()
    return s


def workflows_of(s: DbosWorkflowsScheduler, trigger_id: str) -> dict[str, str]:
    """DBOS's own record of a trigger's workflows: workflow id -> status."""
    with psycopg.connect(s.ctx.dsn) as conn:
        rows = conn.execute(
            psycopg.sql.SQL("SELECT workflow_uuid, status FROM {}.workflow_status WHERE workflow_uuid LIKE %s").format(
                psycopg.sql.Identifier(s.ctx.schema)
            ),
            (f"{trigger_id}@%",),
        ).fetchall()
    return dict(rows)


async def test_crash_mid_poll_is_recovered_by_the_next_executor(make_ctx):
    """The run loop is cancelled while its processor holds the polls: DBOS's executor dies with
    them (nothing committed, nothing released); the next executor finds the dead one's heartbeat
    silent, hands its workflows back to the queue, and replays them: each fire is delivered again
    as attempt 2, and each effect is recorded once."""
    s = await started(make_ctx)
    runner = Runner(s)
    try:
        dead = RecordingProcessor(hold=asyncio.Event())
        timers = [Timer(f"mid-{i}", time.time() - 0.1) for i in range(5)]
        ids = {t.id for t in timers}
        await s.arm(timers)
        task = runner.start(dead, "doomed")
        assert await wait_until(lambda: dead.ids() >= ids and dead.in_process > 0, bound_s(s)), "never polled"
        await runner.crash(task)
        heir = RecordingProcessor()
        runner.start(heir, "heir")
        limit = s.capabilities.redelivery_s + bound_s(s)
        assert await wait_until(lambda: {k[0] for k in heir.delivered} >= ids, limit), "not redelivered"
        assert not dead.delivered, "the crashed owner's polls committed"
        assert {r.attempt for r in heir.received} == {2}, f"redeliveries numbered {[r.attempt for r in heir.received]}"
        assert all(n == 1 for n in heir.delivered.values()), heir.delivered
        assert (await s.stats())["recovered_workflows"] >= len(timers)
        assert not await s.export_armed(), "finished timers are still armed"
    finally:
        await runner.stop_all()
        await s.teardown(drop=True)


@pytest.mark.parametrize("wait", ["sleep", "recv"])
async def test_move_of_a_pending_timer(make_ctx, wait):
    """A timer armed an hour out, its workflow waiting, is moved to half a second out: it fires
    once, at the new time. With ``wait=sleep`` a new holder workflow fires it (the old one sleeps
    on and will find itself replaced); with ``wait=recv`` arm()'s message wakes the same one."""
    s = await started(make_ctx, wait=wait, delayed_start_lead_s=0)  # the holder starts and waits at once
    runner = Runner(s)
    try:
        proc = RecordingProcessor()
        runner.start(proc, "w1")
        await s.arm([Timer("moved", time.time() + 3600)])
        first = dict(workflows_of(s, "moved"))
        assert await wait_until(lambda: "PENDING" in workflows_of(s, "moved").values(), bound_s(s)), (
            f"the trigger's workflow never started waiting: {workflows_of(s, 'moved')}"
        )
        moved_to = us(time.time() + 0.5)
        await s.arm([Timer("moved", moved_to)])
        assert await wait_until(lambda: ("moved", moved_to) in proc.delivered, 0.5 + bound_s(s)), "never fired"
        await asyncio.sleep(0.5)
        assert [round(r.due_at - moved_to, 3) for r in proc.of("moved")] == [0.0]
        assert proc.received[0].received_at >= moved_to - 0.1, "fired before its new time"
        holders = workflows_of(s, "moved")
        if wait == "sleep":
            assert len(holders) == 2 and set(first) < set(holders), holders
        else:
            assert set(holders) == set(first), f"recv: the same workflow fires the moved timer, got {holders}"
    finally:
        await runner.stop_all()
        await s.teardown(drop=True)


async def test_restart_recovery_resumes_from_checkpoints(make_ctx):
    """Three triggers re-arm every 0.3 s for twelve fires, their workflows restarting as fresh
    ones every three fires. Midway the run loop stops (DBOS stops, the workflows stay pending) and
    another starts (a new executor recovers the stopped one's workflows at once): every due time
    fires exactly once, in sequence, with no gap and no repeat, across the restarts and the
    recovery."""
    s = await started(make_ctx, fires_per_workflow=3)
    runner = Runner(s)
    try:
        proc = Rearming(every_s=0.3, times=12)
        t0 = us(time.time() + 0.3)
        ids = [f"chain-{i}" for i in range(3)]
        await s.arm([Timer(i, t0) for i in ids])
        runner.start(proc, "first")
        assert await wait_until(lambda: len(proc.received) >= 12, 12 * 0.3 + bound_s(s)), f"{len(proc.received)} fires"
        await runner.stop_all()
        runner.start(proc, "second")
        done = await wait_until(lambda: len(proc.delivered) >= 36, 12 * 0.3 + s.capabilities.redelivery_s + bound_s(s))
        assert done, f"{len(proc.delivered)} of 36 effects recorded"
        for tid in ids:
            dues = sorted(k[1] for k in proc.delivered if k[0] == tid)
            assert [round(d - t0, 3) for d in dues] == [round(0.3 * n, 3) for n in range(12)], (tid, dues)
        assert all(n == 1 for n in proc.delivered.values()), "an effect was recorded twice"
        assert (await s.stats())["recovered_workflows"] >= 1, "the second executor recovered nothing"
        # four generations of three fires each, every one returned (the last after its last commit)
        ended = await wait_until(lambda: set(workflows_of(s, "chain-0").values()) == {"SUCCESS"}, bound_s(s))
        chain = workflows_of(s, "chain-0")
        assert ended and len(chain) == 4, f"restarted workflows: {chain}"
    finally:
        await runner.stop_all()
        await s.teardown(drop=True)


async def test_every_table_in_the_schema_is_on_the_bill(make_ctx):
    """relations() lists every table DBOS's migrations and this design created in the run's
    schema (DBOS's operation_outputs, workflow_status, notifications, ... and ours)."""
    s = await started(make_ctx)
    try:
        with psycopg.connect(s.ctx.dsn) as conn:
            tables = {
                f"{s.ctx.schema}.{r[0]}"
                for r in conn.execute(
                    "SELECT relname FROM pg_class WHERE relnamespace = to_regnamespace(%s) AND relkind = 'r'",
                    (s.ctx.schema,),
                ).fetchall()
            }
        watched = set(s.relations())
        assert tables <= watched, f"not on the bill: {sorted(tables - watched)}"
        for t in ("workflow_status", "operation_outputs", "workflow_input", "trigger", "trigger_state"):
            assert f"{s.ctx.schema}.{t}" in watched
    finally:
        await s.teardown(drop=True)
