"""The rehearsal engine on two in-process schedulers: the logic of the move, without a database.

Memory schedulers stand in for the stores here, with purpose-built faults (a shadow that drops
arms, one that is ten seconds slow, one whose writes fail for a while). The same rehearsal
against Postgres and Temporal runs in tests/e2e/test_migrate_cli.py through the CLI.
"""

from __future__ import annotations

import asyncio
import time
import zlib
from collections.abc import Sequence
from dataclasses import replace

from migration.compare import in_windows
from migration.dual import PRIMARY, SHADOW
from migration.reconcile import reconcile, summary_line
from migration.rehearsal import rehearse
from schedulers.base import Fire, Outcome, StoreContext, Timer
from schedulers.memory import MemoryScheduler

DAY_S = 86400.0


class Rearming:
    """Re-arms every timer ``every_s`` after it fires; every third poll has an effect."""

    def __init__(self, every_s: float = 0.6) -> None:
        self.every_s = every_s
        self.effects: dict[tuple[str, float], int] = {}
        self.polled: dict[tuple[str, float], int] = {}

    async def process(self, fires: Sequence[Fire]) -> list[Outcome]:
        now = time.time()
        for f in fires:
            key = (f.timer_id, round(f.due_at, 6))
            self.polled[key] = self.polled.get(key, 0) + 1
        return [
            Outcome(
                next_fire_at=now + self.every_s,
                new_state=None,
                effect=zlib.crc32(f"{f.timer_id}{f.due_at}".encode()) % 3 == 0,
            )
            for f in fires
        ]

    def committed(self, fires: Sequence[Fire], delivered: Sequence[bool]) -> None:
        for f, d in zip(fires, delivered):
            if d:
                key = (f.timer_id, round(f.due_at, 6))
                self.effects[key] = self.effects.get(key, 0) + 1


class DropsOnePercent(MemoryScheduler):
    async def arm(self, timers: Sequence[Timer]) -> None:
        await super().arm([t for t in timers if zlib.crc32(t.id.encode()) % 100 != 0])


class TenSecondsSlow(MemoryScheduler):
    """Fires everything ten seconds late (and says so: its declared bound covers it)."""

    DELAY_S = 10.0

    def __init__(self, ctx, **options) -> None:
        super().__init__(ctx, **options)
        self.capabilities = replace(self.capabilities, max_lag_s=self.DELAY_S + 2.0)

    async def arm(self, timers: Sequence[Timer]) -> None:
        now = time.time()
        await super().arm(
            [replace(t, fire_at=(now if t.fire_at is None else t.fire_at) + self.DELAY_S) for t in timers]
        )

    def _claim(self, now, owner, batch_no, limit):
        return [
            (replace(f, due_at=round(f.due_at - self.DELAY_S, 6)), v)
            for f, v in super()._claim(now, owner, batch_no, limit)
        ]

    def _commit(self, items, outcomes, owner, processor):
        later = [
            replace(o, next_fire_at=None if o.next_fire_at is None else o.next_fire_at + self.DELAY_S) for o in outcomes
        ]
        super()._commit(items, later, owner, processor)

    async def export_armed(self) -> list[Timer]:
        return [replace(t, fire_at=t.fire_at - self.DELAY_S) for t in await super().export_armed()]


class FiveSecondsSlow(TenSecondsSlow):
    DELAY_S = 5.0


class HidesClaimed(MemoryScheduler):
    """Lists only the timers no batch holds (as temporal_shards does between a hand-off and its
    claim): a timer in flight is missing from one read of this store."""

    async def export_armed(self) -> list[Timer]:
        return [
            Timer(e.timer.id, e.fire_at, e.timer.type, e.timer.tenant_id, e.timer.priority)
            for e in self._entries.values()
            if e.owner is None
        ]


