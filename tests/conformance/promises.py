"""The promises of docs/design.md, written against the Scheduler interface only.

Each check takes a factory that makes a fresh, set-up scheduler and raises ``AssertionError``
when the promise is broken. ``@promise`` registers it, naming the capability a backend must
declare for it to apply (``requires``); ``test_promises.py`` runs every registered check against
every registered scheduler, and ``test_suite_catches_broken.py`` shows they fail on broken ones.
Nothing here may ask which backend it is talking to: capabilities are the only switch. The
tools the checks are written with are in ``helpers.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, fields

from schedulers.base import Capabilities, Timer, us
from tests.conformance.helpers import (
    CLOCK_TOLERANCE_S,
    LAG_SLACK_S,
    Factory,
    HalfThenHangs,
    HoldsFirstBatches,
    RecordingProcessor,
    Runner,
    bound_s,
    harmless,
    running,
    until_exported,
    wait_until,
)

Check = Callable[[Factory], Awaitable[None]]


@dataclass(frozen=True)
class Promise:
    check: Check
    requires: str | None  # a Capabilities field that must be True for the promise to apply

    @property
    def name(self) -> str:
        return self.check.__name__.removeprefix("check_")

    def applies_to(self, capabilities: Capabilities) -> bool:
        return self.requires is None or bool(getattr(capabilities, self.requires))


PROMISES: list[Promise] = []  # in the order they are defined below


def promise(requires: str | None = None) -> Callable[[Check], Check]:
    """Register a check with the suite; ``requires`` names the capability it needs."""
    if requires is not None and requires not in {f.name for f in fields(Capabilities)}:
        raise ValueError(f"unknown capability {requires!r}")

    def register(check: Check) -> Check:
        PROMISES.append(Promise(check, requires))
        return check

    return register


# -- 1. never early -----------------------------------------------------------------------


@promise()
async def check_never_fires_early(factory: Factory) -> None:
    async with running(factory) as (s, runner):
        proc = RecordingProcessor()
        now = time.time()
        timers = [Timer(f"early-{i}", now + 0.5 + 0.05 * i, tenant_id=f"t{i % 3}") for i in range(40)]
        await s.arm(timers)
        runner.start(proc, "w1")
        ok = await wait_until(lambda: proc.ids() >= {t.id for t in timers}, 2.5 + bound_s(s))
        assert ok, f"only {len(proc.ids())} of {len(timers)} timers fired"
        want = {t.id: t.fire_at for t in timers}
        early = [r for r in proc.received if r.received_at < want[r.timer_id] - CLOCK_TOLERANCE_S]
        assert not early, (
            f"{len(early)} fires came early, e.g. {early[0].timer_id} "
            f"{want[early[0].timer_id] - early[0].received_at:.3f}s before fire_at"
        )
        wrong_due = [r for r in proc.received if abs(r.due_at - want[r.timer_id]) > 0.001]
        assert not wrong_due, f"due_at differs from the armed fire_at for {wrong_due[0].timer_id}"


# -- 2. every timer fires, within the declared bound --------------------------------------


@promise()
async def check_every_timer_fires_within_max_lag(factory: Factory) -> None:
    async with running(factory) as (s, runner):
        proc = RecordingProcessor()
        now = time.time()
        timers = [Timer(f"all-{i}", now + 0.2 + (i % 20) * 0.1, tenant_id=f"t{i % 7}") for i in range(300)]
        runner.start(proc, "w1")
        await s.arm(timers)
        armed_at = time.time()
        ok = await wait_until(lambda: proc.ids() >= {t.id for t in timers}, 2.2 + bound_s(s))
        missing = {t.id for t in timers} - proc.ids()
        assert ok, f"{len(missing)} of {len(timers)} timers never fired, e.g. {sorted(missing)[:3]}"
        # schedulers.base: every delivery came from a claim, and the backend counts its claims
        assert s.claimed_timers >= len(proc.received), (
            f"claimed_timers is {s.claimed_timers} after {len(proc.received)} deliveries: "
            "every delivered timer was claimed"
        )
        want = {t.id: t.fire_at for t in timers}
        limit = bound_s(s)  # max_lag_s + LAG_SLACK_S
        late = [
            (r.timer_id, r.received_at - max(want[r.timer_id], armed_at))
            for r in proc.received
            if r.received_at - max(want[r.timer_id], armed_at) > limit
        ]
        assert not late, f"{len(late)} fires later than max_lag {s.capabilities.max_lag_s}s + slack, e.g. {late[0]}"


# -- 3. fire_at = None is due now ---------------------------------------------------------


@promise()
async def check_none_fire_at_is_due_now(factory: Factory) -> None:
    async with running(factory) as (s, runner):
        proc = RecordingProcessor()
        runner.start(proc, "w1")
        t0 = time.time()
        await s.arm([Timer("now-0", None), Timer("now-1", None, tenant_id="t1")])
        ok = await wait_until(lambda: proc.ids() >= {"now-0", "now-1"}, bound_s(s))
        assert ok, "a timer armed with fire_at=None never fired: None must mean due now"
        for r in proc.received:
            assert r.due_at >= t0 - 1.0, f"due_at {r.due_at} of a fire_at=None timer is not its arm time"
            assert r.received_at - t0 <= bound_s(s), f"fire_at=None fired {r.received_at - t0:.2f}s after arming"


# -- 4. re-arming moves --------------------------------------------------------------------


@promise()
async def check_rearm_moves_timer(factory: Factory) -> None:
    async with running(factory) as (s, runner):
        proc = RecordingProcessor()
        now = time.time()
        # later: armed at +1s, moved to +3s; earlier: armed at +1h, moved to +0.5s
        await s.arm([Timer("later", now + 1.0), Timer("earlier", now + 3600)])
        await s.arm([Timer("later", now + 3.0), Timer("earlier", now + 0.5)])
        runner.start(proc, "w1")
        ok = await wait_until(lambda: proc.ids() >= {"later", "earlier"}, 3.0 + bound_s(s))
        assert ok, f"moved timers did not fire: got {sorted(proc.ids())}"
        await asyncio.sleep(1.0)  # room for a stale copy to show up
        later = proc.of("later")
        assert all(abs(r.due_at - (now + 3.0)) < 0.01 for r in later), (
            f"'later' fired for a fire time it was moved away from: {[round(r.due_at - now, 3) for r in later]}"
        )
        assert all(r.received_at >= now + 3.0 - CLOCK_TOLERANCE_S for r in later), "'later' fired at its old time"
        earlier = proc.of("earlier")
        assert all(abs(r.due_at - (now + 0.5)) < 0.01 for r in earlier), "'earlier' did not take its new fire time"


@promise()
async def check_move_during_an_inflight_batch_wins_over_its_rearm(factory: Factory) -> None:
    async with running(factory) as (s, runner):
        # The first batches are held, then re-arm their timers an hour out; while "moved" is in
        # flight it is moved to +1 s. The held batch's commit must not overwrite the move: "moved"
        # fires at its new time (a first delivery of that fire time), and that fire, which
        # finishes it, is the last word; "kept", not moved, takes the batch's re-arm.
        proc = HoldsFirstBatches(rearm_in_s=3600.0)
        await s.arm([Timer("moved", None), Timer("kept", None, tenant_id="t1")])
        runner.start(proc, "w1")
        ok = await wait_until(lambda: proc.ids() >= {"moved", "kept"}, bound_s(s))
        assert ok, f"the batch was not claimed: got {sorted(proc.ids())}"
        moved_to = us(time.time() + 1.0)
        await s.arm([Timer("moved", moved_to)])  # moved while its old fire is being polled
        proc.release.set()
        ok = await wait_until(lambda: len(proc.of("moved")) >= 2, 1.0 + bound_s(s))
        assert ok, "the moved timer did not fire at its new time"
        again = proc.of("moved")[1]
        assert abs(again.due_at - moved_to) < 0.001, (
            f"the in-flight batch's re-arm overwrote the move: fired due {again.due_at - moved_to:+.3f}s from the move"
        )
        assert again.received_at >= moved_to - CLOCK_TOLERANCE_S, "the moved timer fired before its new time"
        assert again.attempt == 1, f"the first fire of a new fire time is attempt 1, got {again.attempt}"
        ok = await wait_until(lambda: ("moved", us(moved_to)) in proc.delivered, bound_s(s))
        assert ok, "the moved timer's fire was never committed"
        ok = await wait_until(lambda: any(tid == "kept" for tid, _ in proc.delivered), bound_s(s))
        assert ok, "the held batch never committed"
        await asyncio.sleep(0.5)  # room for a stale copy to show up
        assert len(proc.of("moved")) == 2, f"'moved' fired {len(proc.of('moved'))} times, expected 2"
        # export_armed may briefly miss a timer between its commit and its re-arm (temporal_shards):
        # read until it settles on the answer, or time runs out
        deadline = time.time() + bound_s(s)
        while True:
            armed = {t.id: t.fire_at for t in await s.export_armed()}
            if ("kept" in armed and "moved" not in armed) or time.time() > deadline:
                break
            await asyncio.sleep(0.2)
        assert "moved" not in armed, f"the in-flight batch's re-arm (+1 h) survived the move: {armed}"
        assert "kept" in armed and armed["kept"] > time.time() + 3000, (
            f"the unmoved timer did not take the batch's re-arm: {armed}"
        )


@promise()
async def check_moved_long_horizon_timer_fires_at_its_new_time_only(factory: Factory) -> None:
    """Timers armed weeks ahead (callbacks, reminders: the armed population that only grows), some
    of them moved to a second or two from now while a runner runs: each moved one fires once, at
    its new time; the others stay armed at their old time and do not fire."""
    async with running(factory) as (s, runner):
        proc = RecordingProcessor()  # finishes every timer it receives
        runner.start(proc, "w1")
        now = time.time()
        far = [Timer(f"horizon-{i}", us(now + 30 * 86400 + i * 86400), tenant_id=f"t{i % 3}") for i in range(20)]
        await s.arm(far)
        moved = far[::4]  # 5 of the 20
        moved_at = time.time()
        moved_to = {t.id: us(moved_at + 1.0 + 0.2 * k) for k, t in enumerate(moved)}
        await s.arm([Timer(t.id, moved_to[t.id], t.type, t.tenant_id, t.priority) for t in moved])
        armed = {t.id: t.fire_at for t in await s.export_armed()}
        stale = {tid: round(armed[tid] - now) for tid in moved_to if tid in armed and armed[tid] != moved_to[tid]}
        assert not stale, f"export_armed lists moved timers at a fire time they were moved away from (s): {stale}"
        ok = await wait_until(lambda: proc.ids() >= set(moved_to), 2.0 + bound_s(s))
        missing = set(moved_to) - proc.ids()
        assert ok, f"{len(missing)} long-horizon timers moved to now + 1-2 s never fired: {sorted(missing)}"
        await asyncio.sleep(1.0)  # the settle period: room for a second fire or a stray old copy
        for tid, due in moved_to.items():
            fires = proc.of(tid)
            assert len(fires) == 1, f"{tid} fired {len(fires)} times after its move, expected once"
            assert abs(fires[0].due_at - due) < 0.001, (
                f"{tid} fired due {fires[0].due_at - due:+.3f}s from its new fire time: not the move's time"
            )
            assert fires[0].received_at >= due - CLOCK_TOLERANCE_S, f"{tid} fired before its new fire time"
        strays = proc.ids() - set(moved_to)
        assert not strays, f"long-horizon timers that were not moved fired: {sorted(strays)}"
        want = {t.id: t.fire_at for t in far if t.id not in moved_to}
        got = await until_exported(s, want, bound_s(s))
        assert set(got) == set(want), (
            f"after the moved timers fired, export_armed lists {sorted(set(got) - set(want))} that should not "
            f"be armed and misses {sorted(set(want) - set(got))}"
        )
        wrong = {k: round(got[k].fire_at - v, 3) for k, v in want.items() if abs(got[k].fire_at - v) >= 0.001}
        assert not wrong, f"unmoved long-horizon timers changed fire time (s): {wrong}"


# -- 5. leases ----------------------------------------------------------------------------


@promise()
async def check_crashed_owner_timers_are_redelivered(factory: Factory) -> None:
    async with running(factory) as (s, runner):
        dead = RecordingProcessor(hold=asyncio.Event())  # never answers: the owner dies mid-batch
        timers = [Timer(f"crash-{i}", time.time() - 0.1) for i in range(10)]
        await s.arm(timers)
        task = runner.start(dead, "doomed")
        ok = await wait_until(lambda: dead.ids() >= {t.id for t in timers}, bound_s(s))
        assert ok, "the first owner never received the timers"
        claimed_once = s.claimed_timers
        assert claimed_once >= len(timers), f"claimed_timers is {claimed_once} after {len(timers)} timers were claimed"
        # the heir runs before the crash: a timer handed to it while its owner held the lease
        # shows, whether the owner was alive or had just crashed
        heir = RecordingProcessor()
        runner.start(heir, "heir")
        await runner.crash(task)
        limit = s.capabilities.redelivery_s + bound_s(s)
        ok = await wait_until(lambda: heir.ids() >= {t.id for t in timers}, limit)
        lost = {t.id for t in timers} - heir.ids()
        assert ok, f"{len(lost)} timers of a crashed owner were not redelivered within {limit:.1f}s"
        lease = s.capabilities.lease_s
        if lease is not None:  # a crash releases nothing: the timers come back when the lease lapses
            claimed_at = {r.timer_id: r.received_at for r in dead.received}
            early = {
                r.timer_id: round(r.received_at - claimed_at[r.timer_id], 2)
                for r in heir.received
                if r.received_at - claimed_at[r.timer_id] < lease - LAG_SLACK_S
            }
            assert not early, (
                f"{len(early)} timers were redelivered before their {lease:g} s lease lapsed "
                f"(s after the first owner got them): {dict(list(early.items())[:3])}"
            )
        # schedulers.base: a re-claim after the lease lapsed is a claim too (redelivery shows as claims)
        assert s.claimed_timers >= claimed_once + len(timers), (
            f"claimed_timers went from {claimed_once} to {s.claimed_timers} while {len(timers)} timers were re-claimed"
        )


@promise()
async def check_owner_crashed_midway_through_a_stream_loses_nothing(factory: Factory) -> None:
    """A processor that hands outcomes back as its polls finish and dies with half of
    them out: whether the design commits per group or per batch, every timer's effect is recorded
    exactly once and none is left armed or lost."""
    async with running(factory) as (s, runner):
        dying = HalfThenHangs(hold=asyncio.Event())
        timers = [Timer(f"stream-{i}", time.time() - 0.1) for i in range(10)]
        ids = {t.id for t in timers}
        await s.arm(timers)
        task = runner.start(dying, "dying")
        ok = await wait_until(lambda: dying.ids() >= ids and (dying.in_process > 0), bound_s(s))
        assert ok, "the first owner never received the timers"
        await asyncio.sleep(0.5)  # a design that commits per group has committed the first halves
        await runner.crash(task)
        heir = RecordingProcessor()
        runner.start(heir, "heir")
        limit = s.capabilities.redelivery_s + bound_s(s)
        keys = {(t.id, us(t.fire_at)) for t in timers}
        ok = await wait_until(lambda: set(dying.delivered) | set(heir.delivered) >= keys, limit)
        missing = keys - set(dying.delivered) - set(heir.delivered)
        assert ok, f"{len(missing)} effects of a crashed streaming owner were never recorded within {limit:.1f}s"
        await asyncio.sleep(0.5)
        twice = {k for k in keys if dying.delivered.get(k, 0) + heir.delivered.get(k, 0) != 1}
        assert not twice, f"{len(twice)} effects recorded more than once: {sorted(twice)[:3]}"
        # redelivered fires are only those whose group never committed (a design that commits per
        # batch redelivers all of them): nothing whose effect the dying owner recorded comes back
        committed = {tid for tid, _ in dying.delivered}
        again = heir.ids() & committed
        assert not again, f"{len(again)} timers redelivered after their effects were committed: {sorted(again)[:3]}"
        left = await until_exported(s, {}, bound_s(s))
        assert not left, f"{len(left)} finished timers are still armed: {sorted(left)[:3]}"


@promise(requires="heartbeat_leases")
async def check_slow_owner_keeps_timers(factory: Factory) -> None:
    async with running(factory) as (s, runner):
        slow_for = s.capabilities.redelivery_s * 2.5
        slow = RecordingProcessor(hold_s=slow_for)
        timers = [Timer(f"slow-{i}", time.time() - 0.1) for i in range(10)]
        await s.arm(timers)
        runner.start(slow, "slow")
        ok = await wait_until(lambda: slow.ids() >= {t.id for t in timers}, bound_s(s))
        assert ok, "the slow owner never received the timers"
        rival = RecordingProcessor()
        runner.start(rival, "rival")
        await wait_until(lambda: slow.in_process == 0 and len(slow.delivered) >= len(timers), slow_for + bound_s(s))
        await asyncio.sleep(min(2.0, s.capabilities.redelivery_s))
        stolen = rival.ids() & {t.id for t in timers}
        assert not stolen, f"{len(stolen)} timers were taken from a slow owner that was still heartbeating"
        # nor handed to it a second time while the first delivery was still in its hands
        again = [t.id for t in timers if len(slow.of(t.id)) > 1]
        assert not again, f"{len(again)} timers of a slow, heartbeating owner were claimed again: {again[:3]}"
        assert len(slow.delivered) == len(timers), "the slow owner's commit did not go through"


# -- what the run's loss accounting asks: export_armed is what the backend still holds ------


@promise()
async def check_export_armed_holds_what_will_still_fire(factory: Factory) -> None:
    """schedulers.base: ``export_armed`` returns every timer the backend will still fire (armed,
    due, or claimed and in flight) at its fire time, and not a timer that fired and finished. The
    run calls an undelivered fire lost when the backend does not hold it, so an export that
    forgets in-flight timers would turn a backlog into losses."""
    async with running(factory) as (s, runner):
        # The runner is up before anything is armed: a design whose store answers through its own
        # workers (temporal_shards' shards) can only say what it holds while a worker runs.
        gate = asyncio.Event()
        proc = RecordingProcessor(hold=gate)  # the due timers stay in flight until the gate opens
        runner.start(proc, "w1")
        now = time.time()
        later = Timer("held-later", us(now + 3600))
        due = [Timer(f"held-due-{i}", us(now - 0.1), tenant_id=f"t{i}") for i in range(3)]
        await s.arm([later, *due])

        def at(timers: list[Timer]) -> dict[str, float | None]:
            return {t.id: t.fire_at for t in timers}

        # armed, due, or already claimed and held at the gate: every one is still held
        held = at(await s.export_armed())
        want = {t.id: t.fire_at for t in (later, *due)}
        for tid, fire_at in want.items():
            assert tid in held, f"{tid} was armed and has not fired, but export_armed does not hold it"
            assert abs(held[tid] - fire_at) < 0.001, f"{tid} is held at {held[tid]}, armed at {fire_at}"
        ok = await wait_until(lambda: proc.ids() >= {t.id for t in due}, bound_s(s))
        assert ok, "the due timers were never delivered"
        held = at(await s.export_armed())
        for t in due:
            assert t.id in held and abs(held[t.id] - t.fire_at) < 0.001, (
                f"{t.id} is claimed and in flight, but export_armed does not hold it at its due time"
            )
        gate.set()
        keys = {(t.id, us(t.fire_at)) for t in due}
        ok = await wait_until(lambda: keys <= set(proc.delivered), bound_s(s))
        assert ok, "the in-flight batch never committed"
        held = at(await s.export_armed())
        fired = [t.id for t in due if t.id in held]
        assert not fired, f"{fired} fired and finished, but export_armed still holds them"
        assert "held-later" in held, "a timer not yet due vanished from export_armed"


# -- 6. duplicate fires never make duplicate effects --------------------------------------


@promise()
async def check_duplicate_fire_has_no_duplicate_effect(factory: Factory) -> None:
    async with running(factory) as (s, runner):
        proc = RecordingProcessor()
        due = us(time.time() - 0.5)
        runner.start(proc, "w1")
        await s.arm([Timer("dup", due)])
        ok = await wait_until(lambda: len(proc.of("dup")) >= 1 and proc.delivered, bound_s(s))
        assert ok, "the timer did not fire"
        # Arming the same id at the same due time again makes a second fire of the same
        # (trigger, due_at): at-least-once allows it, the effect key must absorb it.
        await s.arm([Timer("dup", due)])
        ok = await wait_until(lambda: len(proc.of("dup")) >= 2, bound_s(s))
        assert ok, "re-arming at the same due time did not fire again"
        await asyncio.sleep(0.5)
        assert proc.delivered.get(("dup", due), 0) == 1, (
            f"effect for (dup, {due}) delivered {proc.delivered.get(('dup', due), 0)} times; must be exactly 1"
        )


# -- 7. per-tenant fairness ----------------------------------------------------------------


@promise(requires="per_tenant_fairness")
async def check_big_tenant_cannot_starve_others(factory: Factory) -> None:
    async with running(factory) as (s, runner):
        proc = RecordingProcessor()
        past = time.time() - 5
        big = [Timer(f"big-{i}", past + i * 1e-4, tenant_id="big") for i in range(2000)]
        small = [Timer(f"small-{k}-{i}", past + 1, tenant_id=f"small{k}") for k in range(5) for i in range(3)]
        await s.arm(big + small)
        runner.start(proc, "w1")
        ok = await wait_until(lambda: proc.first_claim(), bound_s(s))
        assert ok, "nothing was claimed"
        first = {r.timer_id for r in proc.first_claim()}
        starved = {t.id for t in small} - first
        assert not starved, (
            f"{len(starved)} of {len(small)} small-tenant timers were not in the first batch "
            f"({len(first)} fires) behind a 2,000-timer tenant"
        )


# -- more than one runner ---------------------------------------------------------------


@promise(requires="multi_runner")
async def check_two_runners_share_one_store(factory: Factory) -> None:
    async with running(factory) as (s, runner):
        a, b = RecordingProcessor(hold_s=0.05), RecordingProcessor(hold_s=0.05)
        runner.start(a, "a")
        runner.start(b, "b")
        now = time.time()
        timers = [Timer(f"pair-{i}", now + (i % 10) * 0.1, tenant_id=f"t{i % 4}") for i in range(400)]
        await s.arm(timers)
        ok = await wait_until(lambda: (a.ids() | b.ids()) >= {t.id for t in timers}, 1.0 + bound_s(s))
        assert ok, f"{len({t.id for t in timers} - (a.ids() | b.ids()))} timers never fired with two runners"
        both = a.ids() & b.ids()
        assert not both, (
            f"{len(both)} timers were delivered to both runners in normal operation, e.g. {sorted(both)[:3]}"
        )


# -- what migration relies on: export and disarm ----------------------------------------------


@promise()
async def check_export_lists_what_will_fire(factory: Factory) -> None:
    """``export_armed`` is what backfill copies and reconcile compares: every armed timer with the
    fire time it will fire at (after a move, the new one), and nothing that already finished."""
    async with running(factory) as (s, runner):
        proc = RecordingProcessor()  # finishes every timer it receives
        runner.start(proc, "w1")
        now = time.time()
        soon = [Timer(f"exp-soon-{i}", now + 0.3, tenant_id=f"t{i % 3}") for i in range(5)]
        far = [Timer(f"exp-far-{i}", now + 40 * 86400 + i, type="poll", tenant_id="t1", priority=i) for i in range(5)]
        await s.arm(soon + far)
        moved_to = now + 45 * 86400
        await s.arm([Timer("exp-far-0", moved_to, type="poll", tenant_id="t1", priority=0)])
        ok = await wait_until(lambda: proc.ids() >= {t.id for t in soon}, 0.3 + bound_s(s))
        assert ok, f"only {len(proc.ids() & {t.id for t in soon})} of {len(soon)} due timers fired"
        want = {t.id: t.fire_at for t in far} | {"exp-far-0": moved_to}
        got = await until_exported(s, want, bound_s(s))
        assert set(got) == set(want), (
            f"export_armed lists {sorted(set(got) - set(want))[:3]} that should not be armed and misses "
            f"{sorted(set(want) - set(got))[:3]}"
        )
        wrong = {
            k: (round(got[k].fire_at - now), round(v - now))
            for k, v in want.items()
            if abs(got[k].fire_at - v) >= 0.001
        }
        assert not wrong, f"export_armed gives fire times other than the latest arm (s from now, got vs want): {wrong}"
        for t in far[1:]:
            e = got[t.id]
            assert (e.type, e.tenant_id, e.priority) == (t.type, t.tenant_id, t.priority), f"{t.id} exported as {e}"


@promise()
async def check_disarm_removes_timers(factory: Factory) -> None:
    """``disarm`` (reconcile --repair removes what the source store does not have): a disarmed
    timer never fires and is no longer exported; the others are untouched."""
    async with running(factory) as (s, runner):
        proc = RecordingProcessor()
        now = time.time()
        timers = [Timer(f"dis-{i}", now + 0.8, tenant_id=f"t{i % 2}") for i in range(6)]
        far = [Timer(f"dis-far-{i}", now + 40 * 86400) for i in range(3)]
        await s.arm(timers + far)
        gone = ["dis-0", "dis-1", "dis-2", "dis-far-0"]
        removed = await s.disarm(gone + ["dis-never-armed"])
        assert removed == len(gone), f"disarm reported {removed} armed timers removed, expected {len(gone)}"
        runner.start(proc, "w1")
        kept = {"dis-3", "dis-4", "dis-5"}
        ok = await wait_until(lambda: proc.ids() >= kept, 0.8 + bound_s(s))
        assert ok, f"timers next to disarmed ones did not fire: got {sorted(proc.ids())}"
        await asyncio.sleep(1.0)  # room for a stale copy of a disarmed timer to fire
        fired = proc.ids() & set(gone)
        assert not fired, f"disarmed timers fired: {sorted(fired)}"
        want = {t.id: t.fire_at for t in far[1:]}
        got = await until_exported(s, want, bound_s(s))
        assert set(got) == set(want), f"after disarm, export_armed lists {sorted(got)}; expected {sorted(want)}"


# -- setup and teardown are idempotent ----------------------------------------------------------


@promise()
async def check_setup_and_teardown_are_idempotent(factory: Factory) -> None:
    s = await factory()
    runners: list[Runner] = []

    async def cleanup() -> None:
        for r in runners:
            await r.stop_all()
        await s.teardown(drop=True)

    try:
        now = time.time()
        kept = [Timer(f"kept-{i}", now + 3600 + i, tenant_id=f"t{i}") for i in range(3)]
        await s.arm(kept)
        await harmless(s.setup(), "a second setup() on a store in use")
        runners.append(Runner(s))
        proc = RecordingProcessor()
        runners[-1].start(proc, "w1")  # export_armed may ask the store's workers (temporal_shards)
        got = await until_exported(s, {t.id: t.fire_at for t in kept}, bound_s(s))
        assert set(got) == {t.id for t in kept}, f"a second setup() changed what is armed: {sorted(got)}"
        await s.arm([Timer("after-setup", None)])
        ok = await wait_until(lambda: "after-setup" in proc.ids(), bound_s(s))
        assert ok, "after a second setup() a due timer never fired"
        await runners[-1].stop_all()

        await s.teardown(drop=True)
        await harmless(s.teardown(drop=True), "a second teardown(drop=True)")
        await harmless(s.setup(), "setup() after teardown()")
        runners.append(Runner(s))
        proc = RecordingProcessor()
        runners[-1].start(proc, "w2")
        left = await until_exported(s, {}, bound_s(s))
        assert not left, f"teardown(drop=True) then setup() still holds timers: {sorted(left)}"
        await s.arm([Timer("after-teardown", None)])
        ok = await wait_until(lambda: "after-teardown" in proc.ids() and proc.delivered, bound_s(s))
        assert ok, "teardown() then setup() did not give a working store: a due timer never fired"
    except BaseException:
        with contextlib.suppress(Exception):  # the failure above is the finding, not the cleanup's
            await cleanup()
        raise
    await cleanup()
