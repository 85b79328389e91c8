"""A dual-writing scheduler: a primary in charge and a shadow observed.

The online-migration order, rehearsed: **backfill** (copy what the primary has armed into the
shadow), **dual write** (every arm goes to both), **compare** (every fire of either side is
recorded; :mod:`migration.compare` matches them), **switch reads** (``switch_at``: from then the
shadow executes and the old primary becomes the observed side), **stop old writes** (the end of
the rehearsal).

Only the executing side's fires reach the real processor. The observing side's fires are
recorded and never executed (no side effects); its processor answers with the re-arm time the
executing side decided for the same ``(timer id, due time)``, so both stores carry the same
schedule (that decision is the re-arm's dual write). If the observer fires first it waits for the
decision, up to ``decision_wait_s``; past that it re-arms on its own (``now + 1 s``, flagged as
``undecided``, which the comparison then sees as a mismatch).

A shared effect ledger stands in for the application's durable trigger row (seeds/003:
"processors check the trigger's durable row before acting"): after the switch, a fire the old
primary already executed is not executed again by the new one. Duplicate effects are counted
across both stores, since each backend's own effect key only covers its own store.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from migration.compare import SideFires
from schedulers.base import Capabilities, Fire, Outcome, Processor, Scheduler, Timer, us

PRIMARY, SHADOW = "primary", "shadow"


@dataclass
class DualState:
    """What both sides share: who executes, the re-arm decisions, the effect ledger, the fires."""

    switch_at: float | None = None
    decision_wait_s: float = 15.0
    decisions: dict[tuple[str, float], float | None] = field(default_factory=dict)
    waiters: dict[tuple[str, float], asyncio.Event] = field(default_factory=dict)
    executed: dict[tuple[str, float], str] = field(default_factory=dict)  # key -> side that polled it
    effects: dict[tuple[str, float], list[str]] = field(default_factory=dict)  # key -> sides delivered
    fires: dict[str, SideFires] = field(default_factory=lambda: {PRIMARY: SideFires(), SHADOW: SideFires()})
    undecided: int = 0
    skipped_already_done: int = 0

    def executor(self, due_at: float) -> str:
        """The side that executes fires due at ``due_at``: the read switch moves every fire due
        from ``switch_at`` on to the shadow. Deciding by due time (not by when a side happens to
        see the fire) keeps both sides agreeing on every key, so none is executed twice and
        none is left to the other side."""
        return SHADOW if self.switch_at is not None and due_at >= self.switch_at else PRIMARY

    def decide(self, key: tuple[str, float], next_fire_at: float | None) -> None:
        self.decisions[key] = next_fire_at
        ev = self.waiters.pop(key, None)
        if ev is not None:
            ev.set()

    async def decision(self, key: tuple[str, float]) -> tuple[bool, float | None]:
        if key in self.decisions:
            return True, self.decisions[key]
        ev = self.waiters.setdefault(key, asyncio.Event())
        try:
            await asyncio.wait_for(ev.wait(), self.decision_wait_s)
        except TimeoutError:
            return False, None
        return True, self.decisions.get(key)

    def duplicate_effects(self) -> int:
        return sum(len(sides) - 1 for sides in self.effects.values() if len(sides) > 1)


class SideProcessor:
    """Wraps the real processor for one side; executes or observes depending on the role."""

    def __init__(self, side: str, real: Processor, dual: DualState) -> None:
        self.side = side
        self.real = real
        self.dual = dual

    async def process(self, fires: Sequence[Fire]) -> list[Outcome]:
        now = time.time()
        dual = self.dual
        record = dual.fires[self.side]
        for f in fires:
            record.add(f.timer_id, us(f.due_at), now - max(f.due_at, f.armed_at))
        mine = [i for i, f in enumerate(fires) if dual.executor(f.due_at) == self.side]
        if len(mine) == len(fires):
            return await self._execute(fires)
        if not mine:
            return await self._observe(fires)
        theirs = sorted(set(range(len(fires))) - set(mine))
        executed, observed = await asyncio.gather(
            self._execute([fires[i] for i in mine]), self._observe([fires[i] for i in theirs])
        )
        out: list[Outcome] = [None] * len(fires)  # type: ignore[list-item]
        for i, o in zip(mine, executed):
            out[i] = o
        for i, o in zip(theirs, observed):
            out[i] = o
        return out

    async def _execute(self, fires: Sequence[Fire]) -> list[Outcome]:
        dual = self.dual
        fresh: list[Fire] = []
        outcomes: list[Outcome | None] = []
        for f in fires:
            key = (f.timer_id, us(f.due_at))
            done_by = dual.executed.get(key)
            if done_by is not None and done_by != self.side:
                # The other side polled this already (before the switch): act as its durable row says.
                dual.skipped_already_done += 1
                outcomes.append(Outcome(next_fire_at=dual.decisions.get(key), new_state=None, effect=False))
            else:
                fresh.append(f)
                outcomes.append(None)
        real = list(await self.real.process(fresh)) if fresh else []
        it = iter(zip(fresh, real))
        out: list[Outcome] = []
        for o in outcomes:
            if o is None:
                f, o = next(it)
                key = (f.timer_id, us(f.due_at))
                dual.executed.setdefault(key, self.side)
                dual.decide(key, o.next_fire_at)
            out.append(o)
        return out

    async def _observe(self, fires: Sequence[Fire]) -> list[Outcome]:
        dual = self.dual

        async def one(f: Fire) -> Outcome:
            known, next_fire_at = await dual.decision((f.timer_id, us(f.due_at)))
            if not known:
                dual.undecided += 1
                next_fire_at = time.time() + 1.0
            return Outcome(next_fire_at=next_fire_at, new_state=None, effect=False)

        return list(await asyncio.gather(*(one(f) for f in fires)))

    def committed(self, fires: Sequence[Fire], delivered: Sequence[bool]) -> None:
        mine_f: list[Fire] = []
        mine_d: list[bool] = []
        for f, d in zip(fires, delivered):
            key = (f.timer_id, us(f.due_at))
            if d:
                self.dual.effects.setdefault(key, []).append(self.side)
            if self.dual.executed.get(key) == self.side:  # this side polled it: the real processor hears
                mine_f.append(f)
                mine_d.append(d)
        if mine_f:
            self.real.committed(mine_f, mine_d)


class DualWriteScheduler:
    """A Scheduler made of a primary and a shadow; arms go to both."""

    name = "dual"
    description = "dual-write rehearsal: a primary in charge, a shadow observed"
    needs_postgres = False
    needs_temporal = False
    default_options: dict[str, Any] = {}

    def __init__(self, primary: Scheduler, shadow: Scheduler, dual: DualState | None = None) -> None:
        self.primary = primary
        self.shadow = shadow
        self.dual = dual or DualState()
        self.capabilities = Capabilities(
            max_lag_s=max(primary.capabilities.max_lag_s, shadow.capabilities.max_lag_s),
            heartbeat_leases=primary.capabilities.heartbeat_leases and shadow.capabilities.heartbeat_leases,
            redelivery_s=max(primary.capabilities.redelivery_s, shadow.capabilities.redelivery_s),
        )

    async def setup(self) -> None:
        await self.primary.setup()
        await self.shadow.setup()

    async def backfill(self) -> int:
        """Copy every timer the primary has armed into the shadow; returns how many."""
        timers = await self.primary.export_armed()
        for i in range(0, len(timers), 5000):
            await self.shadow.arm(timers[i : i + 5000])
        return len(timers)

    async def arm(self, timers: Sequence[Timer]) -> None:
        await asyncio.gather(self.primary.arm(timers), self.shadow.arm(timers))

    async def run(
        self, processors: Mapping[str, Processor], stop: asyncio.Event, worker_id: str | None = None
    ) -> None:
        wid = worker_id or "dual"
        p = {t: SideProcessor(PRIMARY, proc, self.dual) for t, proc in processors.items()}
        s = {t: SideProcessor(SHADOW, proc, self.dual) for t, proc in processors.items()}
        await asyncio.gather(
            self.primary.run(p, stop, worker_id=f"{wid}-primary"),
            self.shadow.run(s, stop, worker_id=f"{wid}-shadow"),
        )

    async def stats(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for side, sched in ((PRIMARY, self.primary), (SHADOW, self.shadow)):
            for k, v in (await sched.stats()).items():
                out[f"{side}.{k}"] = v
        out["undecided"] = float(self.dual.undecided)
        return out

    def relations(self) -> list[str]:
        return self.primary.relations() + self.shadow.relations()

    async def export_armed(self) -> list[Timer]:
        return await self.primary.export_armed()

    async def teardown(self, drop: bool = True) -> None:
        await self.primary.teardown(drop)
        await self.shadow.teardown(drop)