class Holding:
    """Holds every batch until ``release`` is set; re-arms each timer a minute out."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.received = 0

    async def process(self, fires: Sequence[Fire]) -> list[Outcome]:
        self.received += len(fires)
        await self.release.wait()
        return [Outcome(next_fire_at=time.time() + 60.0) for _ in fires]

    def committed(self, fires: Sequence[Fire], delivered: Sequence[bool]) -> None:
        pass


class Outage(MemoryScheduler):
    """Refuses every write while ``down`` (a store that is unreachable)."""

    down = False

    def __init__(self, ctx, **options) -> None:
        super().__init__(ctx, **options)
        self.refused: list[float] = []  # when each write was refused
        self.came_up: float | None = None  # when the store came back

    async def arm(self, timers: Sequence[Timer]) -> None:
        if self.down:
            self.refused.append(time.time())
            raise ConnectionError("the store is down")
        await super().arm(timers)


def memory(cls=MemoryScheduler):
    return cls(StoreContext(state_bytes=16), tick_s=0.02, lease_s=2.0)


def population(n: int, prefix: str, spread_s: float = 0.6) -> list[Timer]:
    now = time.time()
    return [Timer(f"{prefix}-{i}", now + (i % 10) * spread_s / 10, tenant_id=f"t{i % 5}") for i in range(n)]


def far(n: int, prefix: str) -> list[Timer]:
    now = time.time()
    return [Timer(f"{prefix}-{i}", now + (30 + i % 30) * DAY_S, tenant_id=f"t{i % 5}") for i in range(n)]


async def test_control_vs_control_is_go():
    proc = Rearming()
    result, reh = await rehearse(
        memory(),
        memory(),
        {"poll": proc},
        before_dual_write=population(150, "old"),
        during_dual_write=population(150, "new"),
        duration_s=4.0,
        tolerance_s=1.0,
    )
    c = result.comparison
    assert result.backfilled == 150
    # Every fire the old store made in the judged span is matched. How many that is follows the
    # machine's speed (the span is ~1.5 s), so the floor is every timer of both populations at
    # least once: the span holds two re-arm periods.
    judged = in_windows(c.windows, c.judged_until)
    judged_fires = {(i, round(d, 3)) for i, fs in reh.dual.fires[PRIMARY].by_id.items() for d, _ in fs if judged(d)}
    assert c.matched == len(judged_fires), c
    everyone = {f"old-{i}" for i in range(150)} | {f"new-{i}" for i in range(150)}
    assert {i for i, _ in judged_fires} == everyone, c
    assert c.missing_in_shadow == 0 and c.extra_in_shadow == 0, c.samples
    assert result.duplicate_effects == 0 and result.lost == 0
    assert result.verdict.go, result.verdict.reasons
    assert all(n == 1 for n in proc.effects.values())
    assert result.reconcile["drift"]["total"] == 0


async def test_shadow_dropping_one_percent_of_arms_is_no_go_naming_them():
    result, _ = await rehearse(
        memory(),
        memory(DropsOnePercent),
        {"poll": Rearming()},
        during_dual_write=population(400, "x"),
        duration_s=3.0,
        tolerance_s=1.0,
        settle_s=0.5,
    )
    dropped = {f"x-{i}" for i in range(400) if zlib.crc32(f"x-{i}".encode()) % 100 == 0}
    assert dropped, "the population must include dropped ids for this test to mean anything"
    assert not result.verdict.go
    assert result.comparison.missing_in_shadow > 0
    named = {s.split("@")[0] for s in result.comparison.samples["missing_in_shadow"]}
    assert named and named <= dropped, (named, dropped)
    assert any("missing in the shadow" in r for r in result.verdict.reasons)
    # the store checks after the backfill name them as missing from the new store too
    backfill = next(r for r in result.steps if r.kind == "backfill")
    assert backfill.checks["stores"][SHADOW]["missing"] == len(dropped)


async def test_every_step_including_rollback_loses_and_doubles_nothing():
    proc = Rearming()
    lh = far(40, "lh")
    result, reh = await rehearse(
        memory(),
        memory(),
        {"poll": proc},
        before_dual_write=population(200, "old") + lh[:20],
        during_dual_write=population(200, "new") + lh[20:],
        duration_s=10.0,
        tolerance_s=1.0,
        settle_s=0.5,
        long_horizon=[t.id for t in lh],
        steps="dual-write,backfill,switch-execution@2,stop-old-writes@4,rollback@6",
        app_writes=(lh, 20.0),
    )
    assert [r.kind for r in result.steps] == [
        "dual-write",
        "backfill",
        "switch-execution",
        "stop-old-writes",
        "rollback",
    ]
    assert all(r.started_s is not None and not r.problems for r in result.steps), [r.problems for r in result.steps]
    assert result.executed_by["primary"] > 0 and result.executed_by["shadow"] > 0, result.executed_by
    assert result.lost == 0 and result.double_executed == 0, result.lost_samples
    assert result.duplicate_effects == 0
    for r in result.steps[1:]:
        assert r.fires["lost"] == 0 and r.fires["executed_by_both"] == 0 and r.fires["duplicate_effects"] == 0, r
        assert r.fires["due"] > 0, f"no fire was due during {r.kind}: the test would prove nothing"
    assert all(n == 1 for n in proc.effects.values()), "an effect was delivered twice across the steps"
    # long-horizon timers, moved by the application meanwhile, in the new store after the backfill
    # and in the old one after the rollback, each at the fire time the application last gave it
    backfill = result.steps[1].checks["stores"][SHADOW]["long_horizon"]
    assert backfill == {"of": 40, "right": 40, "wrong_samples": []}
    rollback = result.steps[4].checks["stores"]["primary"]["long_horizon"]
    assert rollback == {"of": 40, "right": 40, "wrong_samples": []}
    assert result.steps[4].did["resync"]["copied"] > 0, "the stopped old store missed the application's moves"
    assert result.verdict.go, result.verdict.reasons


async def test_a_shadow_ten_seconds_slower_is_no_go_on_a_one_second_regression_limit_and_go_without():
    result, reh = await rehearse(
        memory(),
        memory(TenSecondsSlow),
        {"poll": Rearming(every_s=13.0)},
        during_dual_write=population(300, "slow", spread_s=2.0),
        duration_s=17.0,
        tolerance_s=1.0,
        settle_s=0.5,
        max_lag_regression_s=1.0,
    )
    lag = result.lag
    # one round of fires is judged (due 0-2 s; the shadow fires them 10 s later, before the end)
    assert lag["shadow"]["fires"] >= 200 and 9_500 < lag["regression_p99"] < 12_000, lag
    assert result.comparison.matched >= 200 and result.comparison.missing_in_shadow == 0
    assert not result.verdict.go
    assert [r for r in result.verdict.reasons if "lag regression" in r], result.verdict.reasons
    assert len(result.verdict.reasons) == 1, "only the lag regression fails"
    # the same run judged without a regression limit: the shadow stays within its declared bound
    ended = result.ended_at
    again = reh.judge(tolerance_s=1.0, ended_at=ended)
    assert again.verdict.go, again.verdict.reasons
    assert again.verdict.checks["shadow_lag_p99"]["limit_from"].startswith("the declared bound of memory")


async def test_a_shadow_outage_is_queued_replayed_and_reconciled():
    shadow = memory(Outage)
    lh = far(60, "lh")
    stop = asyncio.Event()

    async def outage() -> None:
        await asyncio.sleep(1.5)
        shadow.down = True
        await asyncio.sleep(2.0)
        shadow.down = False
        shadow.came_up = time.time()

    task = asyncio.create_task(outage())
    result, _ = await rehearse(
        memory(),
        shadow,
        {"poll": Rearming()},
        during_dual_write=population(100, "o") + lh,
        duration_s=6.0,
        tolerance_s=1.0,
        settle_s=0.5,
        long_horizon=[t.id for t in lh],
        app_writes=(lh, 40.0),
        stop=stop,
    )
    await task
    windows = result.divergence["windows"]
    assert len(windows) == 1, result.divergence
    w = windows[0]
    assert w["failed_writes"] > 0 and w["replayed"] > 0 and w["end"] is not None
    # from the first failed write (attempted before the store refused it) until replayed, which
    # can only be after the store came back
    assert shadow.refused and w["start"] <= shadow.refused[0], (w, shadow.refused[:3])
    assert w["end"] >= max(shadow.came_up, shadow.refused[-1]), (w, shadow.came_up)
    assert w["failed_writes"] + w["replay_failures"] == len(shadow.refused), (w, len(shadow.refused))
    assert result.reconcile["drift"]["total"] == 0, result.reconcile
    assert result.lost == 0 and result.duplicate_effects == 0
    assert result.verdict.go, result.verdict.reasons


async def test_a_shadow_five_seconds_slower_regresses_about_five_seconds_whether_or_not_it_executes():
    """The regression compares like with like: before the switch the slow shadow observes the
    fires the old store executes; after it, the shadow executes and is compared with the old
    store's own figure from before the switch (the old store, observing meanwhile, never waits
    on the shadow's decisions, so its lag stays its own)."""
    # re-armed 6 s after each fire: longer than the delay, so every fire's lag counts from its due
    for steps, duration_s in (("dual-write,backfill", 16.0), ("dual-write,backfill,switch-execution@10", 28.0)):
        result, _ = await rehearse(
            memory(),
            memory(FiveSecondsSlow),
            {"poll": Rearming(every_s=6.0)},
            during_dual_write=population(200, "slow", spread_s=2.0),
            duration_s=duration_s,
            tolerance_s=1.0,
            settle_s=0.5,
            steps=steps,
        )
        lag = result.lag
        assert 4_000 < lag["regression_p99"] < 7_000, (steps, lag)
        periods = lag["periods"]
        assert [q["executor"] for q in periods] == (["primary"] if "switch" not in steps else ["primary", "shadow"])
        for q in periods:
            assert 4_000 < q["regression_p99"] < 7_000, (steps, q)
        # the old store executed, fast, and never took on the shadow's lag
        assert lag["primary"]["role"] == "executed" and lag["primary"]["p99"] < 1_500, lag["primary"]
        if "switch" in steps:
            assert lag["shadow"]["role"] == "executed" and lag["shadow"]["fires"] > 100, lag["shadow"]
            after = periods[1]
            assert after["primary"]["role"] == "observed" and after["primary"]["p99"] < 1_500, after
            assert after["baseline"]["fires"] > 200
            assert result.lost == 0 and result.double_executed == 0, result.lost_samples
        else:
            assert lag["shadow"]["role"] == "observed", lag["shadow"]
            assert periods[0]["same_fires"] > 200
        assert result.undecided == 0


