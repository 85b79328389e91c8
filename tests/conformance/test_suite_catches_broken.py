"""The conformance suite itself: deliberately broken schedulers must fail it."""

from __future__ import annotations

import asyncio
import heapq
import time
from collections.abc import Sequence
from dataclasses import replace

import pytest

from schedulers.base import StoreContext, Timer
from schedulers.memory import MemoryScheduler
from tests.conformance import promises


class FiresEarly(MemoryScheduler):
    """Claims every timer one second before it is due."""

    def _claim(self, now, owner, batch_no, limit):
        return super()._claim(now + 1.0, owner, batch_no, limit)


class DropsTimers(MemoryScheduler):
    """Silently loses every tenth arm."""

    async def arm(self, timers: Sequence[Timer]) -> None:
        await super().arm([t for i, t in enumerate(timers) if i % 10 != 9])


class IgnoresMoves(MemoryScheduler):
    """Keeps the first fire time of an id: a moved timer still fires at its old time."""

    async def arm(self, timers: Sequence[Timer]) -> None:
        fresh = [t for t in timers if t.id not in self._entries]
        await super().arm(fresh)


class IgnoresFarMoves(MemoryScheduler):
    """Keeps the fire time of a timer armed more than a day out (a far tier written once, as a
    design parking far timers in cold storage might): moves of near timers work, far ones are lost."""

    async def arm(self, timers: Sequence[Timer]) -> None:
        horizon = time.time() + 86400
        kept = [t for t in timers if t.id not in self._entries or self._entries[t.id].fire_at <= horizon]
        await super().arm(kept)


class NoEffectKey(MemoryScheduler):
    """Records effects without the (trigger_id, due_at) key, so a duplicate fire repeats them."""

    def _commit(self, items, outcomes, owner, processor):
        self._effects.clear()
        super()._commit(items, outcomes, owner, processor)


class InFlightCommitIgnoresMoves(MemoryScheduler):
    """Commits a batch by id alone: a timer moved while its old fire was in flight gets that
    fire's re-arm, which overwrites the move."""

    def _commit(self, items, outcomes, owner, processor):
        current = []  # the fence forgotten: each fire passes for the timer's current version
        for fire, version in items:
            e = self._entries.get(fire.timer_id)
            if e is not None:
                e.owner, version = owner, e.version
            current.append((fire, version))
        super()._commit(current, outcomes, owner, processor)


class LosesTheRestOnCrash(MemoryScheduler):
    """Commits outcomes as polls finish, but a crash mid-stream deletes the rows still polling, as
    a design that took a claim's rows out of the store up front and wrote them back per group would."""

    async def _process(self, processors, claimed, owner, held):
        try:
            await super()._process(processors, claimed, owner, held)
        except asyncio.CancelledError:
            for fire, _ in claimed:
                e = self._entries.get(fire.timer_id)
                if e is not None and e.owner == owner:
                    del self._entries[fire.timer_id]
            raise


class ExportsFinishedTimers(MemoryScheduler):
    """export_armed answers from a log of arms, so timers that fired and finished are still listed."""

    async def arm(self, timers: Sequence[Timer]) -> None:
        self.__dict__.setdefault("arms", {}).update({t.id: t for t in timers})
        await super().arm(timers)

    async def export_armed(self) -> list[Timer]:
        return list(self.__dict__.get("arms", {}).values())


class ExportsFirstArm(MemoryScheduler):
    """Exports the fire time each id was first armed with, not where a move put it."""

    async def arm(self, timers: Sequence[Timer]) -> None:
        first = getattr(self, "_first", None)
        if first is None:
            first = self._first = {}
        for t in timers:
            first.setdefault(t.id, t.fire_at)
        await super().arm(timers)

    async def export_armed(self) -> list[Timer]:
        return [Timer(t.id, self._first[t.id], t.type, t.tenant_id, t.priority) for t in await super().export_armed()]


class IgnoresDisarm(MemoryScheduler):
    """Says it disarmed what it was asked to, and keeps every timer."""

    async def disarm(self, ids) -> int:
        return sum(tid in self._entries for tid in ids)


class CountsNoClaims(MemoryScheduler):
    """Claims and delivers as memory does, but never counts a claim (schedulers.base asks it to)."""

    def _claim(self, now, owner, batch_no, limit):
        out = super()._claim(now, owner, batch_no, limit)
        self.claimed_timers = 0
        return out


