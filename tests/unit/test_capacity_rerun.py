"""A capacity step that failed while its population was still being armed in the window runs
once more with a longer warm-up: it measured the arm, not the rate."""

from harness.capacity import arm_into_window_s, rerun_warmup_s
from metrics import rundir


def run_dir_with(tmp_path, name, window):
    d = tmp_path / name
    d.mkdir()
    rundir.write_json(d / rundir.CONFIG, {"window": window})
    return d


def test_how_far_the_arm_ran_into_the_window(tmp_path):
    w = {"arm_start": 0.0, "measure_start": 22.5, "measure_end": 52.5}
    assert arm_into_window_s(run_dir_with(tmp_path, "before", {**w, "arming_end": 12.0})) is None
    assert arm_into_window_s(run_dir_with(tmp_path, "into", {**w, "arming_end": 30.0})) == 7.5
    assert arm_into_window_s(run_dir_with(tmp_path, "past", {**w, "arming_end": 52.8})) == 30.0  # cut at the end
    assert arm_into_window_s(run_dir_with(tmp_path, "unknown", w)) is None  # killed before the arm ended
    assert arm_into_window_s(None) is None and arm_into_window_s(tmp_path / "missing") is None


def test_only_a_failed_step_whose_arm_ran_into_the_window_runs_again_and_only_once():
    assert rerun_warmup_s(held=True, into_window_s=7.5, warmup_s=22.5, rerun=False) is None  # held anyway
    assert rerun_warmup_s(held=False, into_window_s=None, warmup_s=22.5, rerun=False) is None  # the rate failed
    assert rerun_warmup_s(held=False, into_window_s=7.5, warmup_s=22.5, rerun=False) == 45.0  # doubled at least
    assert rerun_warmup_s(held=False, into_window_s=30.0, warmup_s=22.5, rerun=False) == 82.5  # 2x the overrun
    assert rerun_warmup_s(held=False, into_window_s=7.5, warmup_s=45.0, rerun=True) is None  # its verdict stands
