"""A dual-writing scheduler: the old store (``primary``) and the new one (``shadow``) side by side.

What it does for each step of a move (:mod:`migration.plan` names them; :mod:`migration.rehearsal`
walks them):

* **Writes.** ``arm()`` is the application's write. It goes to the *store of record* first (the
  old store while it is written, the new one after ``stop-old-writes``); a failure there is the
  application's failure and is raised. Then it goes to the other store when that one is written
  too (``writes``). A failed write to the other store is **queued, not retried in line** (an
  outbox per store, see :class:`Outbox`): the application's write path must not wait for, or
  fail because of, the store it is moving to, or a new store's outage becomes the old system's
  outage. ``arm`` is an upsert by id, so the queue keeps only the latest timer per id (bounded by
  the number of timers, replay is idempotent); while anything is queued for a store, later writes
  to it queue behind (per-id order is kept); one task per store replays the queue with backoff.
  Application writes pass one at a time (both stores), so every store sees them in one order.
  From the first failed write until the queue has drained is a **divergence window**.
* **Backfill** (:meth:`copy`): what the source holds and the target lacks (or holds at another
  fire time) is armed into the target, except ids written to the target since it joined the
  dual write (those are current there, and newer than any export) and differences the re-arm
  decisions explain (the target is a fire behind and catches up by itself).
* **Execution.** Both stores run their own claim loops. Only the *executing* side's fires reach
  the real processor; the other side's are recorded and observed. Who executes is decided by a
  fire's **due time** (:meth:`DualState.executor`): a switch at T moves every fire due from T
  on, so both sides agree on every key and none is executed twice or left to the other. The
  observing side answers with the re-arm time the executing side decided for the same ``(timer
  id, due time)``, so both stores carry the same schedule (the re-arm's dual write). An observer
  never waits for that decision: waiting would hold its store's claim slots and make its lag
  the rehearsal's, not the design's. If it fires first it **parks** the timer (re-arms it
  ``max(decision_wait_s, PARK_MIN_S)`` out) and, once its store has committed and the decision
  is known, the dual writer writes the application's latest fire time into it (a follow:
  batched, through the store's outbox on failure). A parked timer that fires at its park time
  (no decision came) is counted ``undecided``, a mismatch the comparison sees.
* **Claim loops per store** (:class:`SideLoop`): started, stopped gracefully (``stop-old-writes``),
  crashed and restarted or stalled (faults), each on its own.

A shared effect ledger stands in for the application's durable trigger row (the Composio article:
"processors check the trigger's durable row before acting"): after a switch, a fire the other
store already executed is not executed again. The ledger also keeps the application's own view
of every timer (:attr:`DualState.expected`: the latest fire time armed or decided per id), which
is how a fire that neither store executed is found (:meth:`DualState.lost`).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from schedulers.base import Capabilities, Fire, Outcome, Processor, Scheduler, Timer, us

PRIMARY, SHADOW = "primary", "shadow"
SIDES = (PRIMARY, SHADOW)

MATCH_S = 0.001  # two stores agree on a fire time within this (both keep microseconds)
# A write to the store that is not the store of record slower than this counts as failed and is
# queued: the application waits no longer for the store it is moving to (a healthy one arms a
# few timers in milliseconds; the allowance grows with the batch).
WRITE_TIMEOUT_S = 2.0
WRITE_TIMEOUT_PER_TIMER_S = 0.001
RETRY_FIRST_S = 0.5  # the outbox replays after this, doubling per failed replay ...
RETRY_MAX_S = 5.0  # ... up to this
REPLAY_BATCH = 2000  # timers per replayed arm() call
COPY_BATCH = 2000  # timers per arm() call of a backfill or re-sync
LOOP_STOP_S = 60.0  # a store's run loop stops gracefully within this, or it is cancelled
# An observer that fires before the executor decided re-arms its store this far out until the
# decision is written into it (a store that is down meanwhile gets it from its outbox later).
PARK_MIN_S = 60.0
FOLLOW_FLUSH_S = 0.1  # parked timers brought to the executor's decision are written this often
CHAIN_HOPS = 8  # re-arm decisions followed when asking whether one store is catching up


def other(side: str) -> str:
    return SHADOW if side == PRIMARY else PRIMARY


def _one_line(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    if isinstance(exc, (TimeoutError, asyncio.TimeoutError)) and not text:
        text = "no answer within the write timeout"
    return f"{type(exc).__name__}: {text}"[:300]


@dataclass
class SideFires:
    """Fires seen on one side: per timer id, its due times with their lags, and its tenant."""

    by_id: dict[str, list[tuple[float, float]]] = field(default_factory=dict)  # id -> [(due, lag)]
    tenants: dict[str, str] = field(default_factory=dict)
    count: int = 0

    def add(self, timer_id: str, due_at: float, lag_s: float, tenant_id: str = "") -> None:
        self.by_id.setdefault(timer_id, []).append((due_at, lag_s))
        if tenant_id:
            self.tenants[timer_id] = tenant_id
        self.count += 1


@dataclass
class DualState:
    """What both sides share: who executes, the re-arm decisions, the effect ledger, the fires,
    and the application's own view of every timer."""

    decision_wait_s: float = 15.0
    switches: list[tuple[float, str]] = field(default_factory=list)  # (due from, side), ascending
    decisions: dict[tuple[str, float], float | None] = field(default_factory=dict)
    # observed before the decision: key -> side -> None (its store has not committed the park
    # yet) or the fire (committed, waiting for the decision)
    parked: dict[tuple[str, float], dict[str, Fire | None]] = field(default_factory=dict)
    park_times: set[tuple[str, float]] = field(default_factory=set)  # (id, park time) of every park
    parks: int = 0
    followed: int = 0  # parks brought to the executor's decision by a write
    on_follow: Callable[[str, Fire], None] | None = None  # set by the dual writer
    executed: dict[tuple[str, float], str] = field(default_factory=dict)  # key -> side that polled it first
    executions: dict[tuple[str, float], int] = field(default_factory=dict)  # key -> polls by the executor
    double_executed: list[tuple[str, float]] = field(default_factory=list)  # polled by both stores
    effects: dict[tuple[str, float], list[str]] = field(default_factory=dict)  # key -> sides delivered
    fires: dict[str, SideFires] = field(default_factory=lambda: {PRIMARY: SideFires(), SHADOW: SideFires()})
    expected: dict[str, float] = field(default_factory=dict)  # id -> latest fire time armed or decided
    undecided: int = 0
    skipped_already_done: int = 0
    closing: bool = False  # the run is stopping
    released_at_stop: int = 0  # parks still without a decision when the run stopped

    # -- who executes -----------------------------------------------------------------------

    def executor(self, due_at: float) -> str:
        """The side that executes fires due at ``due_at``: the latest switch whose due time it
        has reached (the old store before any). Deciding by due time, not by when a side
        happens to see the fire, keeps both sides agreeing on every key."""
        side = PRIMARY
        for due_from, s in self.switches:
            if due_at >= due_from:
                side = s
            else:
                break
        return side

    def switch(self, side: str, due_from: float) -> float:
        """Fires due from ``due_from`` on go to ``side``; returns the time used (never before an
        earlier switch)."""
        if self.switches:
            due_from = max(due_from, self.switches[-1][0])
        self.switches.append((due_from, side))
        return due_from

    @property
    def switch_at(self) -> float | None:
        """The first switch to the new store, if any."""
        return next((t for t, s in self.switches if s == SHADOW), None)

    # -- re-arm decisions -------------------------------------------------------------------

    def decide(self, key: tuple[str, float], next_fire_at: float | None) -> None:
        self.decisions[key] = next_fire_at
        waiting = self.parked.get(key)
        if not waiting:
            return
        for side, fire in list(waiting.items()):
            if fire is not None:  # its store has committed the park: bring it to the decision now
                del waiting[side]
                self._follow(side, fire)
        if not waiting:
            del self.parked[key]

    def park(self, side: str, fire: Fire, park_at: float) -> None:
        """``side`` observed ``fire`` before its executor decided: its store re-arms the timer at
        ``park_at`` until the decision is written into it (once the store has committed)."""
        self.parked.setdefault((fire.timer_id, us(fire.due_at)), {})[side] = None
        self.park_times.add((fire.timer_id, us(park_at)))
        self.parks += 1

    def park_committed(self, side: str, fire: Fire) -> None:
        """``side``'s store committed a parked fire: follow now if the decision is known, else
        when it comes (a write before the commit would be overwritten by the park)."""
        key = (fire.timer_id, us(fire.due_at))
        waiting = self.parked.get(key)
        if waiting is None or side not in waiting:
            return
        if key in self.decisions:
            del waiting[side]
            if not waiting:
                del self.parked[key]
            self._follow(side, fire)
        else:
            waiting[side] = fire

    def _follow(self, side: str, fire: Fire) -> None:
        self.followed += 1
        if self.on_follow is not None:
            self.on_follow(side, fire)

    def close(self) -> None:
        """The run stops: parks still waiting for a decision will not get one."""
        self.closing = True
        self.released_at_stop = sum(len(w) for w in self.parked.values())

    def explains(self, timer_id: str, a: float, b: float) -> bool:
        """True when one of two fire times of ``timer_id`` leads to the other through recorded
        re-arm decisions: one store is a fire (or a few) behind the other and will catch up by
        itself, which is lag, not drift."""
        for start, goal in ((a, b), (b, a)):
            t = us(start)
            for _ in range(CHAIN_HOPS):
                nxt = self.decisions.get((timer_id, t))
                if nxt is None:
                    break
                t = us(nxt)
                if abs(t - goal) < MATCH_S:
                    return True
        return False

    # -- the application's view ---------------------------------------------------------------

    def note_armed(self, timers: Sequence[Timer], now: float) -> None:
        for t in timers:
            self.expected[t.id] = us(now if t.fire_at is None else t.fire_at)

    def note_executed(self, side: str, key: tuple[str, float], next_fire_at: float | None) -> None:
        first = self.executed.setdefault(key, side)
        if first != side:
            self.double_executed.append(key)
        self.executions[key] = self.executions.get(key, 0) + 1
        self.decide(key, next_fire_at)
        timer_id, due = key
        if self.expected.get(timer_id) == due:  # a fire of a moved timer does not re-arm it (the move wins)
            if next_fire_at is None:
                self.expected.pop(timer_id, None)
            else:
                self.expected[timer_id] = us(next_fire_at)

    def lost(self, before: float) -> list[tuple[str, float]]:
        """Fires due before ``before`` that the application armed and no store executed."""
        return sorted(
            (tid, due) for tid, due in self.expected.items() if due < before and (tid, due) not in self.executed
        )

    def duplicate_effects(self) -> int:
        return sum(len(sides) - 1 for sides in self.effects.values() if len(sides) > 1)


