"""``bench capacity``'s search and its "sustainable" test, pure (``tests/unit/test_capacity_rule.py``).

**The search.** An exponential probe from ``start`` (x ``factor`` while the rate holds, / ``factor``
while it does not), then bisection of the bracket [highest rate held, lowest rate not held] until
it is narrower than ``precision`` (relative), then a **confirmation** rerun at the rate found. A
confirmation that fails makes that rate the new top of the bracket and the search goes on below
it, so the answer is always a rate that held twice. The search never goes below ``min_rate``
(it says the backend holds nothing from there, instead of driving the rate to 0) nor above
``max_rate`` (it says the ceiling is higher), and stops after ``max_steps`` runs with the best
bracket it has.

**Sustainable.** A step holds when its run completed and was correct, held its rate (achieved
>= 95% of offered, offered >= 95% of target: the summary's ``rate_held``), met every SLO
threshold, **and** its lag did not trend upward across the window: a backlog that grows slowly
can keep the percentiles of a short window inside the SLO while the backend is falling behind.
The trend is a least-squares line through the median lag of each second of due time (fires
never delivered count as late as the records go); it is rising when the line climbs more than
:data:`TREND_SHARE` of the SLO's lag bound (at least :data:`TREND_MIN_S`) over the window and
the climb is more than two standard errors.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from metrics.trend import climb as least_squares_climb

TREND_SHARE = 0.25  # a climb of a quarter of the lag bound over one window is a backlog building
TREND_MIN_S = 0.1  # climbs under 100 ms are noise at any bound


@dataclass
class Trend:
    slope_s_per_s: float | None  # lag seconds gained per second of the window
    climb_s: float | None  # slope x window
    stderr_climb_s: float | None
    limit_s: float  # the climb that counts as rising
    rising: bool
    seconds: int  # one-second bins the line went through

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def lag_trend(
    due_eff: np.ndarray, lag_s: np.ndarray, start: float, end: float, bound_s: float, records_end: float | None = None
) -> Trend:
    """The trend of the lag over ``[start, end)`` of due time. ``lag_s`` is NaN or inf for a
    fire never delivered: it counts as ``records_end - due`` (a lower bound of its lag)."""
    limit = max(TREND_MIN_S, TREND_SHARE * bound_s)
    due = np.asarray(due_eff, float)
    lag = np.asarray(lag_s, float).copy()
    missing = ~np.isfinite(lag)
    if missing.any():
        last = records_end if records_end is not None else end
        lag[missing] = np.maximum(0.0, last - due[missing])
    keep = (due >= start) & (due < end)
    due, lag = due[keep], lag[keep]
    if len(due) == 0:
        return Trend(None, None, None, limit, False, 0)
    sec = np.floor(due - start).astype(np.int64)
    bins = np.unique(sec)
    med = np.array([np.median(lag[sec == b]) for b in bins])
    if len(bins) < 3:
        return Trend(None, None, None, limit, False, int(len(bins)))
    slope, climb, se_climb = least_squares_climb(bins.astype(float), med, span=end - start)
    rising = climb > limit and climb > 2 * se_climb
    return Trend(float(slope), climb, se_climb, limit, bool(rising), int(len(bins)))


def round_rate(rate: float) -> float:
    """Three significant figures: 1234.5 -> 1230, 55.56 -> 55.6 (rates a reader can type)."""
    if rate <= 0:
        return rate
    digits = 2 - int(math.floor(math.log10(rate)))
    return float(round(rate, digits))


@dataclass
class Step:
    rate: float
    held: bool
    why: str | None = None
    confirmation: bool = False
    run_dir: str | None = None
    figures: dict[str, Any] = field(default_factory=dict)


@dataclass
class Search:
    start: float
    factor: float = 2.0
    precision: float = 0.10
    min_rate: float = 1.0
    max_rate: float = 1e6
    max_steps: int = 12
    steps: list[Step] = field(default_factory=list)
    stop_reason: str | None = None
    _confirming: float | None = None

    # -- the bracket ---------------------------------------------------------------------

    def _held(self) -> list[float]:
        """Rates that held and were not refuted by a failed confirmation at or below them."""
        failed = [s.rate for s in self.steps if not s.held]
        return [s.rate for s in self.steps if s.held and not any(f <= s.rate for f in failed)]

    @property
    def lo(self) -> float | None:
        held = self._held()
        return max(held) if held else None

    @property
    def hi(self) -> float | None:
        failed = [s.rate for s in self.steps if not s.held]
        return min(failed) if failed else None

    @property
    def result(self) -> float | None:
        """The rate found: held, and held again on confirmation."""
        lo = self.lo
        if lo is None:
            return None
        confirmed = [s for s in self.steps if s.confirmation and s.held and s.rate == lo]
        return lo if confirmed else None

    # -- the next step ---------------------------------------------------------------------

    def next_rate(self) -> tuple[float, bool] | None:
        """(rate, is a confirmation) of the next run, or None when the search is over
        (``stop_reason`` says why)."""
        if self.stop_reason is not None:
            return None
        lo, hi = self.lo, self.hi
        if self.result is not None:  # a confirmation is only asked for when the search is done
            self.stop_reason = (
                "confirmed at the highest rate asked for (--max-rate): the capacity is higher"
                if hi is None
                else f"confirmed; the bracket {lo:g}-{hi:g}/s is as narrow as it gets "
                f"(--precision {100 * self.precision:g}%)"
            )
            return None
        if len(self.steps) >= self.max_steps:
            self.stop_reason = f"stopped after {self.max_steps} runs (--max-steps) with the bracket so far"
            return None
        if not self.steps:
            return self._go(min(max(self.start, self.min_rate), self.max_rate), False)
        if hi is None:  # probe up
            if lo >= self.max_rate:
                return self._go(lo, True)
            return self._go(min(self.max_rate, round_rate(lo * self.factor)), False)
        if lo is None:  # probe down
            if hi <= self.min_rate:
                self.stop_reason = f"not even the lowest rate (--min-rate {self.min_rate:g}/s) held"
                return None
            return self._go(max(self.min_rate, round_rate(hi / self.factor)), False)
        if (hi - lo) / lo <= self.precision:
            return self._go(lo, True)
        mid = round_rate((lo + hi) / 2.0)
        if mid <= lo or mid >= hi:  # rounding closed the gap
            return self._go(lo, True)
        return self._go(mid, False)

    def _go(self, rate: float, confirm: bool) -> tuple[float, bool]:
        self._confirming = rate if confirm else None
        return rate, confirm

    def record(
        self,
        rate: float,
        held: bool,
        why: str | None = None,
        run_dir: str | None = None,
        figures: dict[str, Any] | None = None,
    ) -> Step:
        step = Step(rate, held, why, confirmation=self._confirming == rate, run_dir=run_dir, figures=figures or {})
        self.steps.append(step)
        self._confirming = None
        return step

    def to_json(self) -> dict[str, Any]:
        return {
            "rate": self.result,
            "held_below": self.lo,
            "failed_at": self.hi,
            "stop_reason": self.stop_reason,
            "start": self.start,
            "factor": self.factor,
            "precision": self.precision,
            "min_rate": self.min_rate,
            "max_rate": self.max_rate,
            "max_steps": self.max_steps,
            "steps": [asdict(s) for s in self.steps],
        }
