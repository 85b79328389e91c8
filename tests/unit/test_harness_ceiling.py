"""The harness's own ceiling beside each run: finding the calibration run of a
workload and the check each run gets from it."""

import json

from reports import harness_ceiling
from reports.checks import run_checks
from reports.load import load_runs

SHAPE = {
    "name": "production",
    "interval_min_s": 60.0,
    "interval_max_s": 120.0,
    "state_bytes": 4096,
    "latency_median_ms": 120.0,
    "latency_p99_ms": 900.0,
    "cadence": "fixed",
}


def make_run(parent, name, scheduler, rate, achieved, held=True, calibrates=None, started_at=0.0, **shape):
    d = parent / name
    d.mkdir(parents=True)
    workload = {**SHAPE, **shape, "rate_per_s": rate}
    config = {
        "scheduler": scheduler,
        "workload": workload,
        "started_at": started_at,
        "calibration": None if calibrates is None else {"for_rate": calibrates, "factor": rate / calibrates},
    }
    summary = {
        "scheduler": scheduler,
        "complete": True,
        "correct": True,
        "target_rate": rate,
        "offered_rate": rate,
        "achieved_rate": achieved,
        "rate_held": held,
        "harness": {"cores": 0.42},
    }
    (d / "config.json").write_text(json.dumps(config))
    (d / "summary.json").write_text(json.dumps(summary))
    return d


def checks_of(*dirs):
    runs, calibrations = harness_ceiling.split(load_runs([str(d) for d in dirs]))
    harness_ceiling.attach(runs, calibrations)
    return {r.label: next((c for c in run_checks(r) if c.name == "harness ceiling"), None) for r in runs}


def test_a_calibration_held_at_three_times_says_the_figures_are_the_backends(tmp_path):
    run = make_run(tmp_path, "20260101-000001-pg_leased", "pg_leased", 5000, 4990)
    make_run(tmp_path, "20260101-000002-memory", "memory", 15000, 14900, calibrates=5000)
    # the calibration beside the run is found and is not a compared run
    check = checks_of(run)["pg_leased"]
    assert check.ok is True and "14,900" in check.detail and "3.0×" in check.detail and "0.42 core" in check.detail


def test_a_run_above_a_third_of_a_ceiling_that_did_not_hold_is_flagged(tmp_path):
    run = make_run(tmp_path, "20260101-000001-pg_leased", "pg_leased", 5000, 4990)
    slow = make_run(tmp_path, "20260101-000003-pg_queue", "pg_queue", 5000, 1000)
    cal = make_run(tmp_path, "20260101-000002-memory", "memory", 15000, 7000, held=False, calibrates=5000)
    got = checks_of(run, slow, cal)
    assert set(got) == {"pg_leased", "pg_queue"}  # given explicitly, the calibration is still not compared
    assert got["pg_leased"].ok is False and "possibly the harness's limit" in got["pg_leased"].detail
    assert got["pg_queue"].ok is True  # 1,000 is below a third of 7,000


def test_no_calibration_of_the_same_shape_says_how_to_make_one(tmp_path):
    run = make_run(tmp_path, "20260101-000001-pg_leased", "pg_leased", 556, 556)
    make_run(tmp_path, "20260101-000002-memory", "memory", 1668, 1668, calibrates=556, state_bytes=256)
    check = checks_of(run)["pg_leased"]
    assert check.ok is None
    assert f"bench calibrate --workload production --rate 556/s --out {tmp_path}" in check.detail


def test_the_calibration_for_the_runs_rate_and_the_newest_is_chosen(tmp_path):
    run = make_run(tmp_path, "20260101-000001-pg_leased", "pg_leased", 5000, 4990)
    make_run(tmp_path, "20260101-000002-memory", "memory", 3000, 3000, calibrates=1000, started_at=3.0)
    make_run(tmp_path, "20260101-000003-memory", "memory", 15000, 15000, calibrates=5000, started_at=1.0)
    make_run(tmp_path, "20260101-000004-memory", "memory", 15000, 9000, held=False, calibrates=5000, started_at=2.0)
    runs, cals = harness_ceiling.split(load_runs([str(run)]))
    harness_ceiling.attach(runs, cals)
    assert runs[0].calibration.path.name == "20260101-000004-memory"


def test_a_calibration_for_a_lower_rate_cannot_tell(tmp_path):
    run = make_run(tmp_path, "20260101-000001-pg_leased", "pg_leased", 5000, 4990)
    make_run(tmp_path, "20260101-000002-memory", "memory", 3000, 3000, calibrates=1000)
    check = checks_of(run)["pg_leased"]
    assert check.ok is None and "calibrate at ≥ 14,970" in check.detail


def test_memory_runs_get_no_ceiling_check_and_calibrations_alone_are_shown(tmp_path):
    mem = make_run(tmp_path, "20260101-000001-memory", "memory", 500, 500)
    cal = make_run(tmp_path, "20260101-000002-memory", "memory", 1500, 1500, calibrates=500)
    assert checks_of(mem) == {"memory": None}
    runs, cals = harness_ceiling.split(load_runs([str(cal)]))
    assert [r.path for r in runs] == [cal] and cals == []


def test_a_capacity_search_states_the_harness_ceiling_at_three_times_the_rate_found(tmp_path):
    from harness.capacity import harness_ceiling as capacity_harness
    from harness.child import ChildRun
    from reports.capacity import blocks

    cal = make_run(tmp_path, "20260101-000009-memory", "memory", 15000, 9000, held=False, calibrates=5000)
    got = capacity_harness(ChildRun(["bench", "run"], 0, cal), 5000.0)
    assert got == {
        "for_rate": 5000.0,
        "run_dir": str(cal),
        "exit_code": 0,
        "interrupted": False,
        "offered": 15000,
        "achieved": 9000,
        "held": False,
        "cores": 0.42,
    }
    data = {"scheduler": "pg_leased", "search": {"rate": 5000.0}, "harness": got}
    text = " ".join(str(b.text) for b in blocks(tmp_path / "capacity.json", data))
    assert "did not hold 15,000 fires/s" in text and "may be the harness's limit" in text
    assert "Harness ceiling: not measured" in " ".join(
        str(b.text) for b in blocks(tmp_path / "capacity.json", {"scheduler": "pg_leased", "search": {}})
    )
