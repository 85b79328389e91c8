"""temporal_per_trigger beyond the shared promises: Continue-As-New, a really killed worker, a
move while a poll is in flight, and the Temporal cost gauges.

Real Postgres and the embedded Temporal dev server; every test uses its own schema, so its own
task queue and workflow ids. Timeouts are generous: this design costs the dev server a workflow
iteration per fire, and the machine is shared.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from schedulers.base import Fire, Outcome, StoreContext, Timer, us
from schedulers.temporal_per_trigger import TemporalPerTriggerScheduler
from tests.conformance.helpers import bound_s
from tests.conformance.promises import Runner, wait_until

REPO = Path(__file__).resolve().parents[2]
FAST = dict(TemporalPerTriggerScheduler.conformance_options)


@dataclass
class Rearming:
    """Re-arms each fire ``every_s`` after it until an id has fired ``times`` times (then the
    timer finishes); records (id, due, attempt, received_at) of every fire and the delivered
    effects."""

    every_s: float
    times: int
    fires: list[tuple[str, float, int, float]] = field(default_factory=list)
    delivered: dict[tuple[str, float], int] = field(default_factory=dict)

    async def process(self, fires: Sequence[Fire]) -> list[Outcome]:
        now = time.time()
        self.fires.extend((f.timer_id, f.due_at, f.attempt, now) for f in fires)
        seen = [sum(1 for r in self.fires if r[0] == f.timer_id) for f in fires]
        return [Outcome(next_fire_at=now + self.every_s if n < self.times else None, effect=True) for n in seen]

    def committed(self, fires: Sequence[Fire], delivered: Sequence[bool]) -> None:
        for f, d in zip(fires, delivered):
            if d:
                key = (f.timer_id, us(f.due_at))
                self.delivered[key] = self.delivered.get(key, 0) + 1

    def of(self, timer_id: str) -> list[tuple[str, float, int, float]]:
        return [r for r in self.fires if r[0] == timer_id]


async def started(ctx: StoreContext, **options) -> TemporalPerTriggerScheduler:
    s = TemporalPerTriggerScheduler(ctx, **{**FAST, **options})
    await s.setup()
    return s


async def runs_by_status(s: TemporalPerTriggerScheduler, trigger_id: str) -> dict[str, list[int]]:
    """Temporal's own record of a trigger's workflow runs: status -> history lengths."""
    out: dict[str, list[int]] = {}
    async for wf in s.client.list_workflows(f"WorkflowId = '{s.workflow_id(trigger_id)}'"):
        out.setdefault(wf.status.name, []).append(wf.history_length)
    return out


async def until_completed(s: TemporalPerTriggerScheduler, ids: Sequence[str]) -> dict[str, dict[str, list[int]]]:
    """Temporal's record of each trigger's workflow runs, read until every one has a completed run
    (its timer finished: no fire can follow it), or for the design's lag bound plus slack."""
    deadline = time.time() + bound_s(s)
    while True:
        runs = {tid: await runs_by_status(s, tid) for tid in ids}
        if all(r.get("COMPLETED") for r in runs.values()) or time.time() > deadline:
            return runs
        await asyncio.sleep(0.2)


