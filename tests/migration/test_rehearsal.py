"""The dual-write rehearsal on two in-process schedulers: the logic, without a database.

The same rehearsal against the Postgres and Temporal backends runs in tests/e2e through the CLI.
"""

from __future__ import annotations

import time
import zlib
from typing import Sequence

from schedulers.base import Fire, Outcome, StoreContext, Timer
from schedulers.memory import MemoryScheduler
from migration.rehearsal import rehearse


class Rearming:
    """Re-arms every timer 0.6 s after it fires; every third poll has an effect."""

    def __init__(self) -> None:
        self.effects: dict[tuple[str, float], int] = {}

    async def process(self, fires: Sequence[Fire]) -> list[Outcome]:
        now = time.time()
        return [
            Outcome(next_fire_at=now + 0.6, new_state=None, effect=zlib.crc32(f"{f.timer_id}{f.due_at}".encode()) % 3 == 0)
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


def memory(cls=MemoryScheduler):
    return cls(StoreContext(state_bytes=16), tick_s=0.02, lease_s=2.0)


def population(n: int, prefix: str) -> list[Timer]:
    now = time.time()
    return [Timer(f"{prefix}-{i}", now + (i % 10) * 0.06, tenant_id=f"t{i % 5}") for i in range(n)]


async def test_control_vs_control_is_go():
    proc = Rearming()
    result = await rehearse(
        memory(), memory(), {"poll": proc},
        before_dual_write=population(150, "old"), during_dual_write=population(150, "new"),
        duration_s=4.0, tolerance_s=1.0,
    )
    c = result.comparison
    assert result.backfilled == 150
    assert c.matched > 600, c
    assert c.missing_in_shadow == 0 and c.extra_in_shadow == 0, c.samples
    assert result.duplicate_effects == 0 and result.lost == 0
    assert result.verdict.go, result.verdict.reasons
    assert all(n == 1 for n in proc.effects.values())


async def test_shadow_dropping_one_percent_of_arms_is_no_go_naming_them():
    result = await rehearse(
        memory(), memory(DropsOnePercent), {"poll": Rearming()},
        during_dual_write=population(400, "x"), duration_s=3.0, tolerance_s=1.0,
    )
    dropped = {f"x-{i}" for i in range(400) if zlib.crc32(f"x-{i}".encode()) % 100 == 0}
    assert dropped, "the population must include dropped ids for this test to mean anything"
    assert not result.verdict.go
    assert result.comparison.missing_in_shadow > 0
    named = {s.split("@")[0] for s in result.comparison.samples["missing_in_shadow"]}
    assert named and named <= dropped, (named, dropped)
    assert any("missing in the shadow" in r for r in result.verdict.reasons)


async def test_switch_loses_nothing_and_duplicates_no_effect():
    proc = Rearming()
    result = await rehearse(
        memory(), memory(), {"poll": proc},
        during_dual_write=population(200, "s"), duration_s=5.0, tolerance_s=1.0, switch_after_s=2.5,
    )
    assert result.executed_by["primary"] > 0 and result.executed_by["shadow"] > 0, result.executed_by
    assert result.lost == 0, result.lost_samples
    assert result.duplicate_effects == 0
    assert all(n == 1 for n in proc.effects.values()), "an effect was delivered twice across the switch"
    assert result.verdict.go, result.verdict.reasons
