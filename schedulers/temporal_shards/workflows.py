"""The workflows of temporal_shards (the Composio article's "after"): shard, batch poller, controller.

They run in the Temporal workflow sandbox: deterministic, no I/O, time from ``workflow.now()``.
Everything that touches Postgres or other shards is an activity (``activities.py``), referred to
here by name so this module never imports psycopg.

A timer travels as a compact list (payloads stay small: the article caps a shard at 5,000 timers
to keep the Continue-As-New payload well under Temporal's 2 MB):
``[id, fire_at, version, armed_at, type, tenant_id, priority]`` (times in epoch seconds). The
``version`` is the trigger row's; a higher version of an id replaces a lower one (re-arm moves).

The Continue-As-New payload (the heap, the idempotency keys and the config a shard carries
forward) is counted, not assumed: its size as the workflow's own payload converter encodes it
(what the server checks against its blob size limit, ``limit.blobSize.error``, 2 MB by default)
is kept exact as timers and keys come and go (:class:`PayloadSize`: the encoding of the rest once,
then each timer's JSON bytes added and taken away), and the command itself is encoded and checked
at every Continue-As-New. A shard whose payload passes ``split_payload_frac`` of
``payload_limit_bytes`` **splits**: it grows the ring by one shard and forwards its farthest
timers (any horizon) to their places on the grown ring, until it is back under half that mark. A
Continue-As-New that would still exceed the limit is postponed (the shard keeps running and sheds
again) instead of sending a command the server would reject, which would fail the shard workflow
and every timer in it. Every other message carrying timers (an arm signal,
a batch poller's input, a forward) is cut into pieces of at most a quarter of the limit
(:func:`chunks`), and ``arm()`` refuses a timer that alone would pass that quarter.
"""

from __future__ import annotations

import asyncio
import dataclasses
import heapq
import json
from dataclasses import dataclass, field
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.workflow import ParentClosePolicy

# Field positions of a timer list.
E_ID, E_FIRE, E_VER, E_ARMED, E_TYPE, E_TENANT, E_PRIO = range(7)

# The type of a message's timers: a bare list, so the payload converter copies the outer list and
# keeps each timer as JSON decoded it (given ``list[list]`` it converts every timer in Python).
Timers = list

SHARD_WORKFLOW = "TimerShard"
POLLER_WORKFLOW = "BatchPoller"
CONTROLLER_WORKFLOW = "ShardController"
ARM_SIGNAL = "arm"
ARMED_QUERY = "armed"
KEYS_REMEMBERED = 4096  # idempotency keys a shard remembers (carried across Continue-As-New)
HANDED_FOR_S = 60.0  # the 'armed' query reports a timer handed to a batch poller this long
PAYLOAD_LIMIT_BYTES = 2 * 1024 * 1024  # Temporal's limit.blobSize.error default (can-2mb)
SPLIT_RETRY_S = 1.0  # a shard past the split mark tries to split at most this often (workflow time)
CLOSED_FULL = "full"  # a batch flushed because it reached its type's batch size
CLOSED_MAX_LAG = "max_lag"  # a batch flushed because its oldest timer had waited MaxLag (maxlag-10s)


