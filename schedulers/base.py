"""The one interface every scheduler design sits behind.

Times are floats: seconds since the Unix epoch, UTC (``time.time()``). Floats keep the
per-fire cost of the harness tiny; Postgres backends convert at the boundary with
``to_timestamp()`` / ``extract(epoch ...)``, which round to microseconds, so every key that
crosses a store is rounded with :func:`us` first.

Data flow, as in DESIGN.md: loadgen arms timers -> a scheduler's ``run`` claims due ones and
hands them in batches to a :class:`Processor` -> the processor polls and returns one
:class:`Outcome` per fire -> the scheduler commits state, effects and re-arms in **its own
transaction** -> it tells the processor which effects were delivered (``committed``).

Crash semantics, the contract the conformance suite leans on:

* setting the ``stop`` event is a graceful stop: ``run`` finishes or releases its batch;
* **cancelling** the ``run`` task is a crash: the backend must not release its claims on
  cancellation (no ``finally: release()``), its heartbeats simply stop, and the timers come back
  only when the lease (or stale-claim timeout) lapses.
"""

from __future__ import annotations

import asyncio
import importlib
from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol, Sequence, runtime_checkable


def us(t: float) -> float:
    """Round an epoch time to microseconds, the resolution of a Postgres ``timestamptz``."""
    return round(t, 6)


@dataclass(slots=True)
class Timer:
    """A timer to arm. Arming an existing ``id`` moves it: only the latest ``fire_at`` fires."""

    id: str
    fire_at: float | None  # epoch seconds, UTC; None means due now (seeds/000)
    type: str = "poll"  # names the processor that receives it
    tenant_id: str = "t0"
    priority: int = 0  # higher first (seeds/000 claim order)


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


@dataclass(frozen=True)
class Capabilities:
    """What a backend promises, so the conformance suite knows what to assert."""

    max_lag_s: float  # bound on fire lag in normal operation, with the backend's current options
    per_tenant_fairness: bool = False  # a huge tenant backlog cannot starve other tenants
    heartbeat_leases: bool = False  # a slow owner that is alive keeps its timers
    redelivery_s: float = 30.0  # how long a crashed owner's timers take to come back
    cancel: bool = False
    multi_runner: bool = True  # several run() loops may share one store
    at_least_once: bool = True


@dataclass(frozen=True)
class StoreContext:
    """Where a scheduler keeps its state. Each test or run gets its own ``schema``."""

    dsn: str | None = None
    schema: str = "timerbench"
    temporal_address: str | None = None
    temporal_namespace: str = "default"
    state_bytes: int = 4096  # size of the encrypted poll state (seeds/003: TOASTed)


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
    # Health checks read it (seeds/000: a dead tick loop behind a green API is the failure).
    default_options: dict[str, Any]
    needs_postgres: bool
    needs_temporal: bool

    async def setup(self) -> None:
        """Create schema, connections, workflows. Idempotent."""

    async def arm(self, timers: Sequence[Timer]) -> None:
        """Upsert by id; an existing id moves."""

    async def run(
        self, processors: Mapping[str, Processor], stop: asyncio.Event, worker_id: str | None = None
    ) -> None:
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
        """Every timer currently armed, with the fire time it will fire at (migration backfill
        and reconcile): what the store will actually fire, not merely what it was told."""

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
}


class UnknownScheduler(ValueError):
    pass


def scheduler_class(name: str) -> type:
    try:
        target = REGISTRY[name]
    except KeyError:
        raise UnknownScheduler(
            f"unknown scheduler {name!r}; choose one of: {', '.join(sorted(REGISTRY))}"
        ) from None
    module, _, cls = target.partition(":")
    return getattr(importlib.import_module(module), cls)


def create(name: str, ctx: StoreContext, **options: Any) -> Scheduler:
    return scheduler_class(name)(ctx, **options)


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
                if isinstance(default, bool):
                    if raw.lower() not in ("true", "false", "1", "0", "on", "off", "yes", "no"):
                        raise ValueError
                    out[key] = raw.lower() in ("true", "1", "on", "yes")
                elif isinstance(default, int):
                    out[key] = int(raw)
                elif isinstance(default, float):
                    out[key] = float(raw)
                else:
                    out[key] = raw
            except ValueError:
                raise ValueError(
                    f"bad value for scheduler option {key}: {raw!r} (expected {type(default).__name__})"
                ) from None
        return out