class Outbox:
    """Writes to one store that failed, waiting to be replayed: the latest timer per id, in the
    order of their last write; and the divergence windows (first failure -> drained)."""

    def __init__(self, side: str) -> None:
        self.side = side
        self.pending: dict[str, Timer] = {}
        self.windows: list[dict[str, Any]] = []
        self.current: dict[str, Any] | None = None
        self.failed_writes = 0
        self.replayed = 0
        self.dropped = 0

    def queue(self, timers: Sequence[Timer]) -> None:
        for t in timers:
            self.pending.pop(t.id, None)
            self.pending[t.id] = t
        if self.current is not None:
            self.current["queued_max"] = max(self.current["queued_max"], len(self.pending))

    def failed(self, exc: BaseException, now: float, timers: int) -> None:
        """A write of ``timers`` timers attempted at ``now`` failed."""
        self.failed_writes += 1
        if self.current is None:
            self.current = {
                "side": self.side,
                "start": now,
                "end": None,
                "failed_writes": 0,
                "failed_timers": 0,
                "replay_failures": 0,
                "queued_max": 0,
                "replayed": 0,
                "dropped": 0,
                "first_error": _one_line(exc),
            }
        self.current["failed_writes"] += 1
        self.current["failed_timers"] += timers
        self.current["last_error"] = _one_line(exc)

    def replay_failed(self, exc: BaseException) -> None:
        if self.current is not None:
            self.current["replay_failures"] += 1
            self.current["last_error"] = _one_line(exc)

    def replayed_batch(self, ids: Sequence[str], now: float) -> None:
        for i in ids:
            self.pending.pop(i, None)
        self.replayed += len(ids)
        if self.current is not None:
            self.current["replayed"] += len(ids)
            if not self.pending:
                self.current["end"] = now
                self.windows.append(self.current)
                self.current = None

    def drop(self, now: float) -> int:
        """The store stopped being written: what is queued for it will never be written."""
        n = len(self.pending)
        self.pending.clear()
        self.dropped += n
        if self.current is not None:
            self.current["dropped"] += n
            self.current["end"] = now
            self.windows.append(self.current)
            self.current = None
        return n

    def report(self) -> list[dict[str, Any]]:
        """Every divergence window, the open one last (``end`` None, ``still_queued`` > 0)."""
        out = [dict(w) for w in self.windows]
        if self.current is not None:
            out.append({**self.current, "still_queued": len(self.pending)})
        return out


