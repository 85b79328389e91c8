"""The rehearsal's plan (migration/plan.py): parsing, the order a move must keep, step times."""

from __future__ import annotations

import pytest

from loadgen.rates import parse_duration
from migration import plan


def steps(text: str):
    return plan.parse_steps(text, parse_duration)


def test_untimed_steps_follow_the_setup_or_spread_between_timed_ones():
    s = steps("dual-write,backfill,switch-execution,stop-old-writes,rollback@40s")
    times = [t for _, t in plan.schedule(s, 60.0)]
    assert times[:2] == [0.0, 0.0]  # the set-up of the move starts at once
    assert times[2:] == pytest.approx([40 / 3, 80 / 3, 40.0])


def test_trailing_untimed_steps_spread_up_to_the_end_of_the_run():
    s = steps("dual-write,backfill@5s,switch-execution")
    assert [t for _, t in plan.schedule(s, 45.0)] == [0.0, 5.0, 25.0]


@pytest.mark.parametrize(
    "text, needle",
    [
        ("backfill,dual-write", "backfill must come after dual-write"),
        ("dual-write,switch-execution", "only after dual-write and backfill"),
        ("dual-write,backfill,stop-old-writes", "only while the new one executes"),
        ("dual-write,backfill,rollback", "nothing to roll back"),
        ("dual-write,backfill,switch-execution@30s,stop-old-writes@20s", "time order"),
        ("dual-write,backfil", "unknown step 'backfil'"),
        ("dual-write,backfill,switch-execution@soon", "bad time"),
        ("dual-write,dual-write", "already started"),
        ("", "names no step"),
    ],
)
def test_a_plan_out_of_order_is_refused_naming_the_step(text, needle):
    with pytest.raises(plan.PlanError, match=needle):
        steps(text)


def test_a_step_outside_the_run_is_refused():
    with pytest.raises(plan.PlanError, match="outside the run"):
        plan.schedule(steps("dual-write,backfill,switch-execution@90s"), 60.0)


def test_rollback_then_switch_again_is_a_valid_plan():
    s = steps("dual-write,backfill,switch-execution@10s,stop-old-writes@20s,rollback@30s,switch-execution@40s")
    assert [x.kind for x in s][-2:] == ["rollback", "switch-execution"]


def test_plan_file_takes_strings_and_mappings(tmp_path):
    f = tmp_path / "plan.yaml"
    f.write_text("steps:\n  - dual-write\n  - backfill\n  - switch-execution@20s\n  - {step: rollback, at: 40s}\n")
    s = plan.load_plan(f, parse_duration)
    assert [(x.kind, x.at_s) for x in s] == [
        ("dual-write", None),
        ("backfill", None),
        ("switch-execution", 20.0),
        ("rollback", 40.0),
    ]
    f.write_text("steps: dual-write\n")
    with pytest.raises(plan.PlanError, match="non-empty list"):
        plan.load_plan(f, parse_duration)