class ForgetsInFlight(MemoryScheduler):
    """Exports only the timers nobody has claimed: a backlog in flight would read as lost."""

    async def export_armed(self):
        return [t for t in await super().export_armed() if self._entries[t.id].owner is None]


class SetupWipesTheStore(MemoryScheduler):
    """setup() recreates the store from scratch (a DROP before the CREATE): a second call loses
    every armed timer."""

    async def setup(self) -> None:
        self._entries.clear()
        self._due.clear()


class TeardownTwiceRaises(MemoryScheduler):
    """teardown() closes a connection it does not check: the second call fails."""

    async def teardown(self, drop: bool = True) -> None:
        if self.__dict__.get("closed"):
            raise RuntimeError("the pool is already closed")
        self.closed = True
        await super().teardown(drop)


class DeadAfterTeardown(MemoryScheduler):
    """teardown() stops the store for good; setup() does not bring it back, so nothing fires."""

    async def teardown(self, drop: bool = True) -> None:
        self.dead = True
        await super().teardown(drop)

    def _claim(self, now, owner, batch_no, limit):
        return [] if self.__dict__.get("dead") else super()._claim(now, owner, batch_no, limit)


class TwoSecondsLate(MemoryScheduler):
    """Claims every timer two seconds after it is due: inside the old 5 s slack, outside the bound."""

    def _claim(self, now, owner, batch_no, limit):
        return super()._claim(now - 2.0, owner, batch_no, limit)


class NoneIsAnHourOut(MemoryScheduler):
    """Reads fire_at=None as an hour from now instead of due now."""

    async def arm(self, timers: Sequence[Timer]) -> None:
        later = time.time() + 3600
        await super().arm([replace(t, fire_at=later) if t.fire_at is None else t for t in timers])


class NoHeartbeat(MemoryScheduler):
    """Never renews a lease: an owner that is alive but slow loses its timers when it lapses."""

    async def _heartbeat(self, owner: str, stop: asyncio.Event) -> None:
        await stop.wait()


class ReleasesOnCrash(MemoryScheduler):
    """A crashed owner's timers go straight back to due (as a clean shutdown would hand them back):
    redelivery does not wait for the lease, so a crash reads cheaper than a real one."""

    async def run(self, processors, stop, worker_id=None):
        try:
            await super().run(processors, stop, worker_id=worker_id)
        except asyncio.CancelledError:
            for tid in list(self._held.get(worker_id, ())):
                e = self._entries.get(tid)
                if e is not None and e.owner == worker_id:
                    e.owner = None
                    heapq.heappush(self._due, (e.fire_at, next(self._seq), tid, e.version))
            raise


class HandsToEveryRunner(MemoryScheduler):
    """Records no owner at a claim: a timer one runner has claimed is still due for the next."""

    def _claim(self, now, owner, batch_no, limit):
        given = self.__dict__.setdefault("given", {})
        out = []
        for fire, version in super()._claim(now, owner, batch_no, limit):
            owners = given.setdefault(fire.timer_id, set())
            e = self._entries[fire.timer_id]
            e.owner = None
            if len(owners | {owner}) < 2:  # due again, for a runner that has not had it
                heapq.heappush(self._due, (fire.due_at, next(self._seq), fire.timer_id, version))
            if owner not in owners:
                owners.add(owner)
                out.append((fire, version))
        return out


class TenantCappedMemory(MemoryScheduler):
    """The control for fairness: memory whose claim takes at most MAX_PER_TENANT of one tenant's
    due timers (memory itself claims by fire time alone, and fails the check)."""

    MAX_PER_TENANT = 10

    def _claim(self, now, owner, batch_no, limit):
        out, per, over = [], {}, []
        while len(out) < limit:
            got = super()._claim(now, owner, batch_no, 1)
            if not got:
                break
            fire, version = got[0]
            if per.get(fire.tenant_id, 0) >= self.MAX_PER_TENANT:
                over.append(got[0])
                continue
            per[fire.tenant_id] = per.get(fire.tenant_id, 0) + 1
            out.append(got[0])
        for fire, version in over:  # not claimed after all: due again for the next claim
            e = self._entries[fire.timer_id]
            e.owner, e.attempt = None, e.attempt - 1
            self._held.get(owner, set()).discard(fire.timer_id)
            self.claimed_timers -= 1
            heapq.heappush(self._due, (fire.due_at, next(self._seq), fire.timer_id, version))
        return out


