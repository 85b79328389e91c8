"""The polling processor, shared by every scheduler: it plays the provider and decides re-arms.

For each batch of fires it

1. records the receipt (the lag clock stops here) with the :class:`~metrics.recorder.FireRecorder`;
2. simulates the provider polls: each poll takes a latency drawn from the workload's lognormal
   distribution, and at most ``poll_concurrency`` polls are in flight across all batches (a pool
   of poller lanes: a batch's polls queue on the earliest-free lanes). :meth:`process` returns
   when the batch's last poll finishes (one ``asyncio.sleep`` stands for all of them: the
   seeds' batch semantics); :meth:`stream` hands outcomes back in groups as their polls finish,
   for a backend that commits per fire (no head-of-line blocking behind the slowest poll);
3. performs the **external effect** of every poll that found new events as that poll finishes,
   outside the backend's transaction (like sending a webhook): the recorder notes it on the
   fire's row (``external_effect``). A crash between it and the backend's commit redelivers the
   fire and sends it again: at-least-once, visible as duplicate external effects, while the
   keyed effect the backend commits stays de-duplicated by its ``(timer_id, due_at)`` key;
4. returns one :class:`~schedulers.base.Outcome` per fire: on a provider error (``error_rate``)
   no state change and a retry after ``retry_backoff_s * 2**consecutive_errors`` (capped at the
   interval); on new events (``new_event_rate``) a fresh random state of ``state_bytes`` and
   ``effect=True``; otherwise the state is unchanged. Whether a poll fails or finds events is
   drawn from its ``(trigger, due)`` key and the seed, so a redelivered fire finds what its
   first delivery found.

The next fire follows the workload's ``cadence``. ``fixed``: each trigger keeps a grid (its
first fire time plus whole intervals) and the next fire is the first grid time after the poll
finished, which is previous due + interval whenever the fire was less than one interval late; a
fire more than one interval late fires once and realigns, and the grid times it jumped over are
counted as **skipped periods** (:attr:`skipped_due`), never fired in a burst. A retry after an
error keeps its grid. ``after-poll``: the next fire is when the poll finished + interval (the
seeds' own re-arm, closed-loop). Fires received from :attr:`rearm_until` on (the drain after the
measured window) are finished instead of re-armed: arming stops, the run drains.

The processor also tracks, per trigger, the latest fire time it armed (initial arm or re-arm)
and the latest due time it received. Only the newest fire of a trigger decides its next arm (a
stale redelivery of an older due changes nothing), so a trigger has an **undelivered** fire when
its armed time is later than everything it received: :meth:`outstanding`. Whether an
undelivered fire is pending or lost is the backend's to say (``export_armed``), see
:meth:`undelivered_table`.

Per-fire work is kept to attribute fetches and list building; draws, lanes and bookkeeping are
numpy operations over the batch.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import os
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from loadgen.population import Population
from loadgen.workload import Workload
from metrics import rundir
from metrics.recorder import FireRecorder
from schedulers.base import Fire, Outcome

Z99 = 2.3263478740408408  # standard normal quantile of 0.99


# stream(): a group of outcomes closes when this many polls have finished, or when its first
# finished poll has waited GROUP_HOLD_S. 64 rows amortise a commit's round trip and WAL flush;
# 50 ms adds little to a lag measured in hundreds of ms on the production shape.
GROUP_MIN = 64
GROUP_HOLD_S = 0.05


@dataclass(slots=True)
class _Received:
    """One batch as it arrived, every array in the batch's order."""

    received: float  # epoch s the batch arrived
    idx: np.ndarray  # population index of each fire's trigger (-1: unknown)
    known: np.ndarray
    due: np.ndarray
    newest: np.ndarray  # the newest due received for its trigger (only these move the bookkeeping)
    err: np.ndarray  # the poll fails (a retry after a backoff)
    event: np.ndarray  # the poll finds new events (a new state, an effect)
    finish: np.ndarray  # epoch s each poll finishes, queued on the lanes


