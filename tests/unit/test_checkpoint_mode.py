"""When a run forces its CHECKPOINT (``bench run --checkpoint window|warmup|off``): what the run
directory says about each, and that ``bench capacity`` steps take theirs at the start of the warm-up
unless told otherwise."""

from __future__ import annotations

from harness.capacity import CapacityPlan, step_args
from harness.capacity_rule import Search
from metrics.bill import cost_warnings

START = 1_000.0


def notes(checkpoint: dict | None) -> str:
    window = {"measure_start": START, "measure_end": START + 30}
    if checkpoint is not None:
        window["checkpoint"] = checkpoint
    return " | ".join(cost_warnings(window, {}, {}))


def test_a_checkpoint_that_ran_into_the_window_says_when_it_was_asked_for():
    assert "CHECKPOINT before the measured window finished 4.0 s into the measured window" in notes(
        {"mode": "window", "requested_at": START - 5, "finished_at": START + 4, "error": None}
    )
    assert "CHECKPOINT at the start of the warm-up finished 75.5 s into the measured window" in notes(
        {"mode": "warmup", "requested_at": START - 60, "finished_at": START + 75.5, "error": None}
    )


def test_a_checkpoint_before_the_window_that_finished_in_time_needs_no_note():
    assert notes({"mode": "window", "requested_at": START - 5, "finished_at": START - 1, "error": None}) == ""


def test_warmup_and_off_say_what_they_change_in_the_full_page_images():
    warm = notes({"mode": "warmup", "requested_at": START - 60, "finished_at": START - 50, "error": None})
    assert "--checkpoint warmup" in warm and "full-page images are fewer" in warm
    off = notes({"mode": "off"})
    assert "--checkpoint off" in off and "when the server last checkpointed" in off


def plan(extra: list[str]) -> CapacityPlan:
    return CapacityPlan(
        scheduler="pg_leased",
        slo=None,
        search=Search(start=100.0),
        duration="30s",
        warmup_s=20.0,
        workload=None,
        extra_args=extra,
    )


def test_capacity_steps_checkpoint_at_the_start_of_the_warmup_unless_told():
    args = step_args(plan([]))
    assert args[args.index("--checkpoint") + 1] == "warmup"
    mine = step_args(plan(["--checkpoint", "window"]))
    assert mine.count("--checkpoint") == 1 and mine[mine.index("--checkpoint") + 1] == "window"
    assert step_args(plan(["--checkpoint=off"])).count("--checkpoint") == 0
