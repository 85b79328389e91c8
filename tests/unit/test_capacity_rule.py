"""bench capacity's search on synthetic step results: a backend that holds up to R, one whose
backlog grows slowly, a noisy one; and the trend test on synthetic lag series."""

from __future__ import annotations

import random

import numpy as np
import pytest

from harness.capacity_rule import Search, lag_trend, round_rate


def drive(search: Search, holds) -> Search:
    """Run the search against ``holds(rate, is_confirmation) -> bool``."""
    while (nxt := search.next_rate()) is not None:
        rate, confirm = nxt
        search.record(rate, holds(rate, confirm))
    return search


def test_a_backend_that_holds_up_to_r_is_found_within_the_precision_and_confirmed():
    s = drive(Search(start=100.0, precision=0.1), lambda rate, _: rate <= 3000.0)
    assert s.result is not None and 3000.0 / 1.1 <= s.result <= 3000.0
    assert s.hi is not None and s.hi > 3000.0 and (s.hi - s.result) / s.result <= 0.1
    rates = [st.rate for st in s.steps]
    assert rates[:6] == [100.0, 200.0, 400.0, 800.0, 1600.0, 3200.0]  # the exponential probe
    assert s.steps[-1].confirmation and s.steps[-1].held and s.steps[-1].rate == s.result
    assert "confirmed" in s.stop_reason


def test_nothing_held_stops_at_the_minimum_instead_of_driving_the_rate_to_zero():
    s = drive(Search(start=100.0, min_rate=10.0), lambda rate, _: False)
    assert s.result is None and min(st.rate for st in s.steps) == 10.0
    assert "lowest rate" in s.stop_reason


def test_a_start_above_capacity_probes_down():
    s = drive(Search(start=1000.0, precision=0.1), lambda rate, _: rate <= 150.0)
    assert s.result is not None and 150.0 / 1.1 <= s.result <= 150.0
    assert [st.rate for st in s.steps][:4] == [1000.0, 500.0, 250.0, 125.0]


def test_held_at_the_maximum_says_the_capacity_is_higher():
    s = drive(Search(start=100.0, max_rate=400.0), lambda rate, _: True)
    assert s.result == 400.0 and s.hi is None and "capacity is higher" in s.stop_reason


def test_a_failed_confirmation_moves_the_answer_below_it():
    # holds 1000 the first time (a lucky run) but not when confirmed, and nothing above 900 again
    seen = {}

    def holds(rate, confirm):
        seen[rate] = seen.get(rate, 0) + 1
        if rate <= 900.0:
            return True
        return rate == 1000.0 and seen[rate] == 1

    s = drive(Search(start=250.0, precision=0.1, max_steps=30), holds)
    assert s.result is not None and s.result <= 900.0
    assert any(st.confirmation and not st.held for st in s.steps)


def test_a_noisy_backend_settles_on_a_rate_that_held_twice():
    rng = random.Random(7)

    def holds(rate, _):  # capacity ~2000 with a 10 % band where it flips a coin
        if rate < 1800:
            return True
        if rate > 2200:
            return False
        return rng.random() < 0.5

    s = drive(Search(start=100.0, precision=0.1, max_steps=30), holds)
    assert s.result is not None and s.result <= 2200.0
    held_at = [st for st in s.steps if st.rate == s.result and st.held]
    assert len(held_at) >= 2  # the answer held twice: found, then confirmed


def test_max_steps_bounds_the_search():
    s = drive(Search(start=1.0, precision=0.001, max_steps=5), lambda rate, _: rate <= 1e5)
    assert len(s.steps) == 5 and "--max-steps" in s.stop_reason


def test_round_rate():
    assert round_rate(1234.5) == 1230.0 and round_rate(55.56) == 55.6 and round_rate(0.5) == 0.5


# -- the trend test -------------------------------------------------------------------------


def series(window_s: float, lag_of, per_s: int = 20, seed: int = 1):
    rng = np.random.default_rng(seed)
    due = np.sort(rng.uniform(0.0, window_s, int(window_s * per_s)))
    return due, np.array([lag_of(t, rng) for t in due])


def test_a_flat_lag_is_not_rising_even_when_noisy():
    due, lag = series(60.0, lambda t, rng: rng.uniform(0.0, 10.0))  # temporal_shards-like 0-10 s sawtooth
    tr = lag_trend(due, lag, 0.0, 60.0, bound_s=10.0)
    assert not tr.rising and tr.seconds == 60


def test_a_slowly_growing_backlog_is_rising_while_its_percentiles_look_fine():
    # 50 ms -> 650 ms over 60 s: a p99 under a 1 s SLO, but the backend is falling behind
    due, lag = series(60.0, lambda t, rng: 0.05 + 0.01 * t + rng.uniform(0, 0.02))
    assert np.percentile(lag, 99) < 1.0
    tr = lag_trend(due, lag, 0.0, 60.0, bound_s=1.0)
    assert tr.rising and tr.climb_s == pytest.approx(0.6, abs=0.05)


def test_undelivered_fires_count_as_late_as_the_records_go():
    due = np.arange(0.0, 30.0, 0.1)
    lag = np.where(due < 15.0, 0.05, np.inf)  # from half-way, nothing arrives
    tr = lag_trend(due, lag, 0.0, 30.0, bound_s=1.0, records_end=40.0)
    assert tr.rising
