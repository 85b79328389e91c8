"""memory: an in-process heap scheduler.

Two jobs: it is the conformance oracle (the simplest thing that keeps every promise of
docs/design.md) and the measure of the harness's own ceiling, so its per-fire cost is kept tiny:
tuples in a heap, lazy deletion of moved timers by version number, no per-fire allocation
beyond the :class:`Fire` handed to the processor.

Leases work as in the Postgres designs so the lease promises mean the same thing here: a claim
records ``(owner, lease_expires)``, a heartbeat task extends the leases of in-flight batches
every ``lease_s / 3``, and every claim loop sweeps expired leases back to due. The sweep watches
one heap item per claimed batch, not per timer: a batch whose lease was extended goes back on the
heap at its new expiry when its old one passes. Several ``run``
loops on one instance share the store (one event loop, so no locks are needed).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from schedulers.base import (
    Capabilities,
    Fire,
    Held,
    Processor,
    RunLoop,
    StoreContext,
    Timer,
    nap,
    outcomes_as_polls_finish,
    resolve_options,
    us,
)


@dataclass(slots=True)
class _Entry:
    timer: Timer
    fire_at: float  # effective due time (armed time when fire_at was None)
    armed_at: float
    version: int  # bumped on every arm; heap items of an older version are stale
    state: bytes | None
    owner: str | None = None
    lease_expires: float = 0.0
    attempt: int = 0  # deliveries of the current version


class MemoryScheduler:
    name = "memory"
    description = "in-process heap with leases: the conformance oracle and the harness's own ceiling"
    default_options: dict[str, Any] = {
        "tick_s": 0.05,  # longest sleep between claim loops when nothing is due, seconds
        # shortest sleep after a claim that caught up, seconds; at 5,000 fires/s 10 ms makes
        # 50-fire batches, and the harness's cost per fire then follows its cost per batch
        # (MEASUREMENTS.md: 0.09 ms a fire against 0.05 ms with 50 ms, one sitting)
        "coalesce_s": 0.01,
        "batch": 800,  # timers per processor call (batch-800)
        "lease_s": 30.0,  # a crashed owner's timers come back after this, seconds
        # batches' worth of fires in flight per run loop (rows come back as their polls finish)
        "inflight_batches": 16,
    }
    conformance_options: dict[str, Any] = {"tick_s": 0.02, "lease_s": 2.0, "batch": 50}
    needs_postgres = False
    needs_temporal = False

    def __init__(self, ctx: StoreContext, **options: Any) -> None:
        self.ctx = ctx
        self.options = resolve_options(self.name, self.default_options, options)
        self.tick_s = self.options["tick_s"]
        self.coalesce_s = min(self.options["coalesce_s"], self.tick_s)
        self.batch = self.options["batch"]
        self.lease_s = self.options["lease_s"]
        self.inflight_batches = self.options["inflight_batches"]
        self.capabilities = Capabilities(
            max_lag_s=self.tick_s + 0.5,
            per_tenant_fairness=False,
            heartbeat_leases=True,
            redelivery_s=self.lease_s + self.tick_s,
            lease_s=self.lease_s,
        )
        self._entries: dict[str, _Entry] = {}
        self._due: list[tuple[float, int, str, int]] = []  # (fire_at, seq, id, version)
        # (lease_expires, seq, [(id, version), ...]): one item per claimed batch
        self._leased: list[tuple[float, int, list[tuple[str, int]]]] = []
        self._seq = itertools.count()
        self._wake = asyncio.Event()
        self._effects: set[tuple[str, float]] = set()
        self._held: dict[str, set[str]] = {}  # owner -> ids it holds, for heartbeats
        self._owned = 0  # entries with an owner (the in-flight gauge, without a pass over them all)
        self.claimed_timers = 0  # schedulers.base: every lease taken, re-claims included
        self.last_tick_at = 0.0
        self.fires = 0
        self.recovered = 0

    async def setup(self) -> None:
        return None

    async def teardown(self, drop: bool = True) -> None:
        if drop:
            self._entries.clear()
            self._due.clear()
            self._leased.clear()
            self._effects.clear()
            self._owned = 0

    def relations(self) -> list[str]:
        return []

    async def arm(self, timers: Sequence[Timer]) -> None:
        now = time.time()
        entries = self._entries
        due = self._due
        seq = self._seq
        for t in timers:
            fire_at = now if t.fire_at is None else t.fire_at
            e = entries.get(t.id)
            if e is None:
                state = os.urandom(self.ctx.state_bytes) if self.ctx.state_bytes else None
                e = _Entry(t, fire_at, now, 0, state)
                entries[t.id] = e
            else:
                e.timer = t
                e.fire_at = fire_at
                e.armed_at = now
                e.version += 1
                if e.owner is not None:
                    self._owned -= 1
                e.owner = None
                e.attempt = 0
            heapq.heappush(due, (fire_at, next(seq), t.id, e.version))
        self._wake.set()

    async def export_armed(self) -> list[Timer]:
        return [
            Timer(e.timer.id, e.fire_at, e.timer.type, e.timer.tenant_id, e.timer.priority)
            for e in self._entries.values()
        ]

    async def disarm(self, ids: Sequence[str]) -> int:
        """Migration reconcile only: forget these timers (their heap items go stale; a batch
        holding one in flight finds no entry at commit and re-arms nothing)."""
        gone = [e for e in map(self._entries.pop, ids, itertools.repeat(None)) if e is not None]
        self._owned -= sum(e.owner is not None for e in gone)
        return len(gone)

    async def stats(self) -> dict[str, float]:
        return {
            "armed": float(len(self._entries)),
            "in_flight": float(self._owned),
            "claimed_timers": float(self.claimed_timers),
            "fires": float(self.fires),
            "recovered_leases": float(self.recovered),
        }

    # -- the claim loop -------------------------------------------------------------------

    def _sweep_expired(self, now: float) -> None:
        leased = self._leased
        entries = self._entries
        while leased and leased[0][0] <= now:
            _, _, items = heapq.heappop(leased)
            extended: dict[float, list[tuple[str, int]]] = {}
            for tid, version in items:
                e = entries.get(tid)
                if e is None or e.version != version or e.owner is None:
                    continue  # finished or moved
                if e.lease_expires > now:  # heartbeated since: watch it until its new expiry
                    extended.setdefault(e.lease_expires, []).append((tid, version))
                    continue
                e.owner = None
                self._owned -= 1
                self.recovered += 1
                heapq.heappush(self._due, (e.fire_at, next(self._seq), tid, version))
            for expires, still in extended.items():
                heapq.heappush(leased, (expires, next(self._seq), still))

    def _claim(self, now: float, owner: str, batch_no: int, limit: int) -> list[tuple[Fire, int]]:
        due = self._due
        entries = self._entries
        out: list[tuple[Fire, int]] = []
        leased: list[tuple[str, int]] = []
        expires = now + self.lease_s
        held = self._held.setdefault(owner, set())
        while due and due[0][0] <= now and len(out) < limit:
            fire_at, _, tid, version = heapq.heappop(due)
            e = entries.get(tid)
            if e is None or e.version != version or e.owner is not None:
                continue
            e.owner = owner
            e.lease_expires = expires
            e.attempt += 1
            held.add(tid)
            leased.append((tid, version))
            t = e.timer
            out.append(
                (
                    Fire(
                        tid, t.tenant_id, t.type, fire_at, e.armed_at, e.attempt, owner, batch_no, e.state, t.priority
                    ),
                    version,
                )
            )
        if leased:
            heapq.heappush(self._leased, (expires, next(self._seq), leased))
        self.claimed_timers += len(out)
        self._owned += len(out)
        return out

    async def run(self, processors: Mapping[str, Processor], stop: asyncio.Event, worker_id: str | None = None) -> None:
        owner = worker_id or f"mem-{os.getpid()}-{id(stop):x}"
        batch_no = 0
        # Room counted in fires: a batch gives its rows back as their polls finish and commit,
        # so its slowest poll holds back one row, not a batch's worth of room.
        async with RunLoop(fires_in_flight=self.inflight_batches * self.batch) as loop:
            loop.keep(self._heartbeat(owner, stop))
            while not stop.is_set():
                room = await loop.take_slot(stop, self.batch, least=(self.batch + 1) // 2)
                if not room:
                    break
                now = time.time()
                self.last_tick_at = now
                self._sweep_expired(now)
                claimed = self._claim(now, owner, batch_no, room)
                loop.give_back(room - len(claimed))
                if claimed:
                    batch_no += 1
                    loop.start_stream(self._process, processors, claimed, owner, size=len(claimed))
                    if len(claimed) == room:
                        continue  # more may be due now
                # Caught up: wait for the next due timer, but at least coalesce_s, so that at
                # thousands of fires/s a claim takes what came due meanwhile instead of one
                # batch per timer (room in fires no longer caps the batches in flight).
                wait = self.tick_s
                if self._due:
                    wait = min(wait, max(self.coalesce_s, self._due[0][0] - now))
                self._wake.clear()
                await nap(wait, self._wake)

    async def _heartbeat(self, owner: str, stop: asyncio.Event) -> None:
        interval = self.lease_s / 3
        while True:
            await asyncio.sleep(interval)
            expires = time.time() + self.lease_s
            for tid in self._held.get(owner, ()):
                e = self._entries.get(tid)
                if e is not None and e.owner == owner:
                    e.lease_expires = expires  # the sweep finds it when the batch's old lease passes

    async def _process(
        self,
        processors: Mapping[str, Processor],
        claimed: list[tuple[Fire, int]],
        owner: str,
        held: Held,
    ) -> None:
        by_type: dict[str, list[tuple[Fire, int]]] = {}
        for item in claimed:
            by_type.setdefault(item[0].type, []).append(item)
        for type_, items in by_type.items():
            fires = [f for f, _ in items]
            async for positions, outcomes in outcomes_as_polls_finish(processors[type_], fires):
                self._commit([items[i] for i in positions], outcomes, owner, processors[type_])
                held.give(len(positions))

    def _commit(self, items: list[tuple[Fire, int]], outcomes: Sequence, owner: str, processor: Processor) -> None:
        now = time.time()
        delivered: list[bool] = []
        entries = self._entries
        rearm: list[tuple[float, int, str, int]] = []
        held = self._held.get(owner, set())
        for (fire, version), outcome in zip(items, outcomes):
            held.discard(fire.timer_id)
            e = entries.get(fire.timer_id)
            still_ours = e is not None and e.version == version and e.owner == owner
            if outcome.effect:
                key = (fire.timer_id, us(fire.due_at))
                fresh = key not in self._effects
                if fresh:
                    self._effects.add(key)
                delivered.append(fresh)
            else:
                delivered.append(False)
            if e is None:
                continue
            if outcome.new_state is not None:
                e.state = outcome.new_state
            if not still_ours:
                continue  # moved while in flight (the newer arm wins) or lease lost
            e.owner = None
            self._owned -= 1
            if outcome.next_fire_at is None:
                del entries[fire.timer_id]
            else:
                e.fire_at = outcome.next_fire_at
                e.armed_at = now
                e.version += 1
                e.attempt = 0
                rearm.append((outcome.next_fire_at, next(self._seq), fire.timer_id, e.version))
        for item in rearm:
            heapq.heappush(self._due, item)
        self.fires += len(items)
        processor.committed([f for f, _ in items], delivered)
        if rearm and min(r[0] for r in rearm) < now + self.tick_s:
            self._wake.set()  # a re-arm is due before the claim loop's next tick