async def check_continues_as_new_and_keeps_firing(s: TemporalPerTriggerScheduler, min_continued: int) -> None:
    """Three triggers re-arm every 0.3 s for ten fires; each (id, due) must fire and take
    effect exactly once across the Continue-As-New boundaries, and the gauges must count what
    Temporal records."""
    runner = Runner(s)
    try:
        proc = Rearming(every_s=0.3, times=10)
        runner.start(proc, "w1")
        t0 = time.time()
        ids = [f"can-{i}" for i in range(3)]
        await s.arm([Timer(tid, t0 + 0.2 + 0.1 * i) for i, tid in enumerate(ids)])
        ok = await wait_until(lambda: all(len(proc.of(tid)) >= 10 for tid in ids), 120)
        assert ok, f"fires per trigger: {[len(proc.of(tid)) for tid in ids]} of 10"
        # Temporal's record: every trigger's workflow continued as new, runs stayed near the
        # bound, and the last run completed when the timer finished (so no fire can follow).
        runs = await until_completed(s, ids)
        for tid in ids:
            dues = [due for _, due, _, _ in proc.of(tid)]
            assert len(dues) == 10 and len(set(dues)) == 10, f"{tid} fired {len(dues)} times for {len(set(dues))} dues"
        assert len(proc.delivered) == 30 and all(c == 1 for c in proc.delivered.values()), (
            f"effects: {len(proc.delivered)} keys, counts {sorted(set(proc.delivered.values()))}"
        )
        continued = sum(len(r.get("CONTINUED_AS_NEW", [])) for r in runs.values())
        for tid, r in runs.items():
            assert len(r.get("CONTINUED_AS_NEW", [])) >= min_continued, f"{tid}: runs {r}"
            assert len(r.get("COMPLETED", [])) == 1, f"{tid}: runs {r}"
        stats = await s.stats()
        assert stats["continue_as_new"] == continued, (stats, runs)
        assert stats["workflows_started"] == 3 and stats["signals_sent"] == 3, stats
        assert stats["workflows_completed"] == 3, stats
        assert stats["claimed_timers"] == 30 and stats["activities_executed"] == 30, stats
        assert stats["activities_per_fire"] == 1.0, stats
        # stats() is this process's counts without a query; cost_report() sums every process's
        # rows of temporal_costs after a flush: one process here, so the same figures
        assert await s.cost_report() == stats
        return runs
    finally:
        await runner.stop_all()
        await s.teardown(drop=True)


async def test_workflow_continues_as_new_and_keeps_firing(make_ctx):
    # About ten history events a fire: a bound of 30 continues as new every two or three fires.
    s = await started(make_ctx(TemporalPerTriggerScheduler), history_bound=30)
    runs = await check_continues_as_new_and_keeps_firing(s, min_continued=2)
    lengths = [n for r in runs.values() for n in r["CONTINUED_AS_NEW"]]
    assert all(30 <= n < 45 for n in lengths), f"history lengths at Continue-As-New: {lengths}"


async def test_workflow_continues_as_new_when_the_server_suggests_it(tmp_path, pg_dsn, schema):
    # A second dev server whose history limit suggests Continue-As-New at 40 events; the
    # scheduler's own bound is out of reach, so only the server's suggestion can trigger it.
    from harness.stack import TemporalDev, free_port

    dev = TemporalDev(
        home=tmp_path, name="temporal-can", dynamic_config={"limit.historyCount.suggestContinueAsNew": 40}
    )
    address, _ = await asyncio.to_thread(dev.start, free_port())  # its readiness probe runs its own loop
    try:
        ctx = StoreContext(dsn=pg_dsn, schema=schema, temporal_address=address, state_bytes=64)
        s = await started(ctx, history_bound=10**9)
        runs = await check_continues_as_new_and_keeps_firing(s, min_continued=1)
        lengths = [n for r in runs.values() for n in r["CONTINUED_AS_NEW"]]
        assert all(40 <= n < 60 for n in lengths), f"history lengths at Continue-As-New: {lengths}"
    finally:
        await asyncio.to_thread(dev.stop)


async def test_sandboxed_workflows_fire_too(make_ctx):
    # The default runs workflows unsandboxed; the SDK's sandbox must give the same behaviour
    # (the costs module is passed through, so its counts still reach stats()).
    s = await started(make_ctx(TemporalPerTriggerScheduler), sandbox=True)
    runner = Runner(s)
    try:
        proc = Rearming(every_s=0.2, times=2)
        runner.start(proc, "w1")
        await s.arm([Timer("boxed", None)])
        assert await wait_until(lambda: len(proc.of("boxed")) >= 2, 60), f"fires: {proc.fires}"
        stats = await s.stats()
        assert stats["claimed_timers"] == 2 and stats["activities_executed"] == 2, stats
    finally:
        await runner.stop_all()
        await s.teardown(drop=True)


