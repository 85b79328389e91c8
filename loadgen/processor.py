"""The polling processor, shared by every scheduler: it plays the provider and decides re-arms.

For each batch of fires it

1. records the receipt (the lag clock stops here) with the :class:`~metrics.recorder.FireRecorder`;
2. simulates the provider polls: each poll takes a latency drawn from the workload's lognormal
   distribution, and at most ``poll_concurrency`` polls are in flight across all batches (a pool
   of poller lanes: a batch's polls queue on the earliest-free lanes, the batch completes when
   its last poll does, and one ``asyncio.sleep`` stands for all of them);
3. returns one :class:`~schedulers.base.Outcome` per fire: on a provider error (``error_rate``)
   no state change and a retry after ``retry_backoff_s * 2**consecutive_errors`` (capped at the
   interval); on new events (``new_event_rate``) a fresh random state of ``state_bytes`` and
   ``effect=True``; otherwise the state is unchanged. The next fire is ``now + interval`` of that
   trigger, ``now`` being when its poll finished.

The processor also tracks, per trigger, the last fire time it armed (initial arm or re-arm) and
the last one it received, which is how missed fires are found: an armed fire time due before the
end of the measured window that did not arrive within the grace period after it (or, for an
interrupted run, due a grace period before the stop). Re-arming moves a timer, so only the latest
armed time of each trigger can be outstanding.

Per-fire work is kept to attribute fetches and list building; draws, lanes and bookkeeping are
numpy operations over the batch.
"""

from __future__ import annotations

import asyncio
import math
import os
import time
from typing import Sequence

import numpy as np
import pyarrow as pa

from loadgen.population import Population
from loadgen.workload import Workload
from metrics.recorder import FireRecorder
from schedulers.base import Fire, Outcome

Z99 = 2.3263478740408408  # standard normal quantile of 0.99


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
        self.polls = 0
        self.errors = 0
        self.new_events = 0
        self.unknown = 0  # fires for ids outside the population (never expected)

    # -- arming ---------------------------------------------------------------------------

    def note_armed(self, idx: np.ndarray, due: np.ndarray, armed_at: float) -> None:
        """The load generator armed these triggers (initial population)."""
        self.armed_due[idx] = np.round(due, 6)
        self.armed_at[idx] = armed_at

    # -- the Processor protocol -------------------------------------------------------------

    async def process(self, fires: Sequence[Fire]) -> list[Outcome]:
        received = time.time()
        n = len(fires)
        if n == 0:
            return []
        rec = self.recorder
        ids, due = rec.receive(fires, received)
        idx = np.fromiter(map(self.index.get, ids, self._minus_ones(n)), np.int64, n)
        known = idx >= 0
        if not known.all():
            self.unknown += int((~known).sum())
        kidx = idx[known]
        self.received_due[kidx] = due[known]

        finish = self._poll_latency(n, received)
        delay = float(finish.max()) - received
        if delay > 0:
            await asyncio.sleep(delay)
        # each poll "finished" at its own simulated time; the clock may have run past it
        now = np.minimum(finish, time.time())

        interval = np.full(n, self.fallback_interval_s)
        interval[known] = self.interval_s[kidx]
        u = self.rng.random((2, n))
        err = u[0] < self.w.error_rate
        event = (~err) & (u[1] < self.w.new_event_rate)
        nxt = now + interval
        if err.any():
            e_idx = idx[err & known]
            streak = np.zeros(n, np.int32)
            streak[err & known] = self.errors_in_row[e_idx]
            backoff = np.minimum(interval, self.w.retry_backoff_s * np.exp2(streak))
            nxt = np.where(err, now + backoff, nxt)
            self.errors_in_row[e_idx] += 1
        self.errors_in_row[idx[~err & known]] = 0
        nxt = np.round(nxt, 6)
        self.armed_due[kidx] = nxt[known]
        self.armed_at[kidx] = time.time()

        states: list[bytes | None] = [None] * n
        n_events = int(event.sum())
        sb = self.w.state_bytes
        if n_events:
            blob = os.urandom(n_events * sb) if sb else b""
            for j, i in enumerate(np.flatnonzero(event).tolist()):
                states[i] = blob[j * sb:(j + 1) * sb] if sb else b""
        self.polls += n
        self.errors += int(err.sum())
        self.new_events += n_events
        return list(map(Outcome, nxt.tolist(), states, event.tolist()))

    def committed(self, fires: Sequence[Fire], delivered: Sequence[bool]) -> None:
        self.recorder.committed(fires, delivered)

    @staticmethod
    def _minus_ones(n: int):
        import itertools

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

    # -- missed fires ----------------------------------------------------------------------

    def outstanding(self, before: float) -> np.ndarray:
        """Indices of triggers armed for a time before ``before`` and not received since."""
        due = self.armed_due
        got = self.received_due
        with np.errstate(invalid="ignore"):
            late = due < before
            # a received due equal to the armed one (to the microsecond) means it fired
            fired = np.abs(np.nan_to_num(got, nan=-1.0) - due) < 2e-6
        return np.flatnonzero(late & ~fired)

    def missed_table(self, before: float, measure_start: float) -> pa.Table:
        """The missed fires as ``fires.parquet`` rows (fired_at and lag_s null)."""
        idx = self.outstanding(before)
        n = len(idx)
        due = self.armed_due[idx]
        return pa.table(
            {
                "timer_id": pa.array([self.pop.ids[i] for i in idx.tolist()], pa.string()),
                "tenant_id": pa.array([self.pop.tenants[i] for i in idx.tolist()], pa.string()),
                "type": pa.array(["poll"] * n, pa.string()),
                "due_at": due,
                "armed_at": self.armed_at[idx],
                "fired_at": pa.nulls(n, pa.float64()),
                "lag_s": pa.nulls(n, pa.float64()),
                "attempt": pa.array(np.zeros(n, np.int32)),
                "worker": pa.array([""] * n, pa.string()),
                "batch": pa.array(np.full(n, -1, np.int64)),
                "effect_delivered": pa.array(np.zeros(n, bool)),
                "warmup": pa.array(due < measure_start),
            }
        )