class SideProcessor:
    """Wraps the real processor for one side; executes or observes depending on the due time."""

    def __init__(self, side: str, real: Processor, dual: DualState, gate: asyncio.Event) -> None:
        self.side = side
        self.real = real
        self.dual = dual
        self.gate = gate  # cleared while this side's workers are stalled (a fault)

    async def process(self, fires: Sequence[Fire]) -> list[Outcome]:
        if not self.gate.is_set():
            await self.gate.wait()
        now = time.time()
        dual = self.dual
        record = dual.fires[self.side]
        for f in fires:
            record.add(f.timer_id, us(f.due_at), now - max(f.due_at, f.armed_at), f.tenant_id)
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
                # The other side polled this already (before a switch): act as its durable row says.
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
                dual.note_executed(self.side, (f.timer_id, us(f.due_at)), o.next_fire_at)
            out.append(o)
        return out

    async def _observe(self, fires: Sequence[Fire]) -> list[Outcome]:
        """Answer at once: the executor's decision when known, else park the timer (see
        :meth:`DualState.park`). Never waits, so the observing store's claim loop runs as it
        would on its own and its lag is the lag it would have had."""
        dual = self.dual
        now = time.time()
        out = []
        for f in fires:
            key = (f.timer_id, us(f.due_at))
            if key in dual.decisions:
                out.append(Outcome(next_fire_at=dual.decisions[key], new_state=None, effect=False))
                continue
            if key in dual.park_times:  # parked here before and no decision came for the park
                dual.undecided += 1
            park_at = now + max(dual.decision_wait_s, PARK_MIN_S)
            dual.park(self.side, f, park_at)
            out.append(Outcome(next_fire_at=park_at, new_state=None, effect=False))
        return out

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
            elif key in self.dual.parked:
                self.dual.park_committed(self.side, f)
        if mine_f:
            self.real.committed(mine_f, mine_d)