async def test_setup_and_teardown_are_idempotent_and_teardown_ends_the_workflows(make_ctx):
    s = TemporalPerTriggerScheduler(make_ctx(TemporalPerTriggerScheduler), **FAST)
    await s.setup()
    await s.setup()
    t0 = time.time()
    timers = [Timer(f"idle-{i}", us(t0 + 3600 + i), tenant_id="t1") for i in range(3)]
    await s.arm(timers)
    armed = sorted((t.id, t.fire_at, t.tenant_id) for t in await s.export_armed())
    assert armed == [(t.id, t.fire_at, "t1") for t in timers], armed
    await s.teardown(drop=True)
    await s.teardown(drop=True)
    assert s.left_running == 0
    probe = TemporalPerTriggerScheduler(make_ctx(TemporalPerTriggerScheduler), **FAST)
    await probe.setup()  # the same schema and workflow ids
    try:
        statuses = {
            (await probe.client.get_workflow_handle(probe.workflow_id(t.id)).describe()).status.name for t in timers
        }  # describe reads the execution itself, not eventual visibility
        assert statuses == {"TERMINATED"}, statuses
        assert await probe.export_armed() == []
    finally:
        await probe.teardown(drop=True)


async def test_export_leaves_out_an_arm_whose_signal_never_reached_temporal(make_ctx):
    # arm() writes the row, then signals. A row written without its signal (Temporal down at
    # that moment) has no workflow to fire it: migration reconcile must not count it as armed.
    from schedulers.pg import upsert_armed

    s = await started(make_ctx(TemporalPerTriggerScheduler))
    runner = Runner(s)
    try:
        t0 = us(time.time())
        await s.arm([Timer("signalled", t0 + 3600)])
        await upsert_armed(s.pool, s.q, [Timer("row-only", t0 + 3600)], s.ctx.state_bytes)  # no signal
        assert [t.id for t in await s.export_armed()] == ["signalled"]
        await s.arm([Timer("row-only", t0 + 1800)])  # the repair: a real arm
        assert sorted(t.id for t in await s.export_armed()) == ["row-only", "signalled"]
        # disarm ends the workflow now (its signal), not an hour from now at its fire time
        assert await s.disarm(["signalled", "never-armed"]) == 1
        assert [(t.id, t.fire_at) for t in await s.export_armed()] == [("row-only", t0 + 1800)]
        proc = Rearming(every_s=1.0, times=1)
        runner.start(proc, "w1")
        handle = s.client.get_workflow_handle(s.workflow_id("signalled"))
        deadline = time.time() + s.capabilities.max_lag_s
        while (await handle.describe()).status.name == "RUNNING" and time.time() < deadline:
            await asyncio.sleep(0.2)
        assert (await handle.describe()).status.name == "COMPLETED", "the disarmed trigger's workflow still runs"
        assert proc.fires == [], f"a disarmed or far timer fired: {proc.fires}"
    finally:
        await runner.stop_all()
        await s.teardown(drop=True)


@dataclass
class Gated(Rearming):
    """The first fire of each id waits for ``gate``; it then asks for a re-arm ``every_s`` later."""

    gate: asyncio.Event = field(default_factory=asyncio.Event)
    waiting: int = 0

    async def process(self, fires: Sequence[Fire]) -> list[Outcome]:
        first = [not self.of(f.timer_id) for f in fires]
        out = await super().process(fires)
        if any(first):
            self.waiting += 1
            await self.gate.wait()
        return out


async def test_move_while_a_poll_is_in_flight_wins(make_ctx):
    s = await started(make_ctx(TemporalPerTriggerScheduler))
    runner = Runner(s)
    try:
        # The poll of the first fire asks to re-arm 0.3 s after it finishes; meanwhile the
        # trigger is moved to +3 s. Only the move may fire: the poll's re-arm is fenced out.
        proc = Gated(every_s=0.3, times=2)
        runner.start(proc, "w1")
        t0 = time.time()
        await s.arm([Timer("mover", t0)])
        assert await wait_until(lambda: proc.waiting == 1, 60), "the first poll never started"
        moved_to = us(time.time() + 3.0)
        await s.arm([Timer("mover", moved_to)])
        proc.gate.set()
        assert await wait_until(lambda: len(proc.of("mover")) >= 2, 60), f"the moved fire never came: {proc.fires}"
        runs = await until_completed(s, ["mover"])  # finished after its second fire: nothing follows
        assert runs["mover"].get("COMPLETED"), f"the mover's workflow did not complete: {runs}"
        dues = [due for _, due, _, _ in proc.of("mover")]
        assert dues == [us(t0), moved_to], f"fired for {[round(d - t0, 3) for d in dues]}; expected [0, moved]"
        assert proc.of("mover")[1][3] >= moved_to - 0.1, "the moved fire came before its new fire time"
        # The in-flight poll committed nothing (its trigger had moved); the moved fire did.
        assert proc.delivered == {("mover", moved_to): 1}, proc.delivered
        assert (await s.export_armed()) == [], "the timer should be finished after its second fire"
    finally:
        await runner.stop_all()
        await s.teardown(drop=True)