# -- progress shared between processes (bench run --nodes) --------------------------------------

# The per-trigger bookkeeping a node sends (``/progress``) and leaves at its stop (``state-<W>.npz``)
PROGRESS_FIELDS = ("armed_due", "armed_at", "received_due")


def progress_snapshot(processor: PollingProcessor) -> dict[str, np.ndarray]:
    return {name: getattr(processor, name) for name in PROGRESS_FIELDS}


def merge_state(processor, snap: dict[str, np.ndarray]) -> None:
    """Merge one node's ``armed_due/armed_at/received_due`` into ``processor``, in place.

    The latest arm of a trigger wins (its ``armed_at`` is the largest: initial arms happen in
    the run process, re-arms in whichever node polled last). A trigger counts as received when
    any node received exactly its latest armed fire time. Idempotent, so snapshots can be merged
    again and again.
    """
    a_due, a_at, r_due = processor.armed_due, processor.armed_at, processor.received_due
    s_due, s_at, s_recv = snap["armed_due"], snap["armed_at"], snap["received_due"]
    if len(s_due) != len(a_due):
        raise ValueError(f"a node's population has {len(s_due)} triggers, the run's {len(a_due)}: "
                         f"they did not build the same workload")
    with np.errstate(invalid="ignore"):
        newer = np.isnan(a_at) | (s_at > a_at)
        newer &= ~np.isnan(s_at)
        a_due[newer] = s_due[newer]
        a_at[newer] = s_at[newer]
        got = np.abs(s_recv - a_due) < 2e-6
        r_due[got] = a_due[got]
        # keep the latest receipt otherwise, as the processor itself would
        later = ~got & ~np.isnan(s_recv) & (np.isnan(r_due) | (s_recv > r_due))
        r_due[later] = s_recv[later]