def chunk_bytes(limit_bytes: int) -> int:
    """Largest encoded size of the timers one signal or activity input carries: a quarter of the
    payload limit, so a message never nears the limit whatever else it holds."""
    return max(1, limit_bytes // 4)


def timer_bytes(t: list) -> int:
    """Encoded size of one timer in a JSON payload (the default converter), separator included."""
    return len(json.dumps(t, separators=(",", ":"))) + 1


def timers_bytes(timers: list[list]) -> int:
    """The sum of :func:`timer_bytes` over ``timers``, from one encoding of the whole list (the
    list's brackets and separators are one byte per timer and one more)."""
    return len(json.dumps(timers, separators=(",", ":"))) - 1 if timers else 0


def chunks(timers: list[list], max_bytes: int, nbytes: int | None = None) -> list[list[list]]:
    """``timers`` in order, cut so that each piece encodes to at most ``max_bytes`` (a single
    timer larger than that travels alone; the caller refuses those first). ``nbytes``: their
    :func:`timers_bytes`, when the caller has it."""
    if timers and (timers_bytes(timers) if nbytes is None else nbytes) + 1 <= max_bytes:
        return [list(timers)]  # the common case, without sizing each timer in Python
    out: list[list[list]] = []
    cur: list[list] = []
    size = 1  # the list's brackets, less the separator its last timer does not need
    for t in timers:
        b = timer_bytes(t)
        if cur and size + b > max_bytes:
            out.append(cur)
            cur, size = [], 1
        cur.append(t)
        size += b
    if cur:
        out.append(cur)
    return out


@dataclass
class ShardConfig:
    """Everything a shard needs, carried in its input so it survives Continue-As-New."""

    prefix: str  # workflow-id prefix of this scheduler instance
    task_queue: str
    batch: int  # default batch size per timer type (batch-800)
    max_lag_s: float  # default MaxLag per timer type (maxlag-10s: 10 s for polling)
    per_type: dict[str, list[float]] = field(default_factory=dict)  # type -> [batch, max_lag_s]
    timer_cap: int = 5000  # shard-cap-5000: timers per shard, for payload headroom
    history_bound: int = 10_000  # continue as new past this many events (or when suggested)
    util_report_s: float = 10.0  # how often the shard writes its timer count
    forward_horizon_s: float = 86_400.0  # an overloaded shard forwards timers due later than this
    lease_s: float = 30.0  # batch activity heartbeat timeout, and the Postgres lease
    retry_initial_s: float = 0.2  # first retry of a failed batch activity
    payload_limit_bytes: int = PAYLOAD_LIMIT_BYTES  # the server's limit on one payload (Continue-As-New input)
    split_payload_frac: float = 0.5  # a shard whose payload passes this share of the limit splits

    def split_at_bytes(self) -> int:
        return int(self.payload_limit_bytes * self.split_payload_frac)

    def type_batch(self, type_: str) -> int:
        got = self.per_type.get(type_)
        return int(got[0]) if got else self.batch

    def type_max_lag(self, type_: str) -> float:
        got = self.per_type.get(type_)
        return float(got[1]) if got else self.max_lag_s


@dataclass
class ShardInput:
    shard: int
    config: ShardConfig
    timers: Timers = field(default_factory=list)  # the heap (and pending) carried forward
    keys: list[str] = field(default_factory=list)  # recent idempotency keys
    continued: int = 0  # how many times this shard continued as new


def _varint_bytes(n: int) -> int:
    """Bytes of ``n`` as a protobuf varint (a payload's data length is one)."""
    return max(1, (n.bit_length() + 6) // 7)


class PayloadSize:
    """The encoded size of a shard's Continue-As-New input, kept as running totals.

    The payload is one JSON document (the converter sorts keys): a fixed part (shard, config,
    run count, metadata) and two lists, the timers and the idempotency keys, whose bytes are the
    sum of their items' (:func:`timers_bytes`) plus brackets. So the fixed part is encoded once
    and the shard adds and takes away items' bytes as they come and go: exact at every moment,
    where encoding the whole input at nearly every report took 3% of the run process's busy time
    at 2,000 fires/s (MEASUREMENTS.md).
    """

    def __init__(self, shard: int, config: ShardConfig, continued: int, converter) -> None:
        empty = converter.to_payloads([_plain(ShardInput(shard, config, [], [], continued))])[0]
        data = len(empty.data)
        self._frame = empty.ByteSize() - data - _varint_bytes(data)  # metadata and the data's tag
        self._rest = data - 4  # the document without its two empty lists' brackets
        self.timers = 0  # sum of timer_bytes over the timers carried
        self.keys = 0  # the same over the keys

    def total(self) -> int:
        data = self._rest + (1 + self.timers if self.timers else 2) + (1 + self.keys if self.keys else 2)
        return self._frame + _varint_bytes(data) + data


def _plain(inp: ShardInput) -> dict:
    return {
        "shard": inp.shard,
        "config": dataclasses.asdict(inp.config),
        "timers": inp.timers,
        "keys": inp.keys,
        "continued": inp.continued,
    }


def encoded_size(inp: ShardInput, converter) -> int:
    """Encoded size of ``inp`` as the server sees it, by ``converter`` (the workflow's payload
    converter), given the mapping it would make of the dataclass (the same JSON, keys sorted):
    its own deep copy of every timer list cost 3.5x the encoding at 20,000 timers."""
    return sum(p.ByteSize() for p in converter.to_payloads([_plain(inp)]))


@dataclass
class ArmSignal:
    key: str  # idempotency key: server-side signal de-dup does not cross Continue-As-New
    timers: Timers


@dataclass
class BatchInput:
    shard: int
    type: str
    timers: Timers
    lease_s: float
    retry_initial_s: float
    closed_by: str = ""  # CLOSED_FULL or CLOSED_MAX_LAG: why the shard flushed this batch


@dataclass
class UtilInput:
    shard: int
    timers: int
    utilisation: float
    history_length: int
    continued: bool = False
    payload_bytes: int = 0  # the Continue-As-New payload's size now (at a Continue-As-New: the one sent)
    splits: int = 0  # splits since the last report
    can_postponed: int = 0  # Continue-As-New postponed since the last report (payload over the limit)


@dataclass
class ForwardInput:
    shard: int
    timers: Timers  # long-horizon candidates (or, splitting, the farthest timers), farthest first
    grow: bool = False  # a split: grow the ring by one shard before placing


@dataclass
class ControllerInput:
    period_s: float  # controller-80-60: every 30 s
    timer_cap: int
    grow_above: float  # controller-80-60: 80 % average utilisation
    grow_target: float  # controller-80-60: target 60 %
    ticks: int = 0
    # After a grow, wait this long before growing again: overloaded shards forward timers to the
    # new shards, and until both sides have reported since, the sum of reports counts a moving
    # timer twice (on the sender and the receiver) and would overshoot the target.
    settle_s: float = 0.0


@workflow.defn(name=SHARD_WORKFLOW)
class ShardWorkflow:
    """A min-heap of timers per type; due timers go to a pending batch per type that flushes as
    one batch-poller workflow when full or when its oldest has waited MaxLag."""

    @workflow.init
    def __init__(self, inp: ShardInput) -> None:
        self.cfg = inp.config
        self.shard = inp.shard
        self.entries: dict[str, list] = {}  # id -> latest timer (in a heap or pending)
        # id -> [version, handed at]: timers handed to a batch poller that may not have claimed
        # them yet (they are in no heap and not yet leased); kept HANDED_FOR_S, for the 'armed'
        # query only (a migration reconcile must not see a timer in flight as missing)
        self.handed: dict[str, list] = {}
        self.heaps: dict[str, list[tuple[float, int, str]]] = {}  # type -> (fire_at, version, id)
        self.pending: dict[str, dict[str, list]] = {}  # type -> id -> timer, in due order
        self.keys: list[str] = list(inp.keys)
        self.keyset: set[str] = set(self.keys)
        self.continued = inp.continued
        self.dirty = False
        self.flushes = 0
        # The Continue-As-New payload's size (what _carry would send), kept as items come and go
        self.payload = PayloadSize(self.shard, self.cfg, self.continued + 1, workflow.payload_converter())
        self.payload.keys = timers_bytes(self.keys)  # any JSON items: the keys are strings
        self.splits = 0  # since the last utilisation report
        self.can_postponed = 0  # since the last utilisation report
        self.can_retry_at = -1e18  # a postponed Continue-As-New is not retried before this
        self.split_retry_at = -1e18  # nor a split before this (one attempt per SPLIT_RETRY_S)
        self.payload.timers = timers_bytes(inp.timers) - sum(map(self._put, inp.timers))

    # -- signals --------------------------------------------------------------------------

    @workflow.signal(name=ARM_SIGNAL)
    def arm(self, sig: ArmSignal) -> None:
        if sig.key in self.keyset:
            return  # a re-sent signal (caller retry), possibly from before Continue-As-New
        self.keys.append(sig.key)
        self.keyset.add(sig.key)
        self.payload.keys += timers_bytes([sig.key])
        if len(self.keys) > KEYS_REMEMBERED:
            old = self.keys[: len(self.keys) - KEYS_REMEMBERED]
            self.keyset.difference_update(old)
            self.payload.keys -= timers_bytes(old)
            del self.keys[: len(old)]
        # the signal's timers counted in one encoding; _put gives back what that over-counts
        self.payload.timers += timers_bytes(sig.timers) - sum(map(self._put, sig.timers))
        self.dirty = True

    @workflow.query(name="count")
    def count(self) -> int:
        return len(self.entries)

    @workflow.query(name=ARMED_QUERY)
    def armed(self) -> list[list]:
        """``[id, version]`` of every timer this shard holds (heap and pending batch) or handed to
        a batch poller lately: what ``export_armed`` checks the trigger rows against (migration
        reconcile)."""
        out = [[e[E_ID], e[E_VER]] for e in self.entries.values()]
        out += [[tid, h[0]] for tid, h in self.handed.items() if tid not in self.entries]
        return out

    def _put(self, t: list) -> int:
        """Hold ``t``; returns the payload bytes to take away again from a count that added
        ``t``'s: the timer it replaced, or ``t`` itself when it was older than the one held."""
        tid = t[E_ID]
        cur = self.entries.get(tid)
        if cur is not None:
            if cur[E_VER] > t[E_VER]:
                return timer_bytes(t)  # an older arm arriving late (e.g. forwarded); the newer one stays
            self.pending.get(cur[E_TYPE], {}).pop(tid, None)
        self.entries[tid] = t
        heapq.heappush(self.heaps.setdefault(t[E_TYPE], []), (t[E_FIRE], t[E_VER], tid))
        return 0 if cur is None else timer_bytes(cur)

    def _live(self, item: tuple[float, int, str], type_: str) -> bool:
        e = self.entries.get(item[2])
        return e is not None and e[E_VER] == item[1] and e[E_FIRE] == item[0] and e[E_TYPE] == type_

    # -- the loop ---------------------------------------------------------------------------

    @workflow.run
    async def run(self, inp: ShardInput) -> None:
        last_report = -1e18
        self.reported = -1  # the count last written to the utilisation table
        while True:
            now = workflow.now().timestamp()
            self._forget_handed(now)
            self._collect(now)
            await self._flush(now)
            if self.payload.total() > self.cfg.split_at_bytes() and now >= self.split_retry_at:
                await self._guard_payload(now)
            if self._should_continue(now):
                await self._continue_as_new(now)  # returns only when postponed
            if now - last_report >= self.cfg.util_report_s:
                last_report = now
                await self._report(now)
            self.dirty = False
            wake = self._next_wake()
            if len(self.entries) != self.reported:  # keep the controller's view current
                report_at = last_report + self.cfg.util_report_s
                wake = report_at if wake is None else min(wake, report_at)
            now = workflow.now().timestamp()
            if wake is not None and wake <= now:
                continue
            try:
                await workflow.wait_condition(
                    lambda: self.dirty,
                    timeout=None if wake is None else max(0.001, wake - now),
                )
            except TimeoutError:
                pass

    def _should_continue(self, now: float) -> bool:
        info = workflow.info()
        due = info.is_continue_as_new_suggested() or info.get_current_history_length() >= self.cfg.history_bound
        return due and now >= self.can_retry_at

    async def _continue_as_new(self, now: float) -> None:
        """Continue as new carrying the heap, once no signal handler is mid-flight, if the payload
        fits the server's limit (after splitting when it is over the split mark); otherwise keep
        running and try again after a report period."""
        await workflow.wait_condition(workflow.all_handlers_finished)
        if await self._guard_payload(now) <= self.cfg.payload_limit_bytes:
            history = workflow.info().get_current_history_length()
            await self._util(history_length=history, continued=True)
            carry = self._carry()
            # Signals may have landed during that report: the command itself must fit.
            if self._size(carry) <= self.cfg.payload_limit_bytes:
                workflow.continue_as_new(carry)  # raises: this run ends here
        self.can_postponed += 1
        self.can_retry_at = now + self.cfg.util_report_s
        workflow.logger.warning(
            "shard %d: Continue-As-New postponed, payload %d bytes over the %d-byte limit after splitting",
            self.shard,
            self.payload.total(),
            self.cfg.payload_limit_bytes,
        )

    # -- the Continue-As-New payload ----------------------------------------------------------

    def _carry(self) -> ShardInput:
        """What Continue-As-New carries: the heap (and pending batches), the recent keys."""
        return ShardInput(self.shard, self.cfg, list(self.entries.values()), self.keys, self.continued + 1)

    @staticmethod
    def _size(inp: ShardInput) -> int:
        return encoded_size(inp, workflow.payload_converter())

    async def _guard_payload(self, now: float) -> int:
        """Past the split mark, split (at most one attempt per ``SPLIT_RETRY_S``, so a shard whose
        timers cannot move does not spin). Returns the payload's size."""
        if self.payload.total() > self.cfg.split_at_bytes() and now >= self.split_retry_at:
            self.split_retry_at = now + SPLIT_RETRY_S
            await self._split(now)
        return self.payload.total()

    async def _split(self, now: float) -> None:
        """Grow the ring by one shard and forward this shard's farthest timers (any horizon; not
        those in a pending batch) to their places on it, until the payload is back under half the
        split mark. Timers that could not move stay (the next report tries again)."""
        target = self.cfg.split_at_bytes() // 2
        over = self.payload.total() - target
        shed: list[list] = []
        shed_bytes = 0
        for e in sorted(self.entries.values(), key=lambda e: -e[E_FIRE]):
            if shed_bytes >= over:
                break
            if e[E_ID] in self.pending.get(e[E_TYPE], {}):
                continue
            shed.append(e)
            shed_bytes += timer_bytes(e)
        if not shed:
            return
        workflow.logger.info(
            "shard %d: payload %d bytes past the split mark %d; forwarding %d timers to a grown ring",
            self.shard,
            self.payload.total(),
            self.cfg.split_at_bytes(),
            len(shed),
        )
        self.splits += 1
        await self._send_away(shed, grow=True)

    async def _send_away(self, timers: list[list], grow: bool) -> None:
        """Forward ``timers`` to their places on the ring (walking past this shard) in pieces that
        fit a payload; drop the copies that left, unless a newer arm replaced them meanwhile."""
        for piece in chunks(timers, chunk_bytes(self.cfg.payload_limit_bytes)):
            moved: list[list] = await workflow.execute_activity(
                "forward_timers",
                ForwardInput(self.shard, piece, grow=grow),
                start_to_close_timeout=timedelta(seconds=60),
                retry_policy=RetryPolicy(initial_interval=timedelta(seconds=1)),
            )
            grow = False  # one new shard per split
            gone = []
            for tid, version in moved:
                e = self.entries.get(tid)
                if e is not None and e[E_VER] == version and tid not in self.pending.get(e[E_TYPE], {}):
                    del self.entries[tid]  # its heap item goes stale and is skipped
                    gone.append(e)
            self.payload.timers -= timers_bytes(gone)

    # -- due timers and batches ------------------------------------------------------------------

    def _collect(self, now: float) -> None:
        """Move every due timer from its type's heap to that type's pending batch."""
        for type_, heap in self.heaps.items():
            pending = self.pending.setdefault(type_, {})
            while heap and heap[0][0] <= now:
                item = heapq.heappop(heap)
                if self._live(item, type_) and item[2] not in pending:
                    pending[item[2]] = self.entries[item[2]]

    async def _flush(self, now: float) -> None:
        starts = []
        for type_, pending in self.pending.items():
            if not pending:
                continue
            size = self.cfg.type_batch(type_)
            while len(pending) >= size:
                starts += self._pollers(type_, *self._take(pending, size), CLOSED_FULL)
            if pending and min(e[E_FIRE] for e in pending.values()) + self.cfg.type_max_lag(type_) <= now:
                starts += self._pollers(type_, *self._take(pending, len(pending)), CLOSED_MAX_LAG)
        if starts:
            await asyncio.gather(*starts)

    def _take(self, pending: dict[str, list], n: int) -> tuple[list[list], int]:
        """The first ``n`` pending timers leave the shard: returns them and their bytes."""
        out = []
        now = workflow.now().timestamp()
        for tid in list(pending)[:n]:
            t = pending.pop(tid)
            out.append(t)
            del self.entries[tid]
            self.handed.pop(tid, None)  # re-inserted last: the dict stays in hand-off order
            self.handed[tid] = [t[E_VER], now]
        nbytes = timers_bytes(out)
        self.payload.timers -= nbytes
        return out, nbytes

    def _forget_handed(self, now: float) -> None:
        """A handed timer is claimed (leased in its row) within seconds; past HANDED_FOR_S the
        row speaks for it. Oldest first, so each call costs what it forgets."""
        cutoff = now - HANDED_FOR_S
        while self.handed:
            tid = next(iter(self.handed))
            if self.handed[tid][1] >= cutoff:
                break
            del self.handed[tid]

    def _pollers(self, type_: str, timers: list[list], nbytes: int, closed_by: str) -> list:
        """One batch poller for ``timers``, or several when their input would pass a quarter of
        the payload limit (can-2mb: Temporal caps a payload at 2 MB; 800 timers of ~100 bytes
        are far below it, a large per-type batch or long ids are not): the server would reject
        the child's start and fail the shard."""
        pieces = chunks(timers, chunk_bytes(self.cfg.payload_limit_bytes), nbytes)
        return [self._start_poller(type_, piece, closed_by) for piece in pieces]

    async def _start_poller(self, type_: str, timers: list[list], closed_by: str) -> None:
        # The hand-off is a Temporal checkpoint (handoff-checkpoint): once the child has started, the
        # batch is the poller's; it outlives this run (ABANDON) and a Continue-As-New.
        self.flushes += 1
        info = workflow.info()
        await workflow.start_child_workflow(
            POLLER_WORKFLOW,
            BatchInput(self.shard, type_, timers, self.cfg.lease_s, self.cfg.retry_initial_s, closed_by),
            id=f"{self.cfg.prefix}-b{self.shard}-{info.run_id[:8]}-{self.flushes}",
            task_queue=self.cfg.task_queue,
            parent_close_policy=ParentClosePolicy.ABANDON,
        )

    def _next_wake(self) -> float | None:
        """Earliest of: a pending batch's oldest + MaxLag, a heap's earliest + MaxLag (sleep until
        the earliest fire time plus MaxLag, as the Composio article's shards), and the time a batch would be full."""
        wake: float | None = None
        for type_, heap in self.heaps.items():
            while heap and not self._live(heap[0], type_):
                heapq.heappop(heap)
            max_lag = self.cfg.type_max_lag(type_)
            pending = self.pending.get(type_) or {}
            candidates = []
            if pending:
                candidates.append(min(e[E_FIRE] for e in pending.values()) + max_lag)
            if heap:
                candidates.append(heap[0][0] + max_lag)
                need = self.cfg.type_batch(type_) - len(pending)
                if 0 < need <= len(heap):
                    candidates.append(heapq.nsmallest(need, heap)[-1][0])  # the batch fills here
            for c in candidates:
                wake = c if wake is None else min(wake, c)
        return wake

    # -- utilisation and rebalancing ------------------------------------------------------------

    async def _report(self, now: float) -> None:
        await self._guard_payload(now)
        await self._util(history_length=workflow.info().get_current_history_length(), continued=False)
        if len(self.entries) > self.cfg.timer_cap:
            await self._forward(now)

    async def _util(self, history_length: int, continued: bool) -> None:
        n = len(self.entries)
        self.reported = n
        splits, postponed = self.splits, self.can_postponed
        self.splits = self.can_postponed = 0
        await workflow.execute_local_activity(
            "report_util",
            UtilInput(
                self.shard,
                n,
                n / self.cfg.timer_cap,
                history_length,
                continued,
                payload_bytes=self.payload.total(),
                splits=splits,
                can_postponed=postponed,
            ),
            start_to_close_timeout=timedelta(seconds=10),
        )

    async def _forward(self, now: float) -> None:
        """Overloaded: hand long-horizon timers to their place on the (grown) ring; they would
        not re-arm, and so move lazily, for weeks (lazy-rebalance). (A payload near Temporal's limit
        is the split's business, :meth:`_split`, whatever the horizon.)"""
        excess = len(self.entries) - self.cfg.timer_cap
        horizon = now + self.cfg.forward_horizon_s
        far = sorted(
            (
                e
                for e in self.entries.values()
                if e[E_FIRE] > horizon and e[E_ID] not in self.pending.get(e[E_TYPE], {})
            ),
            key=lambda e: -e[E_FIRE],
        )[:excess]
        if far:
            await self._send_away(far, grow=False)


@workflow.defn(name=POLLER_WORKFLOW)
class BatchPollerWorkflow:
    """One per flush: claim by key, poll, commit, re-arm, all in one retried activity."""

    @workflow.run
    async def run(self, inp: BatchInput) -> dict:
        return await workflow.execute_activity(
            "poll_batch",
            inp,
            start_to_close_timeout=timedelta(days=1),  # liveness comes from the heartbeat
            heartbeat_timeout=timedelta(seconds=inp.lease_s),
            retry_policy=RetryPolicy(
                initial_interval=timedelta(seconds=inp.retry_initial_s),
                backoff_coefficient=2.0,
                maximum_interval=timedelta(seconds=max(1.0, inp.lease_s)),
                maximum_attempts=0,  # a batch is never given up: timers fire at least once
            ),
        )


@workflow.defn(name=CONTROLLER_WORKFLOW)
class ControllerWorkflow:
    """Reads the utilisation table every period and grows the shard count (controller-80-60). It never
    talks to shards: either can restart independently."""

    @workflow.run
    async def run(self, inp: ControllerInput) -> None:
        while True:
            await workflow.execute_activity(
                "controller_tick",
                inp,
                start_to_close_timeout=timedelta(seconds=30),
                retry_policy=RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=10)),
            )
            inp.ticks += 1
            await workflow.sleep(inp.period_s)
            if workflow.info().is_continue_as_new_suggested() or workflow.info().get_current_history_length() > 2000:
                workflow.continue_as_new(inp)