class SideLoop:
    """One store's claim loop inside the dual writer: running, stopped, crashed or stalled."""

    def __init__(self, side: str) -> None:
        self.side = side
        self.task: asyncio.Task | None = None
        self.stop: asyncio.Event | None = None
        self.gate = asyncio.Event()
        self.gate.set()
        self.starts = 0
        self.ending = False  # the loop was asked to end (a stop or a crash): its end is no failure
        self.stopped_at: float | None = None

    @property
    def running(self) -> bool:
        return self.task is not None and not self.task.done()

    def check(self) -> None:
        """Raise when the loop ended without being asked to."""
        t = self.task
        if t is None or not t.done() or self.ending:
            return
        if t.cancelled():
            raise RuntimeError(f"the {self.side} store's run loop was cancelled")
        exc = t.exception()
        if exc is not None:
            raise exc
        raise RuntimeError(f"the {self.side} store's run loop returned before it was stopped")


class DualWriteScheduler:
    """A Scheduler made of the old store (primary) and the new one (shadow)."""

    name = "dual"
    description = "dual-write rehearsal: a primary in charge, a shadow observed"
    needs_postgres = False
    needs_temporal = False
    default_options: dict[str, Any] = {}

    def __init__(
        self,
        primary: Scheduler,
        shadow: Scheduler,
        dual: DualState | None = None,
        *,
        write_timeout_s: float = WRITE_TIMEOUT_S,
    ) -> None:
        self.primary = primary
        self.shadow = shadow
        self.stores: dict[str, Scheduler] = {PRIMARY: primary, SHADOW: shadow}
        self.dual = dual or DualState()
        self.write_timeout_s = write_timeout_s
        self.writes: set[str] = {PRIMARY}  # the stores the application's writes reach
        self.joined_at: dict[str, float] = {PRIMARY: 0.0}  # when writes (last) started reaching a store
        self.written: dict[str, dict[str, float]] = {PRIMARY: {}, SHADOW: {}}  # id -> last write there
        self.outbox: dict[str, Outbox] = {s: Outbox(s) for s in SIDES}
        self.loops: dict[str, SideLoop] = {s: SideLoop(s) for s in SIDES}
        self.record_failures = 0  # application writes the store of record refused (raised to the caller)
        self._locks: dict[str, asyncio.Lock] = {}
        self._drains: dict[str, asyncio.Task] = {}
        self._procs: dict[str, dict[str, SideProcessor]] = {}
        self._wid = "dual"
        self._changed: asyncio.Event | None = None
        # parked observed fires to bring to the executor's decision, per store: id -> the fire
        self.follow_pending: dict[str, dict[str, Fire]] = {s: {} for s in SIDES}
        self.follow_writes = 0  # timers written by follows (re-armed or disarmed)
        self.follow_failed_disarms = 0
        self._followers: dict[str, asyncio.Task] = {}
        self.dual.on_follow = self._on_follow
        self.capabilities = Capabilities(
            max_lag_s=max(primary.capabilities.max_lag_s, shadow.capabilities.max_lag_s),
            heartbeat_leases=primary.capabilities.heartbeat_leases and shadow.capabilities.heartbeat_leases,
            redelivery_s=max(primary.capabilities.redelivery_s, shadow.capabilities.redelivery_s),
        )

    @property
    def claimed_timers(self) -> int:
        return int(self.primary.claimed_timers) + int(self.shadow.claimed_timers)

    # -- lifecycle ----------------------------------------------------------------------------

    async def setup(self) -> None:
        await self.primary.setup()
        await self.shadow.setup()

    async def teardown(self, drop: bool = True) -> None:
        self.cancel_replays()
        await self.primary.teardown(drop)
        await self.shadow.teardown(drop)

    def relations(self) -> list[str]:
        return self.primary.relations() + self.shadow.relations()

    async def export_armed(self) -> list[Timer]:
        return await self.stores[self.record_side()].export_armed()

    async def stats(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for side, sched in self.stores.items():
            for k, v in (await sched.stats()).items():
                out[f"{side}.{k}"] = v
            out[f"{side}.outbox"] = float(len(self.outbox[side].pending))
        out["undecided"] = float(self.dual.undecided)
        return out

    # -- writes ---------------------------------------------------------------------------------

    def record_side(self) -> str:
        """The store of record: the old one while it is written, else the new one."""
        return PRIMARY if PRIMARY in self.writes else SHADOW

    def _lock(self, side: str) -> asyncio.Lock:
        lock = self._locks.get(side)
        if lock is None:
            lock = self._locks[side] = asyncio.Lock()
        return lock

    async def start_writes(self, side: str) -> None:
        """From now on the application's writes reach ``side`` too. Taken between two writes: a
        write in flight reaches the stores it started with, and a backfill that follows sees it."""
        async with self._lock("arm"):
            if side not in self.writes:
                self.writes.add(side)
                self.joined_at[side] = time.time()

    async def stop_writes(self, side: str) -> int:
        """The application stops writing ``side``; returns how many queued writes were dropped."""
        async with self._lock("arm"):
            self.writes.discard(side)
            self.follow_pending[side].clear()
            return self.outbox[side].drop(time.time())

    def _timeout(self, timers: Sequence[Timer]) -> float:
        return self.write_timeout_s + WRITE_TIMEOUT_PER_TIMER_S * len(timers)

    def _mark(self, side: str, timers: Sequence[Timer], now: float) -> None:
        written = self.written[side]
        for t in timers:
            written[t.id] = now

    async def arm(self, timers: Sequence[Timer]) -> None:
        """The application's write: the store of record (raises on failure), then the other
        store when it is written too (queued on failure)."""
        timers = list(timers)
        if not timers:
            return
        # One write at a time, both stores: two concurrent writes of one id could otherwise land
        # in one order in the old store and in the other order in the new one (found by the
        # long-horizon check of a rehearsal: the arming of the population raced a move).
        async with self._lock("arm"):
            record = self.record_side()
            async with self._lock(record):  # a backfill or repair of this store never interleaves
                try:
                    await self.stores[record].arm(timers)
                except Exception:
                    self.record_failures += 1
                    raise
                now = time.time()
                self._mark(record, timers, now)
                # under the store's lock: a follow into it reads the application's view and
                # writes it in one go, so it never writes an older view over this write
                self.dual.note_armed(timers, now)
            for side in sorted(self.writes - {record}):
                await self._write(side, timers)

    async def disarm(self, ids: Sequence[str]) -> int:
        """The application removes timers: from every store it writes (the store of record's
        count is returned). Not queued on failure: a rehearsal never disarms on its own."""
        async with self._lock("arm"):
            counts = [
                await self.stores[side].disarm(ids)
                for side in sorted(self.writes, key=lambda s: s != self.record_side())
            ]
        return counts[0] if counts else 0

    async def _write(self, side: str, timers: list[Timer]) -> None:
        ob = self.outbox[side]
        async with self._lock(side):
            if ob.pending:  # behind what is queued, so that per-id order holds
                ob.queue(timers)
                return
            attempt = time.time()
            try:
                await asyncio.wait_for(self.stores[side].arm(timers), self._timeout(timers))
            except Exception as exc:
                ob.failed(exc, attempt, len(timers))  # the stores differ from the attempt on
                ob.queue(timers)
                self._ensure_replay(side)
                return
            self._mark(side, timers, time.time())

    def _ensure_replay(self, side: str) -> None:
        task = self._drains.get(side)
        if task is None or task.done():
            self._drains[side] = asyncio.create_task(self._replay(side))

    async def _replay(self, side: str) -> None:
        ob = self.outbox[side]
        delay = RETRY_FIRST_S
        while ob.pending:
            await asyncio.sleep(delay)
            async with self._lock(side):
                if not ob.pending:
                    break
                batch = list(ob.pending.values())[:REPLAY_BATCH]
                try:
                    await asyncio.wait_for(self.stores[side].arm(batch), self._timeout(batch))
                except Exception as exc:
                    ob.replay_failed(exc)
                    delay = min(delay * 2, RETRY_MAX_S)
                    continue
                now = time.time()
                self._mark(side, batch, now)
                ob.replayed_batch([t.id for t in batch], now)
                delay = RETRY_FIRST_S

    def cancel_replays(self) -> None:
        for task in [*self._drains.values(), *self._followers.values()]:
            task.cancel()
        self._drains.clear()
        self._followers.clear()

    # -- follows: a parked observer brought to the executor's decision -----------------------------

    def _on_follow(self, side: str, fire: Fire) -> None:
        if side not in self.writes:  # a store no longer written is not kept in step
            return
        self.follow_pending[side][fire.timer_id] = fire
        task = self._followers.get(side)
        if task is None or task.done():
            self._followers[side] = asyncio.create_task(self._follow_loop(side))

    async def _follow_loop(self, side: str) -> None:
        """Writes the application's latest fire time of every parked timer into ``side``, in
        batches: what the executor decided, or a newer application write (the move wins); a
        timer the executor finished is disarmed."""
        while self.follow_pending[side]:
            await asyncio.sleep(FOLLOW_FLUSH_S)
            # under the store's lock, like the application's writes to it (which note their fire
            # time under that lock too): no write can fall between reading the view and writing
            # it. Never under the application's write lock: its writes must not wait for a follow
            async with self._lock(side):
                pending, self.follow_pending[side] = self.follow_pending[side], {}
                expected = self.dual.expected
                timers = [
                    Timer(tid, expected[tid], f.type, f.tenant_id, f.priority)
                    for tid, f in pending.items()
                    if tid in expected
                ]
                gone = [tid for tid in pending if tid not in expected]
                if side not in self.writes:
                    continue
                ob = self.outbox[side]
                for lo in range(0, len(timers), COPY_BATCH):
                    chunk = timers[lo : lo + COPY_BATCH]
                    if ob.pending:
                        ob.queue(chunk)
                        continue
                    attempt = time.time()
                    try:
                        await asyncio.wait_for(self.stores[side].arm(chunk), self._timeout(chunk))
                        self._mark(side, chunk, time.time())
                    except Exception as exc:  # the store is down: the follow completes through its outbox
                        ob.failed(exc, attempt, len(chunk))
                        ob.queue(chunk)
                        self._ensure_replay(side)
                if gone:
                    try:
                        await asyncio.wait_for(self.stores[side].disarm(gone), self._timeout(gone))
                    except Exception:
                        self.follow_failed_disarms += len(gone)
                self.follow_writes += len(timers) + len(gone)

    async def copy(
        self, source: str, target: str, *, disarm_extra: bool = False, rearm_lagging: bool = False
    ) -> dict[str, Any]:
        """Bring ``target`` up to ``source`` (a backfill, or the re-sync of a rollback): arm what
        the target lacks or holds at another fire time; with ``disarm_extra`` also disarm what
        only the target holds. Ids written to the target since it joined the dual write are
        current there and left alone (checked under the target's write lock, right before each
        batch is written). Differences the re-arm decisions explain are lag, not drift, and left
        for the target to catch up on by firing, unless ``rearm_lagging`` (a target that was
        stopped: every fire it still holds is stale, and catching up one fire at a time would
        bury the fires due now behind the backlog)."""
        t0 = time.time()
        src, tgt = await asyncio.gather(self.stores[source].export_armed(), self.stores[target].export_armed())
        read_s = time.time() - t0
        since = self.joined_at.get(target, t0)
        have = {t.id: t.fire_at for t in tgt}
        src_ids = {t.id for t in src}
        todo: list[Timer] = []
        already = catching_up = 0
        for t in src:
            h = have.get(t.id)
            if h is not None and t.fire_at is not None and abs(h - t.fire_at) < MATCH_S:
                already += 1
            elif (
                not rearm_lagging and h is not None and t.fire_at is not None and self.dual.explains(t.id, h, t.fire_at)
            ):
                catching_up += 1
            else:
                todo.append(t)
        armed = skipped = 0
        written = self.written[target]
        for lo in range(0, len(todo), COPY_BATCH):
            chunk = todo[lo : lo + COPY_BATCH]
            async with self._lock(target):
                fresh = [t for t in chunk if written.get(t.id, -math.inf) < since]
                skipped += len(chunk) - len(fresh)
                if not fresh:
                    continue
                ob = self.outbox[target]
                if ob.pending:
                    ob.queue(fresh)
                else:
                    attempt = time.time()
                    try:
                        await asyncio.wait_for(self.stores[target].arm(fresh), self._timeout(fresh))
                        self._mark(target, fresh, time.time())
                    except Exception as exc:  # the target is down: the copy completes through its outbox
                        ob.failed(exc, attempt, len(fresh))
                        ob.queue(fresh)
                        self._ensure_replay(target)
                armed += len(fresh)
        disarmed = 0
        if disarm_extra:
            extra = [i for i in have if i not in src_ids]
            async with self._lock(target):
                extra = [i for i in extra if written.get(i, -math.inf) < since]
                if extra:
                    disarmed = await self.stores[target].disarm(extra)
        return {
            "source_armed": len(src),
            "target_armed_before": len(tgt),
            "copied": armed,
            "already_equal": already,
            "catching_up": catching_up,
            "skipped_written_since": skipped,
            "disarmed": disarmed,
            "read_s": read_s,
            "took_s": time.time() - t0,
        }

    async def repair(
        self, side: str, timers: Sequence[Timer], extra_ids: Sequence[str], since: float
    ) -> tuple[int, int]:
        """Reconcile's repair inside a dual write: arm ``timers`` into ``side`` and disarm
        ``extra_ids``, except ids written there since ``since`` (a newer write won). Returns
        (armed, disarmed)."""
        written = self.written[side]
        async with self._lock(side):
            fresh = [t for t in timers if written.get(t.id, -math.inf) < since]
            gone = [i for i in extra_ids if written.get(i, -math.inf) < since]
            if fresh:
                await self.stores[side].arm(fresh)
                self._mark(side, fresh, time.time())
            disarmed = await self.stores[side].disarm(gone) if gone else 0
        return len(fresh), disarmed

    # -- the claim loops ---------------------------------------------------------------------------

    async def run(self, processors: Mapping[str, Processor], stop: asyncio.Event, worker_id: str | None = None) -> None:
        """Both stores' claim loops until ``stop``; a loop may be stopped, crashed, restarted or
        stalled meanwhile (:meth:`stop_loop`, :meth:`crash_loop`, :meth:`start_loop`,
        :meth:`stall`). Raises when a loop ends without being asked to."""
        self._wid = worker_id or "dual"
        self._procs = {
            side: {t: SideProcessor(side, p, self.dual, self.loops[side].gate) for t, p in processors.items()}
            for side in SIDES
        }
        self._changed = asyncio.Event()
        for side in SIDES:
            if self.loops[side].starts == 0:
                self.start_loop(side)
        try:
            while not stop.is_set():
                tasks = {lp.task for lp in self.loops.values() if lp.running}
                stop_w = asyncio.ensure_future(stop.wait())
                changed = asyncio.ensure_future(self._changed.wait())
                try:
                    await asyncio.wait(tasks | {stop_w, changed}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    stop_w.cancel()
                    changed.cancel()
                self._changed.clear()
                for lp in self.loops.values():
                    lp.check()
            self.dual.close()
            await asyncio.gather(*(self.stop_loop(side) for side in SIDES))
            for lp in self.loops.values():
                lp.check()
        except asyncio.CancelledError:
            # a crash of the whole run: both loops crash with it
            tasks = [lp.task for lp in self.loops.values() if lp.running]
            for t in tasks:
                t.cancel()
            if tasks:
                await asyncio.wait(tasks, timeout=LOOP_STOP_S)
            raise
        finally:
            self.cancel_replays()

    def start_loop(self, side: str) -> None:
        lp = self.loops[side]
        if lp.running:
            return
        lp.starts += 1
        lp.ending = False
        lp.stopped_at = None
        lp.gate.set()
        lp.stop = asyncio.Event()
        wid = f"{self._wid}-{side}" + (f"-r{lp.starts - 1}" if lp.starts > 1 else "")
        lp.task = asyncio.create_task(self.stores[side].run(self._procs[side], lp.stop, worker_id=wid))
        if self._changed is not None:
            self._changed.set()

    async def stop_loop(self, side: str) -> None:
        """Gracefully: in-flight batches commit, then the loop returns."""
        lp = self.loops[side]
        lp.gate.set()
        if not lp.running:
            return
        lp.ending = True
        lp.stop.set()
        try:
            await asyncio.wait_for(asyncio.shield(lp.task), LOOP_STOP_S)
        except TimeoutError:
            lp.task.cancel()
            await asyncio.wait({lp.task})
        except BaseException:
            pass
        lp.stopped_at = time.time()

    async def crash_loop(self, side: str, unwind_s: float = 10.0) -> None:
        """A crash as schedulers/base.py defines it: the task is cancelled, nothing released."""
        lp = self.loops[side]
        if not lp.running:
            raise RuntimeError(f"the {side} store's run loop is not running")
        lp.ending = True
        lp.task.cancel()
        await asyncio.wait({lp.task}, timeout=unwind_s)
        lp.stopped_at = time.time()

    async def stall(self, side: str, seconds: float, done: asyncio.Event) -> None:
        """The side's workers stop processing for ``seconds`` (or until ``done``): claims stop
        once its in-flight batches are full; heartbeats go on, so it keeps what it holds."""
        gate = self.loops[side].gate
        gate.clear()
        try:
            await asyncio.wait_for(done.wait(), seconds)
        except TimeoutError:
            pass
        finally:
            gate.set()

    def loop_states(self) -> dict[str, str]:
        out = {}
        for side, lp in self.loops.items():
            if lp.running:
                out[side] = "stalled" if not lp.gate.is_set() else "running"
            else:
                out[side] = "stopped" if lp.starts else "not started"
        return out
