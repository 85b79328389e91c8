"""What the conformance checks (and the per-backend tests) are written with: a recording
processor, background ``run`` loops that can be stopped or crashed, polling for a condition, and
the time bounds the checks allow. Backend-neutral: nothing here may ask which backend it is."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from schedulers.base import Fire, Outcome, Scheduler, Timer, us

CLOCK_TOLERANCE_S = 0.1  # small clock tolerance for "never early" (one machine, one clock)
# On top of a design's declared lag bound (capabilities.max_lag_s), the checks allow this much for
# the machine: an event loop or a server descheduled on a loaded 2-core machine. The same in the
# proofs on broken schedulers and in their controls; a design that needs more declares more.
LAG_SLACK_S = 1.0

Factory = Callable[[], Awaitable[Scheduler]]


@dataclass
class Received:
    timer_id: str
    tenant_id: str
    due_at: float
    received_at: float
    worker: str
    attempt: int
    batch_no: int  # the order in which this processor was handed the batch
    claim_no: int  # Fire.batch: the claim it came in, numbered from 0 per worker


@dataclass
class RecordingProcessor:
    """Records every fire; finishes the timer (no re-arm) and reports an effect for each."""

    hold: asyncio.Event | None = None  # when set, process() waits for it (a slow or dead owner)
    hold_s: float = 0.0  # or sleeps this long before answering
    received: list[Received] = field(default_factory=list)
    delivered: dict[tuple[str, float], int] = field(default_factory=dict)
    batches: list[list[Received]] = field(default_factory=list)
    in_process: int = 0

    async def process(self, fires: Sequence[Fire]) -> list[Outcome]:
        now = time.time()
        batch = [
            Received(f.timer_id, f.tenant_id, f.due_at, now, f.worker, f.attempt, len(self.batches), f.batch)
            for f in fires
        ]
        self.batches.append(batch)
        self.received.extend(batch)
        self.in_process += 1
        try:
            if self.hold is not None:
                await self.hold.wait()
            if self.hold_s:
                await asyncio.sleep(self.hold_s)
        finally:
            self.in_process -= 1
        return [Outcome(next_fire_at=None, new_state=None, effect=True) for _ in fires]

    def committed(self, fires: Sequence[Fire], delivered: Sequence[bool]) -> None:
        for f, d in zip(fires, delivered):
            if d:
                key = (f.timer_id, us(f.due_at))
                self.delivered[key] = self.delivered.get(key, 0) + 1

    def ids(self) -> set[str]:
        return {r.timer_id for r in self.received}

    def of(self, timer_id: str) -> list[Received]:
        return [r for r in self.received if r.timer_id == timer_id]

    def first_claim(self) -> list[Received]:
        """The fires of the first claim (``Fire.batch`` 0), whichever batch was processed first:
        a backend with several claims in flight may hand a later claim over first."""
        return [r for r in self.received if r.claim_no == 0]


@dataclass
class HalfThenHangs(RecordingProcessor):
    """A processor that hands outcomes back as polls finish (``stream``): the first half of each
    batch at once, then it hangs on ``hold`` (the owner dies with the slow polls out). Its
    ``process`` (what a design with batch semantics calls) hangs on ``hold`` for the whole batch."""

    streamed: int = 0  # outcomes handed back through stream

    async def stream(self, fires: Sequence[Fire]):
        positions = list(range(len(fires)))
        half = (len(fires) + 1) // 2
        now = time.time()
        batch = [
            Received(f.timer_id, f.tenant_id, f.due_at, now, f.worker, f.attempt, len(self.batches), f.batch)
            for f in fires
        ]
        self.batches.append(batch)
        self.received.extend(batch)
        self.streamed += half
        yield positions[:half], [Outcome(next_fire_at=None, new_state=None, effect=True) for _ in range(half)]
        self.in_process += 1
        try:
            if self.hold is not None:
                await self.hold.wait()
        finally:
            self.in_process -= 1
        self.streamed += len(fires) - half
        yield positions[half:], [Outcome(next_fire_at=None, new_state=None, effect=True) for _ in positions[half:]]


class Runner:
    """``run`` loops started in the background; cancelling one is a crash (see schedulers.base)."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        self.tasks: list[tuple[asyncio.Task, asyncio.Event]] = []

    def start(self, processor: RecordingProcessor, worker_id: str, type_: str = "poll") -> asyncio.Task:
        stop = asyncio.Event()
        task = asyncio.create_task(self.scheduler.run({type_: processor}, stop, worker_id=worker_id))
        self.tasks.append((task, stop))
        return task

    async def crash(self, task: asyncio.Task) -> None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task

    async def stop_all(self) -> None:
        for _task, stop in self.tasks:
            stop.set()
        for task, _ in self.tasks:
            if not task.done():
                try:
                    await asyncio.wait_for(task, timeout=30)
                except (TimeoutError, asyncio.CancelledError):
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await task
            elif not task.cancelled() and task.exception() is not None:
                raise task.exception()


async def wait_until(predicate: Callable[[], bool], timeout_s: float, poll_s: float = 0.05) -> bool:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if predicate():
            return True
        await asyncio.sleep(poll_s)
    return predicate()


@contextlib.asynccontextmanager
async def running(factory: Factory):
    scheduler = await factory()
    runner = Runner(scheduler)
    try:
        yield scheduler, runner
    finally:
        await runner.stop_all()
        await scheduler.teardown(drop=True)


async def until_exported(s: Scheduler, want: dict[str, float], timeout_s: float) -> dict[str, Timer]:
    """Read ``export_armed`` until it lists exactly ``want`` (id -> fire time), or time runs out;
    returns the last read."""
    deadline = time.time() + timeout_s
    while True:
        got = {t.id: t for t in await s.export_armed()}
        same = set(got) == set(want) and all(abs(got[k].fire_at - v) < 0.001 for k, v in want.items())
        if same or time.time() > deadline:
            return got
        await asyncio.sleep(0.2)


def bound_s(scheduler: Scheduler) -> float:
    """The lag a check allows: the declared bound plus :data:`LAG_SLACK_S`."""
    return scheduler.capabilities.max_lag_s + LAG_SLACK_S


@dataclass
class HoldsFirstBatches(RecordingProcessor):
    """Records like :class:`RecordingProcessor`. Every batch that arrives before ``release`` is
    set is held until it is, then re-arms its timers ``rearm_in_s`` out; later batches finish
    their timers (no re-arm)."""

    release: asyncio.Event = field(default_factory=asyncio.Event)
    rearm_in_s: float = 3600.0

    async def process(self, fires: Sequence[Fire]) -> list[Outcome]:
        held = not self.release.is_set()
        outcomes = await super().process(fires)
        if not held:
            return outcomes
        self.in_process += 1
        try:
            await self.release.wait()
        finally:
            self.in_process -= 1
        return [Outcome(next_fire_at=time.time() + self.rearm_in_s, new_state=None, effect=True) for _ in fires]


async def harmless(call: Awaitable[None], what: str) -> None:
    """Await a lifecycle call that must not fail; its error becomes the check's failure."""
    try:
        await call
    except Exception as exc:
        raise AssertionError(f"{what} raised {exc!r}") from exc