def factory_for(cls):
    async def factory():
        s = cls(StoreContext(state_bytes=16), **MemoryScheduler.conformance_options)
        await s.setup()
        return s

    return factory


@pytest.mark.parametrize(
    "cls, check",
    [
        (FiresEarly, promises.check_never_fires_early),
        (DropsTimers, promises.check_every_timer_fires_within_max_lag),
        (IgnoresMoves, promises.check_rearm_moves_timer),
        (InFlightCommitIgnoresMoves, promises.check_move_during_an_inflight_batch_wins_over_its_rearm),
        (IgnoresFarMoves, promises.check_moved_long_horizon_timer_fires_at_its_new_time_only),
        (NoEffectKey, promises.check_duplicate_fire_has_no_duplicate_effect),
        (ExportsFinishedTimers, promises.check_export_lists_what_will_fire),
        (ExportsFirstArm, promises.check_export_lists_what_will_fire),
        (IgnoresDisarm, promises.check_disarm_removes_timers),
        (CountsNoClaims, promises.check_crashed_owner_timers_are_redelivered),
        (LosesTheRestOnCrash, promises.check_owner_crashed_midway_through_a_stream_loses_nothing),
        (ForgetsInFlight, promises.check_export_armed_holds_what_will_still_fire),
        (SetupWipesTheStore, promises.check_setup_and_teardown_are_idempotent),
        (TeardownTwiceRaises, promises.check_setup_and_teardown_are_idempotent),
        (DeadAfterTeardown, promises.check_setup_and_teardown_are_idempotent),
        (TwoSecondsLate, promises.check_every_timer_fires_within_max_lag),
        (NoneIsAnHourOut, promises.check_none_fire_at_is_due_now),
        (NoHeartbeat, promises.check_slow_owner_keeps_timers),
        (ReleasesOnCrash, promises.check_crashed_owner_timers_are_redelivered),
        (HandsToEveryRunner, promises.check_two_runners_share_one_store),
        (MemoryScheduler, promises.check_big_tenant_cannot_starve_others),
    ],
    ids=[
        "fires-early",
        "drops-timers",
        "ignores-moves",
        "inflight-commit-ignores-moves",
        "ignores-far-moves",
        "no-effect-key",
        "exports-finished-timers",
        "exports-first-arm",
        "ignores-disarm",
        "counts-no-claims",
        "loses-the-rest-on-crash",
        "forgets-in-flight",
        "setup-wipes-the-store",
        "teardown-twice-raises",
        "dead-after-teardown",
        "two-seconds-late",
        "none-is-an-hour-out",
        "no-heartbeat",
        "releases-on-crash",
        "hands-to-every-runner",
        "claims-by-fire-time-alone",
    ],
)
async def test_broken_scheduler_fails_the_suite(cls, check):
    # the slack is the suite's own (helpers.LAG_SLACK_S), the same as in the control below
    with pytest.raises(AssertionError):
        await check(factory_for(cls))


async def test_fairness_control_passes_it():
    """The control of claims-by-fire-time-alone: the same store with a per-tenant cap passes."""
    await promises.check_big_tenant_cannot_starve_others(factory_for(TenantCappedMemory))


async def test_memory_passes_the_same_checks():
    """The control: the unbroken oracle passes the checks the broken ones fail."""
    for check in (
        promises.check_never_fires_early,
        promises.check_every_timer_fires_within_max_lag,
        promises.check_none_fire_at_is_due_now,
        promises.check_slow_owner_keeps_timers,
        promises.check_two_runners_share_one_store,
        promises.check_rearm_moves_timer,
        promises.check_move_during_an_inflight_batch_wins_over_its_rearm,
        promises.check_moved_long_horizon_timer_fires_at_its_new_time_only,
        promises.check_duplicate_fire_has_no_duplicate_effect,
        promises.check_export_lists_what_will_fire,
        promises.check_disarm_removes_timers,
        promises.check_crashed_owner_timers_are_redelivered,
        promises.check_owner_crashed_midway_through_a_stream_loses_nothing,
        promises.check_export_armed_holds_what_will_still_fire,
        promises.check_setup_and_teardown_are_idempotent,
    ):
        await check(factory_for(MemoryScheduler))
