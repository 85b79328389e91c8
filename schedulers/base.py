"""The one interface every scheduler design sits behind.

Times are floats: seconds since the Unix epoch, UTC (``time.time()``). Floats keep the
per-fire cost of the harness tiny; Postgres backends convert at the boundary with
``to_timestamp()`` / ``extract(epoch ...)``, which round to microseconds, so every key that
crosses a store is rounded with :func:`us` first.

Data flow, as in docs/design.md: loadgen arms timers -> a scheduler's ``run`` claims due ones and
hands them in batches to a :class:`Processor` -> the processor polls and returns one
:class:`Outcome` per fire -> the scheduler commits state, effects and re-arms in **its own
transaction** -> it tells the processor which effects were delivered (``committed``).

Crash semantics, the contract the conformance suite leans on:

* setting the ``stop`` event is a graceful stop: ``run`` finishes or releases its batch;
* **cancelling** the ``run`` task is a crash: the backend must not release its claims on
  cancellation (no ``finally: release()``), its heartbeats simply stop, and the timers come back
  only when the lease (or stale-claim timeout) lapses.

Two counts every backend keeps, because the run's loss and throughput accounting reads them
(``harness/session.py``), so a new backend must implement both before its runs mean anything:

* ``claimed_timers`` (attribute, int): every timer this instance's run loops **took ownership
  of**, cumulative since construction, counted when the claim commits (a row marked claimed or
  leased, a heap entry leased, a batch activity's rows claimed by key), whether or not the timer
  then reaches a processor. A timer claimed again after its lease lapsed, after a stale claim
  was taken over, or by a retried activity counts again: that is how redelivery shows as claim
  throughput above fire throughput. Timers merely armed, swept back or released are not claims.
* ``export_armed()``: every timer the backend **still holds**, i.e. will fire without anyone
  arming it again (scheduled, due, or claimed and in flight), with the fire time it holds it
  at; a timer that fired and was finished or re-armed past that time is not there at that time.
  At the end of a run the session asks it about every fire that was due and never delivered:
  still held means *pending* (a backlog), not held means *lost* (a failing run).

Two pieces every backend shares live here so that they are written once: :func:`resolve_options`
(the unknown-option check, the defaults, conversion to each default's type and the declared
ranges) and :class:`RunLoop` (the skeleton of ``run``: batches in flight, background tasks, and
the two ways out above).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


def us(t: float) -> float:
    """Round an epoch time to microseconds, the resolution of a Postgres ``timestamptz``."""
    return round(t, 6)


@dataclass(slots=True)
class Timer:
    """A timer to arm. Arming an existing ``id`` moves it: only the latest ``fire_at`` fires."""

    id: str
    fire_at: float | None  # epoch seconds, UTC; None means due now (null-due-now)
    type: str = "poll"  # names the processor that receives it
    tenant_id: str = "t0"
    priority: int = 0  # higher first (claim-order)


@dataclass(slots=True)
class Fire:
    """One delivery of a due timer to a processor."""

    timer_id: str
    tenant_id: str
    type: str
    due_at: float  # the fire_at that fired; for fire_at=None the time it was armed
    armed_at: float  # when this fire time was armed (lag counts from max(due_at, armed_at))
    attempt: int = 1  # 1 on first delivery of this (timer_id, due_at), +1 per redelivery
    worker: str = ""
    batch: int = 0  # the claim batch this fire came in, per worker
    state: bytes | None = None  # the trigger's poll state, if the backend keeps one
    priority: int = 0


@dataclass(slots=True)
class Outcome:
    """What a processor decided for one fire."""

    next_fire_at: float | None  # re-arm at this time; None: the timer is finished
    new_state: bytes | None = None  # None: the poll state did not change (skip the write)
    effect: bool = False  # the poll found events; recorded under (timer_id, due_at)


class Processor(Protocol):
    """The processor of one timer type (the polling processor in loadgen, or a test's)."""

    async def process(self, fires: Sequence[Fire]) -> Sequence[Outcome]:
        """Poll for every fire; return one outcome per fire, in order."""

    def committed(self, fires: Sequence[Fire], delivered: Sequence[bool]) -> None:
        """Called after the backend's commit: ``delivered[i]`` is True when fire i's effect was
        newly recorded under its ``(timer_id, due_at)`` key (False: no effect, or a duplicate
        the key suppressed)."""

    # Optional: ``stream(fires)``, an async iterator of ``(positions, outcomes)`` groups handed
    # back as their polls finish (every position exactly once). A backend that commits per fire
    # reads outcomes through :func:`outcomes_as_polls_finish`, which falls back to ``process``
    # (one group) for a processor without it.


async def outcomes_as_polls_finish(
    processor: Processor, fires: Sequence[Fire], per_group: bool = True
) -> AsyncIterator[tuple[list[int], Sequence[Outcome]]]:
    """``(positions, outcomes)`` groups of ``fires`` as their polls finish: the processor's
    ``stream`` when it has one (and ``per_group``), else one group when ``process`` returns. A
    design with batch semantics (one commit per claimed batch, as the articles' pollers) calls
    ``process`` instead."""
    stream = getattr(processor, "stream", None) if per_group else None
    if stream is None:
        yield list(range(len(fires))), await processor.process(fires)
        return
    async for group in stream(fires):
        yield group


@dataclass(frozen=True)
class Capabilities:
    """What a backend promises, so the conformance suite knows what to assert."""

    max_lag_s: float  # bound on fire lag in normal operation, with the backend's current options
    per_tenant_fairness: bool = False  # a huge tenant backlog cannot starve other tenants
    heartbeat_leases: bool = False  # a slow owner that is alive keeps its timers
    redelivery_s: float = 30.0  # how long a crashed owner's timers take to come back
    # a claimed timer stays with its owner at least this long after the claim, crashed or not:
    # redelivery never races an owner inside its lease (None: the backend declares no lease)
    lease_s: float | None = None
    cancel: bool = False
    multi_runner: bool = True  # several run() loops may share one store
    at_least_once: bool = True
    # How a commit treats the poll state (bench compare --state-writes holds every design to one):
    # "always" rewrites it on every fire, "skip-unchanged" only when the poll changed it; fixed:
    # the design has one policy (pg_queue's re-insert carries the state), reports mark its figures.
    state_writes: str | None = None
    state_writes_fixed: bool = False


@dataclass(frozen=True)
class StoreContext:
    """Where a scheduler keeps its state. Each test or run gets its own ``schema``."""

    dsn: str | None = None
    schema: str = "timerbench"
    temporal_address: str | None = None
    temporal_namespace: str = "default"
    state_bytes: int = 4096  # size of the encrypted poll state (toasted-state)


@runtime_checkable
class Scheduler(Protocol):
    """Constructed as ``cls(ctx: StoreContext, **options)``.

    Class attributes every backend sets: ``name``, ``description`` (one line, for ``bench
    schedulers``), ``default_options`` (each with its unit in the name or a comment),
    ``conformance_options`` (short intervals for the conformance suite), ``needs_postgres`` and
    ``needs_temporal`` (which servers the stack must provide). ``capabilities`` is per instance,
    since bounds depend on options.
    """

    name: str
    description: str
    capabilities: Capabilities
    last_tick_at: float  # epoch s of the latest claim-loop iteration; 0.0 before run() starts.
    # Health checks read it (health-endpoints: a dead tick loop behind a green API is the failure).
    claimed_timers: int  # timers claimed by this instance's run loops, re-claims included (see above)
    default_options: dict[str, Any]
    needs_postgres: bool
    needs_temporal: bool

    async def setup(self) -> None:
        """Create schema, connections, workflows. Idempotent."""

    async def arm(self, timers: Sequence[Timer]) -> None:
        """Upsert by id; an existing id moves."""

    async def run(self, processors: Mapping[str, Processor], stop: asyncio.Event, worker_id: str | None = None) -> None:
        """Claim due timers and hand them to their type's processor until ``stop`` is set."""

    async def stats(self) -> dict[str, float]:
        """Backend counters and gauges, read by the metrics sampler every second while a run is
        measured, so they must not disturb it: in-process counters, or by-key reads of small
        control tables the design reads anyway (shard counts). Never a scan or a count over the
        design's tables: the engine counts the queue itself (the sampler's ``backlog``) and reads
        row counts from the statistics views."""

    def relations(self) -> list[str]:
        """Schema-qualified tables the metrics sampler should watch (with their TOAST)."""

    async def export_armed(self) -> list[Timer]:
        """Every timer the backend still holds, at the fire time it will fire at (see above): what
        the store will actually fire, not merely what it was told. Migration backfill and
        reconcile copy and compare it; the run's lost-versus-pending judgement reads it."""

    async def disarm(self, ids: Sequence[str]) -> int:
        """Remove these timers so that they never fire; returns how many were armed. Migration
        reconcile ``--repair`` only (a timer the source store does not have), not a caller-facing
        cancel (``capabilities.cancel`` says whether a design offers one)."""

    async def teardown(self, drop: bool = True) -> None:
        """Close connections; drop the schema when ``drop``. Idempotent."""


# name -> "module:Class". A backend joins the suite by adding one line here.
REGISTRY: dict[str, str] = {
    "memory": "schedulers.memory:MemoryScheduler",
    "temporal_shards": "schedulers.temporal_shards:TemporalShardsScheduler",
    "pg_leased": "schedulers.pg_leased:PgLeasedScheduler",
    "pg_queue": "schedulers.pg_queue:PgQueueScheduler",
    "pg_partitioned": "schedulers.pg_partitioned:PgPartitionedScheduler",
    "temporal_per_trigger": "schedulers.temporal_per_trigger:TemporalPerTriggerScheduler",
    "dbos_workflows": "schedulers.dbos_workflows:DbosWorkflowsScheduler",
    "procrastinate": "schedulers.procrastinate:ProcrastinateScheduler",
    "pgqueuer": "schedulers.pgqueuer:PgqueuerScheduler",
}


class UnknownScheduler(ValueError):
    pass


def scheduler_class(name: str) -> type:
    try:
        target = REGISTRY[name]
    except KeyError:
        raise UnknownScheduler(f"unknown scheduler {name!r}; choose one of: {', '.join(sorted(REGISTRY))}") from None
    module, _, cls = target.partition(":")
    return getattr(importlib.import_module(module), cls)


def create(name: str, ctx: StoreContext, **options: Any) -> Scheduler:
    return scheduler_class(name)(ctx, **options)


# -- options ------------------------------------------------------------------------------

_TRUE = ("true", "1", "on", "yes")
_FALSE = ("false", "0", "off", "no")


def convert_option(default: Any, value: Any) -> Any:
    """``value`` as the type of ``default`` (a string is parsed as on the command line); raises
    ``ValueError`` when it is not one. A string-typed default accepts anything (a backend may
    take a mapping where the command line gives a string)."""
    if isinstance(default, bool):
        if isinstance(value, str):
            if value.lower() not in _TRUE + _FALSE:
                raise ValueError(value)
            return value.lower() in _TRUE
        return bool(value)
    if isinstance(default, int):
        return int(value)
    if isinstance(default, float):
        return float(value)
    return value


@dataclass(frozen=True)
class Range:
    """The accepted values of a numeric option: ``lo <= v <= hi``, or ``lo < v < hi`` when ``open``."""

    lo: float | None = None
    hi: float | None = None
    open: bool = False

    def __contains__(self, value: float) -> bool:
        if self.open:
            return (self.lo is None or value > self.lo) and (self.hi is None or value < self.hi)
        return (self.lo is None or value >= self.lo) and (self.hi is None or value <= self.hi)

    def __str__(self) -> str:
        if self.lo is not None and self.hi is not None:
            return f"in ({self.lo}, {self.hi})" if self.open else f"in [{self.lo}, {self.hi}]"
        if self.lo is not None:
            return f"{'>' if self.open else '>='} {self.lo}"
        return f"{'<' if self.open else '<='} {self.hi}"


def resolve_options(
    scheduler: str,
    defaults: Mapping[str, Any],
    given: Mapping[str, Any],
    ranges: Mapping[str, Range] | None = None,
) -> dict[str, Any]:
    """A backend's options: ``given`` checked against ``defaults`` (an unknown key is an error
    naming the valid ones), merged over them, each converted to its default's type and checked
    against its declared :class:`Range`. Every backend's ``__init__`` starts with this."""
    unknown = sorted(set(given) - set(defaults))
    if unknown:
        raise ValueError(
            f"unknown {scheduler} option(s) {', '.join(unknown)}; choose from: {', '.join(sorted(defaults))}"
        )
    out: dict[str, Any] = {}
    for key, default in defaults.items():
        value = given.get(key, default)
        try:
            out[key] = convert_option(default, value)
        except (TypeError, ValueError):
            raise ValueError(
                f"bad value for {scheduler} option {key}: {value!r} (expected {type(default).__name__})"
            ) from None
    for key, accepted in (ranges or {}).items():
        if out[key] not in accepted:
            raise ValueError(f"{scheduler}: {key} must be {accepted}, got {out[key]}")
    return out


@dataclass
class OptionSpec:
    """Parses ``--opt key=value`` strings against a scheduler's option defaults."""

    defaults: dict[str, Any] = field(default_factory=dict)

    def parse(self, pairs: Sequence[str]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for pair in pairs:
            key, sep, raw = pair.partition("=")
            if not sep or key not in self.defaults:
                valid = ", ".join(sorted(self.defaults)) or "none"
                raise ValueError(f"bad scheduler option {pair!r}; use key=value with key one of: {valid}")
            default = self.defaults[key]
            try:
                out[key] = convert_option(default, raw)
            except ValueError:
                raise ValueError(
                    f"bad value for scheduler option {key}: {raw!r} (expected {type(default).__name__})"
                ) from None
        return out


# -- the run loop ---------------------------------------------------------------------------


async def nap(seconds: float, *events: asyncio.Event) -> None:
    """Sleep ``seconds``, or less when one of ``events`` is set."""
    if len(events) == 1:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(events[0].wait(), timeout=seconds)
        return
    waits = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waits, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()


class Room:
    """What a run loop may hold in flight, in batches or in fires: taken before a claim, given
    back as the claimed work commits."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.free = size
        self._changed = asyncio.Event()

    async def take(self, n: int, least: int | None = None) -> int:
        """Wait until at least ``least`` (default ``n``) is free; take up to ``n`` of it and say
        how much was taken."""
        least = min(n if least is None else least, self.size)
        while self.free < least:
            self._changed.clear()
            await self._changed.wait()
        got = min(n, self.free)
        self.free -= got
        return got

    def give(self, n: int) -> None:
        if n > 0:
            self.free += n
            self._changed.set()


class Held:
    """The room one batch holds; :meth:`give` returns part of it as fires commit, and the run
    loop returns the rest when the batch ends, however it ends."""

    def __init__(self, room: Room, n: int) -> None:
        self.room = room
        self.n = n

    def give(self, n: int) -> None:
        n = min(n, self.n)
        self.n -= n
        self.room.give(n)


class RunLoop:
    """The skeleton of every ``run()``: batches in flight, background tasks, and the two ways out
    of the contract at the top of this module.

    ::

        async with RunLoop(inflight_batches) as loop:
            loop.keep(self._heartbeat(...))            # ends with run(), however it ends
            while not stop.is_set():
                if not await loop.take_slot(stop):     # all batches busy: wait; False once stopping
                    break
                ...claim...
                loop.start_batch(self._process, ...)   # gives its slot back when it ends

    A design that commits per fire counts its room in fires instead (``RunLoop(fires_in_flight=
    inflight_batches * batch)``): ``room = take_slot(stop, batch, least=batch // 2)`` before a
    claim of at most ``room`` rows, ``give_back`` what the claim did not fill, and
    ``start_stream(process, ..., size=claimed)``, whose ``process`` gets a :class:`Held` and gives
    rows back as their groups commit. A batch's slowest poll then holds back only its own row,
    not a whole batch's room (head-of-line blocking).

    Leaving the block normally (``stop`` was set) is a **graceful stop**: in-flight batches
    commit before ``run`` returns. Cancelling ``run`` is a **crash**: in-flight batches are
    cancelled and nothing is released, so claims and leases lapse on their own. An error from
    the body propagates as it is. In every case the background tasks are cancelled; those kept
    with ``join=True`` (a worker that must be gone before ``run`` returns) are also awaited.
    """

    def __init__(self, inflight_batches: int = 1, *, fires_in_flight: int | None = None) -> None:
        self.room = Room(fires_in_flight if fires_in_flight is not None else inflight_batches)
        self.inflight: set[asyncio.Task] = set()
        self.batch_errors = 0
        self._keepers: list[tuple[asyncio.Task, bool]] = []

    async def __aenter__(self) -> RunLoop:
        return self

    async def __aexit__(self, exc_type, exc, tb) -> bool:
        try:
            if exc_type is None:
                if self.inflight:  # graceful stop: let in-flight batches commit
                    await asyncio.gather(*self.inflight, return_exceptions=True)
            elif issubclass(exc_type, asyncio.CancelledError):
                self._crash()
        except asyncio.CancelledError:  # cancelled while draining: a crash after all
            self._crash()
            raise
        finally:
            for task, _ in self._keepers:
                task.cancel()
            for task, join in self._keepers:
                if join:
                    with contextlib.suppress(BaseException):
                        await task
        return False

    def _crash(self) -> None:
        # In-flight batches die with their owner; their claims are left to lapse.
        for task in self.inflight:
            task.cancel()

    def keep(self, coro: Coroutine[Any, Any, Any], join: bool = False) -> asyncio.Task:
        """Run a background task (heartbeat, sweeper, worker) for as long as ``run`` runs."""
        task = asyncio.create_task(coro)
        self._keepers.append((task, join))
        return task

    async def take_slot(self, stop: asyncio.Event, n: int = 1, least: int | None = None) -> int:
        """Wait for room for ``n`` (one batch), or for at least ``least`` of ``n`` fires; returns
        the room taken, which the claim must not exceed. 0, with the room given back, when
        ``stop`` was set meanwhile: a loop that is stopping claims nothing more."""
        got = await self.room.take(n, least)
        if stop.is_set():
            self.room.give(got)
            return 0
        return got

    def give_back(self, n: int = 1) -> None:
        """Return room taken with :meth:`take_slot` that no batch holds (a claim came back
        short or empty)."""
        self.room.give(n)

    def start_batch(self, process: Callable[..., Awaitable[Any]], *args: Any) -> asyncio.Task:
        """Process one claimed batch in the slot the caller took; the slot is given back when
        ``process(*args)`` ends, however it ends."""
        return self._start(process, args, Held(self.room, 1), pass_held=False)

    def start_stream(self, process: Callable[..., Awaitable[Any]], *args: Any, size: int) -> asyncio.Task:
        """Process ``size`` claimed fires in the room the caller took: ``process(*args, held)``
        gives rows back with ``held.give(n)`` as they commit; the rest comes back when it ends."""
        return self._start(process, args, Held(self.room, size), pass_held=True)

    def _start(self, process: Callable[..., Awaitable[Any]], args: tuple, held: Held, pass_held: bool) -> asyncio.Task:
        task = asyncio.create_task(self._in_slot(process, args + (held,) if pass_held else args, held))
        self.inflight.add(task)
        task.add_done_callback(self.inflight.discard)
        return task

    async def _in_slot(self, process: Callable[..., Awaitable[Any]], args: tuple, held: Held) -> None:
        try:
            await process(*args)
        except Exception:
            # Nobody awaits a batch task: say it failed here, or it vanishes as "Task exception
            # was never retrieved". Its timers come back as the backend's claims lapse.
            self.batch_errors += 1
            logging.getLogger("timerbench.schedulers").exception("a batch failed; its claims will lapse")
        finally:
            held.give(held.n)


# -- gauges a backend may share ------------------------------------------------------------

EXPECTED_TIMERS = "expected_timers"  # option: a backend that sizes itself by the population declares it


def with_expected_timers(defaults: Mapping[str, Any], options: Mapping[str, Any], timers: int) -> dict[str, Any]:
    """``options`` with :data:`EXPECTED_TIMERS` set to ``timers`` (the population a run is about
    to arm) when the backend declares that option and it is still 0 (unknown): the run tells a
    backend its size up front, and config.json records what it was told."""
    out = dict(options)
    if EXPECTED_TIMERS in defaults and not out.get(EXPECTED_TIMERS):
        out[EXPECTED_TIMERS] = int(timers)
    return out


BATCH_SIZE_BIN = 25  # timers: width of a bin of the batch-size histogram
# gauge names; metrics.rundir reads them (and names them again, since reports never import schedulers)
BATCH_SIZE_BIN_GAUGE = "batch_size_bin_"  # + upper edge: batches of (edge - BATCH_SIZE_BIN, edge] timers
BATCHES_CLOSED_GAUGE = "batches_closed_"  # + reason: batches flushed for that reason (full, max_lag)
BATCH_BIN_WIDTH_GAUGE = "batches_bin_width"  # BATCH_SIZE_BIN, so a reader needs no constant


class BatchSizes:
    """Sizes of the batches a backend hands to its processors, as cumulative ``stats()``
    counters, so the sampler records them every second and a report can take any window's
    histogram as the difference of two samples (no per-batch file, nothing to gather from
    nodes). Gauges: ``batches``, ``batched_timers``, one ``batch_size_bin_<edge>`` per bin that
    has seen a batch (bins ``BATCH_SIZE_BIN`` timers wide, named by their upper edge, the width
    in ``batches_bin_width``) and ``batches_closed_<reason>`` when the backend says why it closed
    each batch. The counters are this process's: with ``--nodes`` the batches run elsewhere."""

    def __init__(self) -> None:
        self.batches = 0
        self.timers = 0
        self.bins: dict[int, int] = {}  # upper edge -> batches
        self.closed: dict[str, int] = {}  # reason -> batches

    def add(self, size: int, closed_by: str = "") -> None:
        self.batches += 1
        self.timers += size
        edge = max(1, -(-size // BATCH_SIZE_BIN)) * BATCH_SIZE_BIN
        self.bins[edge] = self.bins.get(edge, 0) + 1
        if closed_by:
            self.closed[closed_by] = self.closed.get(closed_by, 0) + 1

    def gauges(self) -> dict[str, float]:
        out = {
            "batches": float(self.batches),
            "batched_timers": float(self.timers),
            BATCH_BIN_WIDTH_GAUGE: float(BATCH_SIZE_BIN),
        }
        out.update({f"{BATCH_SIZE_BIN_GAUGE}{edge}": float(n) for edge, n in sorted(self.bins.items())})
        out.update({f"{BATCHES_CLOSED_GAUGE}{reason}": float(n) for reason, n in sorted(self.closed.items())})
        return out
