"""A capacity step that failed while its population was still being armed in the window runs
once more with a longer warm-up: it measured the arm, not the rate (how far the arm ran into
the window is the summary's ``arming_into_window_s``, tested with the accounting)."""

from harness.capacity import rerun_warmup_s


def test_only_a_failed_step_whose_arm_ran_into_the_window_runs_again_and_only_once():
    assert rerun_warmup_s(held=True, into_window_s=7.5, warmup_s=22.5, rerun=False) is None  # held anyway
    assert rerun_warmup_s(held=False, into_window_s=None, warmup_s=22.5, rerun=False) is None  # the rate failed
    assert rerun_warmup_s(held=False, into_window_s=7.5, warmup_s=22.5, rerun=False) == 45.0  # doubled at least
    assert rerun_warmup_s(held=False, into_window_s=30.0, warmup_s=22.5, rerun=False) == 82.5  # 2x the overrun
    assert rerun_warmup_s(held=False, into_window_s=7.5, warmup_s=45.0, rerun=True) is None  # its verdict stands