KILLED_WORKER = textwrap.dedent(
    """
    import asyncio, sys, time
    from schedulers.base import StoreContext
    from schedulers.temporal_per_trigger import TemporalPerTriggerScheduler

    class Hang:
        async def process(self, fires):
            for f in fires:
                print("FIRED", time.time(), f.timer_id, f.attempt, flush=True)
            await asyncio.Event().wait()  # never answers: killed mid-activity

        def committed(self, fires, delivered):
            pass

    async def main():
        ctx = StoreContext(dsn=sys.argv[1], schema=sys.argv[2], temporal_address=sys.argv[3], state_bytes=64)
        s = TemporalPerTriggerScheduler(ctx, **eval(sys.argv[4]))
        await s.setup()
        await s.run({"poll": Hang()}, asyncio.Event(), worker_id="doomed")

    asyncio.run(main())
    """
)


async def test_worker_killed_mid_activity_redelivers(pg_dsn, temporal_address, schema):
    options = {**FAST, "lease_s": 2.0}
    ctx = StoreContext(dsn=pg_dsn, schema=schema, temporal_address=temporal_address, state_bytes=64)
    s = await started(ctx, **options)
    ids = [f"kill-{i}" for i in range(5)]
    child = subprocess.Popen(
        [sys.executable, "-c", KILLED_WORKER, pg_dsn, schema, temporal_address, repr(options)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    runner = Runner(s)
    try:
        await s.arm([Timer(tid, time.time() - 0.1) for tid in ids])
        fired: dict[str, float] = {}
        while set(fired) != set(ids):
            line = await asyncio.wait_for(asyncio.to_thread(child.stdout.readline), 60.0)
            assert line.startswith("FIRED"), f"the doomed worker printed {line!r}"
            _, at, tid, attempt = line.split()
            assert attempt == "1", f"{tid} reached the doomed worker as attempt {attempt}"
            fired[tid] = float(at)
        os.kill(child.pid, signal.SIGKILL)  # a real crash: no failure is reported to Temporal
        child.wait(10)
        heir = Rearming(every_s=0.3, times=2)  # fires the redelivery, re-arms once
        runner.start(heir, "heir")
        limit = s.capabilities.redelivery_s + s.capabilities.max_lag_s
        ok = await wait_until(lambda: all(len(heir.of(tid)) >= 2 for tid in ids), limit)
        assert ok, f"after the kill the heir fired {[len(heir.of(tid)) for tid in ids]} of 2 per trigger"
        for tid in ids:
            redelivered = heir.of(tid)[0]
            assert redelivered[2] == 2, f"{tid}: the redelivery came as attempt {redelivered[2]}"
            # The activity's heartbeat timeout is the lease: nothing comes back before it lapsed.
            early_s = fired[tid] + options["lease_s"] - redelivered[3]
            assert early_s < 0.1, f"{tid} came back {early_s:.2f}s before its heartbeat timeout lapsed"
        runs = await until_completed(s, ids)  # every timer finished after its second fire
        assert all(r.get("COMPLETED") for r in runs.values()), f"workflows not completed: {runs}"
        assert all(len(heir.of(tid)) == 2 for tid in ids), "a timer fired more than twice"
        assert len(heir.delivered) == 10 and all(c == 1 for c in heir.delivered.values()), heir.delivered
        stats = await s.stats()
        assert stats["activities_executed"] >= 10, stats  # the heir's own attempts
    finally:
        if child.poll() is None:
            child.kill()
        await runner.stop_all()
        await s.teardown(drop=True)
