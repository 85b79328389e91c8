"""``bench scale``'s pure parts: population steps, the long-horizon share that fills them, the
disk and memory check, the log-log fit and its reading, the planned moves and what became of
them, and bad input (the CLI in this process: every case fails before a server or a directory)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bench.cli import main
from harness import scale_rule
from harness.scale import ScalePlan, plan_step, step_workload, steps_of
from loadgen.moves import plan_moves, unique_batches
from loadgen.population import build
from loadgen.workload import from_mapping
from metrics.moves import failure_line, move_figures


def test_populations_parse_with_suffixes_and_10m_is_ten_million():
    assert scale_rule.parse_population("12k,100k,1m,10m") == [12_000, 100_000, 1_000_000, 10_000_000]
    assert scale_rule.parse_population("200, 1k,1.5k") == [200, 1_000, 1_500]


@pytest.mark.parametrize("text", ["0", "-5", "1.5", "abc", "10mm", "1k,", "2k,2000"])
def test_a_population_that_is_not_a_positive_count_is_refused(text):
    with pytest.raises(ValueError, match="--population"):
        scale_rule.parse_population(text)


def _plan(populations, rate=5.0, share=None) -> ScalePlan:
    return ScalePlan(
        schedulers=["memory"],
        populations=populations,
        rates=[rate],
        share=share,
        duration="4s",
        warmup_s=2.0,
        workload="smoke",
    )


def test_small_steps_fill_each_population_at_the_rate():
    plan = _plan([200, 1_000])
    assert steps_of(plan) == [(200, 5.0), (1_000, 5.0)]
    for n in (200, 1_000):
        w = from_mapping(step_workload(plan, n, 5.0)).resolved()
        pop = build(w)
        needed = scale_rule.periodic_needed(5.0, w.fires_per_trigger_s())
        assert len(pop) == n and w.rate_per_s == 5.0
        assert math.isclose(w.long_horizon_share, 1 - needed / n)
        # the periodic timers are the ones the rate needs (a binomial draw around them)
        assert abs(int((~pop.long_horizon).sum()) - needed) <= 4 * math.sqrt(needed) + 2
        assert w.long_horizon_state_bytes == plan.long_horizon_state_bytes


def test_the_rate_axis_steps_the_rate_at_one_population():
    plan = _plan([1_000])
    plan.rates = [5.0, 10.0]
    assert steps_of(plan) == [(1_000, 5.0), (1_000, 10.0)]


def test_a_population_below_what_the_rate_needs_is_refused():
    with pytest.raises(ValueError, match="needs .* periodic timers"):
        scale_rule.auto_share(100, 556.0, math.log(2) / 15)


def test_a_population_just_short_of_the_rate_runs_at_its_own_rate():
    plan = _plan([12_000], rate=556.0)
    plan.workload = "production-compressed"  # 556/s needs 12,032 timers at 15-30 s
    w = from_mapping(step_workload(plan, 12_000, 556.0)).resolved()
    assert w.long_horizon_share == 0.0 and w.triggers == 12_000
    assert w.rate_per_s == pytest.approx(12_000 * w.fires_per_trigger_s()) and w.rate_per_s > 0.95 * 556


N = np.array([1e4, 1e5, 1e6, 1e7])


def test_a_flat_cost_reads_flat_and_predicts_its_level():
    fit = scale_rule.fit_loglog(N, 5.0 + np.array([0.02, -0.01, 0.01, -0.02]), 1e8)
    assert fit["reading"] == "flat" and abs(fit["slope"]) < 0.01
    assert fit["predicted"] == pytest.approx(5.0, rel=0.01)


def test_a_logarithmic_cost_reads_logarithmic():
    fit = scale_rule.fit_loglog(N, 2.0 * np.log(N), 1e8)
    assert fit["reading"] == "logarithmic" and 0 < fit["slope"] < scale_rule.FLAT_BELOW
    assert fit["predicted"] == pytest.approx(2.0 * math.log(1e8), rel=1e-6)


def test_a_linear_cost_reads_linear_and_extrapolates():
    fit = scale_rule.fit_loglog(N, 3.0 * N * (1 + np.array([0.01, -0.01, 0.0, 0.01])), 1e8)
    assert fit["reading"] == "linear" and fit["slope"] == pytest.approx(1.0, abs=0.01)
    assert fit["predicted"] == pytest.approx(3e8, rel=0.05)
    assert fit["stderr"] is not None and fit["stderr"] < 0.05


def test_a_total_with_a_fixed_cost_reads_fixed_plus_linear_and_predicts_from_the_cost_per_timer():
    fit = scale_rule.fit_loglog(N[:3], 1e8 + 1000.0 * N[:3], 1e8, total=True)
    assert fit["slope"] < scale_rule.LINEAR_FROM and fit["reading"] == "fixed + linear"
    assert fit["per_added"] == pytest.approx(1000.0) and fit["predicted"] == pytest.approx(1e8 + 1e11)


def test_two_points_give_a_slope_without_an_error_and_one_gives_none():
    fit = scale_rule.fit_loglog([1e3, 1e4], [1.0, 10.0])
    assert fit["slope"] == pytest.approx(1.0) and fit["stderr"] is None
    assert scale_rule.fit_loglog([1e3], [1.0]) is None


GIB = float(1 << 30)


def test_a_step_that_cannot_fit_on_the_disk_is_refused():
    fit = scale_rule.check_fits(10_000_000, 20 * GIB, 30 * GIB, 200 * GIB, 1 * GIB, 16 * GIB)
    assert not fit.ok and "of store" in fit.why and "skipped" in fit.why
    assert scale_rule.check_fits(10_000_000, 2 * GIB, 30 * GIB, 200 * GIB, 1 * GIB, 16 * GIB).ok


def test_a_step_that_cannot_fit_in_memory_is_refused():
    fit = scale_rule.check_fits(10_000_000, None, None, None, 15 * GIB, 16 * GIB)
    assert not fit.ok and "of memory" in fit.why


def test_the_estimate_follows_the_designs_previous_steps():
    earlier = [
        {"population": 10_000, "status": "ok", "figures": {"storage_bytes": 20e6, "rss_bytes": 200e6}},
        {"population": 100_000, "status": "ok", "figures": {"storage_bytes": 110e6, "rss_bytes": 290e6}},
    ]
    # 1,000 B per added timer on disk and in memory, measured between the two steps
    fit = plan_step(1_100_000, "postgres", earlier, (1e12, 2e12), 64 * GIB, 256)
    assert fit.ok and fit.disk_need == pytest.approx(1_110e6) and fit.memory_need == pytest.approx(1_290e6)
    # the same steps, but a disk with little free: refused from the free-space reading alone
    tight = plan_step(1_100_000, "postgres", earlier, (3 * GIB, 2e12), 64 * GIB, 256)
    assert not tight.ok and "skipped" in tight.why
    # no earlier step: the conservative default per timer
    first = plan_step(1_000, "postgres", [], (None, None), None, 256)
    assert first.disk_need == 1_000 * scale_rule.DEFAULT_DISK_PER_TIMER["postgres"] and first.ok


def _population(n_long: int):
    w = from_mapping(
        {"rate": "5/s", "triggers": 20 + n_long, "interval": "2s..4s", "long_horizon_share": n_long / (20 + n_long)}
    ).resolved()
    return build(w)


def test_moves_come_due_inside_the_window_and_the_again_moved_leave_an_old_time():
    pop = _population(2_000)
    plan = plan_moves(pop, 0.05, 1000.0, 1060.0, seed=1)
    assert len(plan) > 0 and pop.long_horizon[plan.idx].all()
    assert (np.diff(plan.at) >= 0).all() and (plan.at >= 1000.0).all() and (plan.at <= 1000 + 0.8 * 60).all()
    assert (plan.at[plan.kind != "away"] <= 1030.0).all()  # first moves over the window's first half
    near = plan.kind == "near"
    assert near.any() and (plan.new_due[near] > plan.at[near]).all()
    assert (plan.new_due[near] <= 1000 + 0.8 * 60 + 1e-6).all()  # due, and so fired, inside the window
    far = plan.kind != "near"
    assert (plan.new_due[far] > 1000.0 + 29 * 86400).all()
    for i in np.flatnonzero(plan.kind == "away"):  # moved away before its near time came
        first = np.flatnonzero((plan.idx == plan.idx[i]) & near)
        assert len(first) == 1 and plan.at[first[0]] < plan.at[i] < plan.new_due[first[0]]


def test_batches_of_moves_never_hold_a_timer_twice():
    idx = np.array([1, 2, 3, 2, 4, 5, 1])
    batches = unique_batches(idx, 10)
    assert [idx[b].tolist() for b in batches] == [[1, 2, 3], [2, 4, 5, 1]]
    assert [idx[b].tolist() for b in unique_batches(idx, 2)] == [[1, 2], [3, 2], [4, 5], [1]]


def test_a_fire_at_an_old_time_is_a_failure_and_moved_lag_is_counted_at_the_new_time():
    moves = pd.DataFrame(
        {
            "timer_id": ["a", "b", "b", "c"],
            "kind": ["near", "near", "away", "far"],
            "moved_at": [10.0, 10.0, 15.0, 10.0],
            "old_due": [1e7, 1e7, 20.0, 2e7],
            "new_due": [25.0, 20.0, 3e6, 3e7],
        }
    )
    fires = pd.DataFrame(
        {
            "timer_id": ["a", "b", "x"],
            "due_at": [25.0, 20.0, 5.0],
            "fired_at": [25.3, 20.1, 5.0],
            "lag_s": [0.3, 0.1, 0.0],
        }
    )
    f = move_figures(fires, moves)
    assert f["moves"] == 4 and f["by_kind"] == {"near": 2, "away": 1, "far": 1}
    assert f["due_in_window"] == 1 and f["delivered"] == 1 and f["lag_ms"]["p50"] == pytest.approx(300.0)
    assert f["fires_at_old_time"] == 1 and f["old_time_examples"] == ["b"]
    assert "the move did not take" in failure_line(f)
    clean = move_figures(fires[fires["timer_id"] != "b"], moves)
    assert clean["fires_at_old_time"] == 0 and failure_line(clean) is None


def test_a_moved_timer_that_never_fired_is_not_delivered():
    moves = pd.DataFrame({"timer_id": ["a"], "kind": ["near"], "moved_at": [10.0], "old_due": [1e7], "new_due": [25.0]})
    empty = pd.DataFrame({"timer_id": [], "due_at": [], "fired_at": [], "lag_s": []})
    f = move_figures(empty, moves)
    assert f["due_in_window"] == 1 and f["delivered"] == 0 and f["lag_ms"]["p99"] is None


SCALE = ["scale", "--duration", "4s"]


@pytest.mark.parametrize(
    "args, names",
    [
        ([*SCALE, "--scheduler", "memory", "--population", "0"], "--population: '0' is not a positive count"),
        ([*SCALE, "--scheduler", "memory", "--population", "12k,ten"], "'ten' is not a positive count"),
        ([*SCALE, "--scheduler", "nosuch", "--population", "12k"], "nosuch"),
        ([*SCALE, "--scheduler", "memory", "--rate", "0/s"], "--rate"),
        ([*SCALE, "--scheduler", "memory", "--rate", "-5/s"], "--rate"),
        ([*SCALE, "--scheduler", "memory", "--population", "11k"], "needs 12,032 periodic timers"),
        ([*SCALE, "--scheduler", "memory", "--rates", "5/s,10/s"], "a single --population"),
        ([*SCALE, "--scheduler", "memory", "--long-horizon-share", "1.5"], "--long-horizon-share"),
        ([*SCALE, "--scheduler", "memory", "--interval", "2s..4s"], "--interval would change it"),
        ([*SCALE, "--scheduler", "memory", "--project-population", "lots"], "--project-population"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_creates_nothing(args, names, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        main([*args, "--out", str(tmp_path / "out")])
    out, err = capsys.readouterr()
    assert exit_.value.code == 2, (out, err)
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and names in lines[0], err
    assert "Traceback" not in out + err
    assert list(Path(tmp_path).iterdir()) == []


def test_a_limit_is_a_finding_at_its_step_in_the_report():
    from harness.scale import fits_of, limit_of
    from reports.decide import blocks_markdown
    from reports.scale import blocks

    payload = {"temporal": {"max_payload_bytes": 2_200_000.0, "payload_limit_bytes": 2_097_152.0}}
    payload["temporal"]["payload_share_of_limit"] = 2_200_000.0 / 2_097_152.0
    why = limit_of(payload, 0, [])
    assert "Continue-As-New payload" in why and "2,097,152 B limit" in why
    assert "exit 1" in limit_of({}, 1, ["", "crashed: OSError: disk full", ""]) and limit_of({}, 0, []) is None
    steps = [
        {"population": p, "rate": 556.0, "status": "ok", "run_dir": f"r{p}", "long_horizon_share": 0.5,
         "figures": {"claim_ms_per_call": 1.0 + 1e-3 * i, "storage_bytes": 1e8 + 1e3 * p}}
        for i, p in enumerate((10_000, 100_000, 1_000_000))
    ]  # fmt: skip
    steps.append({"population": 10_000_000, "rate": 556.0, "status": "skipped", "why": "needs 20 GiB: skipped"})
    d = {"steps": steps, "fits": fits_of(steps, "population", 1e8), "limit": {"at": "10,000,000 timers at 556/s",
         "why": "needs 20 GiB: skipped"}}  # fmt: skip
    assert d["fits"]["claim_ms_per_call"]["reading"] == "flat" and d["fits"]["storage_bytes"]["points"] == 3
    md = blocks_markdown(blocks(Path("scale.json"), {"axis": "population", "project_population": 1e8,
                                                     "populations": [1], "rates": [556.0],
                                                     "designs": {"pg_leased": d}}))  # fmt: skip
    assert "limit at 10,000,000 timers at 556/s: needs 20 GiB: skipped" in md
    assert "10,000,000 timers at 556/s: skipped: needs 20 GiB" in md
    assert "flat (slope ~0): the population does not change it" in md and "1000 B per added timer" in md