async def test_a_reconcile_with_timers_in_flight_reports_them_as_in_flight():
    source, target = memory(), memory(HidesClaimed)
    due = [Timer(f"due-{i}", time.time(), tenant_id="t0") for i in range(100)]
    later = far(20, "far")
    await source.arm(due + later)
    await target.arm(due + later)
    proc = Holding()
    stop = asyncio.Event()
    loop = asyncio.create_task(target.run({"poll": proc}, stop, worker_id="t"))
    try:
        while proc.received < len(due):  # every due timer is held by a batch: in flight
            await asyncio.sleep(0.02)
        report = await reconcile(
            source,
            target,
            settle_s=0.5,
            say=lambda _m: proc.release.set(),  # the batches commit between the two reads
        )
    finally:
        proc.release.set()
        stop.set()
        await loop
    assert (report["source_armed"], report["target_armed"]) == (120, 20)
    a = report["accounts"]
    assert a["in_both"] == 20 and a["in_both_same"] == 20
    assert a["only_source"] == {"total": 100, "in_flight": 100, "fired_since": 0, "changed": 0, "drift": 0}
    assert a["only_target"]["total"] == 0
    assert report["drift"]["total"] == 0
    line = summary_line(report)
    assert "120 vs 20 armed" in line and "100 in flight or claimed in memory" in line and "drift 0" in line, line