class PollingProcessor:
    def __init__(self, workload: Workload, population: Population, recorder: FireRecorder) -> None:
        self.w = workload
        self.pop = population
        self.recorder = recorder
        self.rng = np.random.default_rng(workload.seed + 1)
        self.index = population.index()
        n = len(population)
        self.interval_s = population.interval_s
        self.errors_in_row = np.zeros(n, np.int32)
        self.armed_due = np.full(n, np.nan)  # latest fire time armed for each trigger
        self.armed_at = np.full(n, np.nan)
        self.received_due = np.full(n, np.nan)  # latest fire time received
        self.lanes = np.zeros(workload.poll_concurrency)  # when each poller lane is next free
        self._lane = 0
        median_s = workload.latency_median_ms / 1000.0
        self.lat_mu = math.log(median_s) if median_s > 0 else None
        self.lat_sigma = (
            math.log(workload.latency_p99_ms / workload.latency_median_ms) / Z99
            if workload.latency_median_ms > 0
            else 0.0
        )
        self.fallback_interval_s = (workload.interval_min_s + workload.interval_max_s) / 2
        self.fixed = workload.cadence == "fixed"
        self.slot_due = np.full(n, np.nan)  # fixed cadence: the grid time the armed fire belongs to
        self.rearm_until = math.inf  # fires received from then on finish instead of re-arming (the drain)
        self.skipped: list[np.ndarray] = []  # fixed cadence: grid times jumped over, in chunks
        self.polls = 0
        self.errors = 0
        self.new_events = 0
        self.external_effects = 0  # external effects performed (webhooks sent), redeliveries included
        self.group_min = GROUP_MIN
        self.group_hold_s = GROUP_HOLD_S
        self.unknown = 0  # fires for ids outside the population (never expected)

    # -- arming ---------------------------------------------------------------------------

    def note_armed(self, idx: np.ndarray, due: np.ndarray, armed_at: float) -> None:
        """The load generator armed these triggers (initial population): their grids start here."""
        self.armed_due[idx] = np.round(due, 6)
        self.armed_at[idx] = armed_at
        self.slot_due[idx] = self.armed_due[idx]

    @property
    def skipped_due(self) -> np.ndarray:
        """Every grid time a fixed-cadence trigger jumped over (a fire more than one interval late)."""
        return np.concatenate(self.skipped) if self.skipped else np.zeros(0)

    # -- the Processor protocol -------------------------------------------------------------

    async def process(self, fires: Sequence[Fire]) -> list[Outcome]:
        """Poll the whole batch; return when its slowest poll finishes (the articles' batch
        semantics: one outcome list, one commit)."""
        if not fires:
            return []
        batch = self._receive(fires)
        delay = float(batch.finish.max()) - batch.received
        if delay > 0:
            try:
                await asyncio.sleep(delay)
            except asyncio.CancelledError:
                # A crash mid-batch: the polls that finished before it have sent their external
                # effects; the backend never commits this batch, so the fires come back.
                self._external(fires, batch.event & (batch.finish <= time.time()))
                raise
        self._external(fires, batch.event)
        return self._decide(batch, np.arange(len(fires)))

    async def stream(self, fires: Sequence[Fire]) -> AsyncIterator[tuple[list[int], list[Outcome]]]:
        """Poll the batch and hand its outcomes back in groups as their polls finish: yields
        ``(positions, outcomes)``, every position of ``fires`` exactly once over the stream.

        A batch's slowest poll no longer holds back the rest (head-of-line blocking: with a
        lognormal provider the slowest of 800 polls takes seconds while the median takes
        120 ms), so a backend that commits per group re-arms each trigger when its own poll
        ends. A group closes when :attr:`group_min` polls have finished, or when its first
        poll has waited :attr:`group_hold_s`, whichever comes first: groups stay big enough for
        a commit to be worth its round trip. The draws are the same as :meth:`process`'s.
        """
        if not fires:
            return
        batch = self._receive(fires)
        order = np.argsort(batch.finish, kind="stable")
        finish = batch.finish[order]
        n = len(fires)
        start = 0
        while start < n:
            close_at = min(float(finish[min(n, start + self.group_min) - 1]), float(finish[start]) + self.group_hold_s)
            end = max(start + 1, int(np.searchsorted(finish, close_at, side="right")))
            group = order[start:end]
            delay = float(finish[end - 1]) - time.time()
            if delay > 0:
                try:
                    await asyncio.sleep(delay)
                except asyncio.CancelledError:
                    sent = np.zeros(n, bool)
                    sent[order[start:]] = True
                    self._external(fires, batch.event & sent & (batch.finish <= time.time()))
                    raise
            self._external_at(fires, group[batch.event[group]])
            yield group.tolist(), self._decide(batch, group)
            start = end

    def _receive(self, fires: Sequence[Fire]) -> _Received:
        """The batch arrives: record the receipt (the lag clock stops), look up its triggers,
        draw each poll's result and its finish time on the lanes."""
        received = time.time()
        n = len(fires)
        ids, due = self.recorder.receive(fires, received)
        idx = np.fromiter(map(self.index.get, ids, self._minus_ones(n)), np.int64, n)
        known = idx >= 0
        if not known.all():
            self.unknown += int((~known).sum())
        kidx = idx[known]
        # Only the newest fire of a trigger decides its next arm: a redelivery of an older due
        # (its commit will be fenced by the backend) must not move the bookkeeping back.
        newest = np.zeros(n, bool)
        with np.errstate(invalid="ignore"):
            prev = self.received_due[kidx]
            newest[known] = np.isnan(prev) | (due[known] >= prev - 2e-6)
        self.received_due[kidx] = np.fmax(prev, due[known])

        # whether a poll fails or finds events is the provider's state for that trigger at that
        # due time: a redelivery of the same (trigger, due) finds the same (so it sends the same
        # webhook again: at-least-once, visible as a duplicate external effect)
        u = self._key_uniforms(idx, due)
        err = u[0] < self.w.error_rate
        event = (~err) & (u[1] < self.w.new_event_rate)
        return _Received(received, idx, known, due, newest, err, event, self._poll_latency(n, received))

    def _decide(self, batch: _Received, sel: np.ndarray) -> list[Outcome]:
        """The outcomes of the fires at positions ``sel`` of ``batch``, whose polls have finished;
        the per-trigger bookkeeping moves to their next arm."""
        n = len(sel)
        idx, known, due = batch.idx[sel], batch.known[sel], batch.due[sel]
        newest, err, event = batch.newest[sel], batch.err[sel], batch.event[sel]
        kidx = idx[known]
        # each poll "finished" at its own simulated time; the clock may have run past it
        now = np.minimum(batch.finish[sel], time.time())

        interval = np.full(n, self.fallback_interval_s)
        interval[known] = self.interval_s[kidx]
        # The grid time of each fire: the slot noted when the processor armed exactly this due
        # (a retry's slot is the period it retries), else the due itself (a grid time).
        slot = due.copy()
        if self.fixed:
            with np.errstate(invalid="ignore"):
                ours = newest & (np.abs(due - np.where(known, self.armed_due[idx], np.nan)) < 2e-6)
            slot[ours] = self.slot_due[idx[ours]]
            slot = np.where(np.isnan(slot), due, slot)
            # the first grid time after the poll finished: k = 1 unless more than one interval late
            k = np.maximum(1.0, np.floor((now - slot) / interval) + 1.0)
            nxt = slot + k * interval
            jumped = (k > 1) & ~err & newest
            if jumped.any():
                reps = (k[jumped] - 1).astype(np.int64)
                base = np.repeat(slot[jumped], reps)
                step = np.repeat(interval[jumped], reps)
                j = np.arange(int(reps.sum())) - np.repeat(np.cumsum(reps) - reps, reps) + 1
                self.skipped.append(base + j * step)
            new_slot = nxt
        else:
            nxt = now + interval
            new_slot = nxt
        if err.any():
            e_idx = idx[err & known]
            streak = np.zeros(n, np.int32)
            streak[err & known] = self.errors_in_row[e_idx]
            backoff = np.minimum(interval, self.w.retry_backoff_s * np.exp2(streak))
            nxt = np.where(err, now + backoff, nxt)
            # a retry keeps the grid of the period it retries (fixed cadence)
            new_slot = np.where(err, slot if self.fixed else nxt, new_slot)
            self.errors_in_row[e_idx] += 1
        self.errors_in_row[idx[~err & known]] = 0
        nxt = nxt.round(6)
        finished = batch.received >= self.rearm_until  # the drain: arming has stopped
        upd = known & newest
        self.armed_due[idx[upd]] = np.nan if finished else nxt[upd]
        self.slot_due[idx[upd]] = new_slot[upd].round(6)
        self.armed_at[idx[upd]] = time.time()

        states: list[bytes | None] = [None] * n
        n_events = int(event.sum())
        sb = self.w.state_bytes
        if n_events:
            blob = os.urandom(n_events * sb) if sb else b""
            for j, i in enumerate(np.flatnonzero(event).tolist()):
                states[i] = blob[j * sb : (j + 1) * sb] if sb else b""
        self.polls += n
        self.errors += int(err.sum())
        self.new_events += n_events
        next_fire = [None] * n if finished else nxt.tolist()
        return list(map(Outcome, next_fire, states, event.tolist()))

    def _key_uniforms(self, idx: np.ndarray, due: np.ndarray) -> np.ndarray:
        """Two uniforms in [0, 1) per fire, a function of (seed, trigger, due to the microsecond)
        alone (splitmix64 finalizer)."""
        with np.errstate(over="ignore"):
            x = idx.astype(np.int64).view(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
            x ^= np.rint(due * 1e6).astype(np.int64).view(np.uint64)
            x ^= np.uint64(self.w.seed) * np.uint64(0xD1B54A32D192ED03)
            out = np.empty((2, len(idx)))
            for k in range(2):
                z = x + np.uint64(k + 1) * np.uint64(0x9E3779B97F4A7C15)
                z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
                z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
                z ^= z >> np.uint64(31)
                out[k] = (z >> np.uint64(11)).astype(np.float64) / float(1 << 53)
        return out

    def _external(self, fires: Sequence[Fire], sent: np.ndarray) -> None:
        """The external effects of these polls happened (outside the backend's transaction)."""
        self._external_at(fires, np.flatnonzero(sent))

    def _external_at(self, fires: Sequence[Fire], positions: np.ndarray) -> None:
        if len(positions):
            which = [fires[i] for i in positions.tolist()]
            self.recorder.external(which)
            self.external_effects += len(which)

    def committed(self, fires: Sequence[Fire], delivered: Sequence[bool]) -> None:
        self.recorder.committed(fires, delivered)

    @staticmethod
    def _minus_ones(n: int):
        return itertools.repeat(-1, n)

    # -- the provider ---------------------------------------------------------------------

    def _poll_latency(self, n: int, now: float) -> np.ndarray:
        """When each of ``n`` polls finishes, queued on the poller lanes from ``now``.

        Each poll has its own finish time (its lane's queue plus its own latency), so a batch's
        triggers re-arm spread out as their polls finish instead of all at the batch's end.
        """
        if self.lat_mu is None:
            return np.full(n, now)
        lat = self.rng.lognormal(self.lat_mu, self.lat_sigma, n)
        lanes = self.lanes
        c = len(lanes)
        # the batch's polls go round-robin over the lanes from where the last batch stopped
        which = (self._lane + np.arange(n)) % c
        self._lane = (self._lane + n) % c
        order = np.argsort(which, kind="stable")
        lane_sorted = which[order]
        lat_sorted = lat[order]
        csum = np.cumsum(lat_sorted)
        first = np.r_[True, lane_sorted[1:] != lane_sorted[:-1]]
        group_start = np.maximum.accumulate(np.where(first, np.arange(n), 0))
        queued = csum - (csum[group_start] - lat_sorted[group_start])  # latencies up to and incl. this poll
        finish = np.empty(n)
        finish[order] = np.maximum(lanes[lane_sorted], now) + queued
        np.maximum.at(lanes, which, finish)
        return finish

    # -- undelivered fires ---------------------------------------------------------------

    def outstanding(self, before: float) -> np.ndarray:
        """Indices of triggers armed for a time before ``before`` that was never received (the
        armed time is later than every due time received for the trigger)."""
        # The gauges call this every second while the load runs: one pass over the population
        # picks the few triggers due by now (far timers are most of a large population), the
        # rest looks only at those. Five passes stalled the event loop ~70 ms at 10M triggers.
        with np.errstate(invalid="ignore"):
            due_now = np.flatnonzero(self.armed_due < before)
            due, got = self.armed_due[due_now], self.received_due[due_now]
            # a received due equal to the armed one (to the microsecond) means it fired
            after_received = np.isnan(got) | (due > got + 2e-6)
        return due_now[after_received]

    def undelivered_table(self, before: float, measure_start: float, held_at: dict[str, float] | None) -> pa.Table:
        """Every fire due before ``before`` that never arrived, as ``fires.parquet`` rows
        (``fired_at`` and ``lag_s`` null).

        ``held_at``: what the backend still holds (timer id -> fire time, ``export_armed``).
        ``held_at_end`` is True (**pending**) when the backend holds the trigger at that due time
        or an earlier one (an earlier one: a fire it delivered whose re-arm it never committed,
        still to be redelivered), False (**lost**) when it does not hold it at all or holds it
        later (it moved past a fire it never delivered); null when the backend could not say.
        """
        idx = self.outstanding(before)
        n = len(idx)
        due = self.armed_due[idx]
        ids = [self.pop.ids[i] for i in idx.tolist()]
        if held_at is None:
            held = pa.nulls(n, pa.bool_())
        else:
            at = np.array([held_at.get(tid, np.nan) for tid in ids], np.float64)
            with np.errstate(invalid="ignore"):
                held = pa.array(~np.isnan(at) & (at <= due + 2e-6))
        return rundir.fire_rows(
            n,
            timer_id=ids,
            tenant_id=[self.pop.tenants[i] for i in idx.tolist()],
            type=["poll"] * n,
            due_at=due,
            armed_at=self.armed_at[idx],
            warmup=np.fmax(due, self.armed_at[idx]) < measure_start,
            held_at_end=held,
        )


# -- progress shared between processes (bench run --nodes) --------------------------------------

# The per-trigger bookkeeping a node sends (``/progress``) and leaves at its stop (``state-<W>.npz``)
PROGRESS_FIELDS = ("armed_due", "armed_at", "received_due")


def progress_snapshot(processor: PollingProcessor) -> dict[str, np.ndarray]:
    snap = {name: getattr(processor, name) for name in PROGRESS_FIELDS}
    snap["skipped_due"] = processor.skipped_due
    return snap


def merge_state(processor, snap: dict[str, np.ndarray]) -> None:
    """Merge one node's ``armed_due/armed_at/received_due`` into ``processor``, in place.

    The latest arm of a trigger wins (its ``armed_at`` is the largest: initial arms happen in
    the run process, re-arms in whichever node polled last). ``received_due`` is the latest due
    any node received. Idempotent, so snapshots can be merged again and again.
    """
    a_due, a_at, r_due = processor.armed_due, processor.armed_at, processor.received_due
    s_due, s_at, s_recv = snap["armed_due"], snap["armed_at"], snap["received_due"]
    if len(s_due) != len(a_due):
        raise ValueError(
            f"a node's population has {len(s_due)} triggers, the run's {len(a_due)}: "
            f"they did not build the same workload"
        )
    with np.errstate(invalid="ignore"):
        newer = np.isnan(a_at) | (s_at > a_at)
        newer &= ~np.isnan(s_at)
        a_due[newer] = s_due[newer]
        a_at[newer] = s_at[newer]
        r_due[:] = np.fmax(r_due, s_recv)
