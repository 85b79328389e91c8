"""Table 1 as data: best marks, baseline ratios, the memory reference, display formats."""

from pathlib import Path

import pandas as pd

from reports.checks import run_checks
from reports.fmt import human_bytes
from reports.load import Run
from reports.tables import build_summary_table, format_ratio, format_value


def run(scheduler: str, lost: int = 0, **summary) -> Run:
    base = {
        "complete": True,
        "scheduler": scheduler,
        "target_rate": 100.0,
        "offered_rate": 100.0,
        "achieved_rate": 100.0,
        "rate_held": True,
        "cycles_per_trigger": 3.0,
        "steady_state": True,
        "lag_ms": {"p50": 1.0, "p90": 2.0, "p99": 3.0, "p999": 4.0, "max": 5.0},
        "outcomes": {"due": 100, "on_time": 100 - lost, "late": 0, "pending": 0, "lost": lost},
        "lost_in_warmup": 0,
        "correct": lost == 0,
        "failures": [],
        "duplicate_fires": 0,
        "duplicate_effects": 0,
        "warnings": [],
    }
    base.update(summary)
    return Run(
        path=Path(f"/runs/20260101-000000-{scheduler}"),
        config={"scheduler": scheduler},
        summary=base,
        fires=pd.DataFrame(),
        samples=pd.DataFrame(),
        label=scheduler,
    )


def test_best_is_the_lowest_lag_and_the_highest_rate():
    t = build_summary_table(
        [run("a", lag_ms={"p99": 30.0}, achieved_rate=90.0), run("b", lag_ms={"p99": 10.0}, achieved_rate=99.0)]
    )
    assert [c.best for c in t.row("lag_p99_ms").cells] == [False, True]
    assert [c.best for c in t.row("achieved_rate").cells] == [False, True]


def test_nothing_is_marked_when_every_run_scored_the_same():
    t = build_summary_table([run("a"), run("b")])
    assert not any(c.best for c in t.row("lost").cells)


def test_ties_are_all_marked():
    t = build_summary_table([run("a", lost=0), run("b", lost=3), run("c", lost=0)])
    assert [c.best for c in t.row("lost").cells] == [True, False, True]


def test_a_percentile_among_undelivered_fires_reads_not_delivered_and_is_never_best():
    t = build_summary_table(
        [run("a", lag_ms={"p99": "not delivered"}), run("b", lag_ms={"p99": 40.0}), run("c", lag_ms={"p99": 20.0})]
    )
    cells = t.row("lag_p99_ms").cells
    assert cells[0].text == "not delivered" and not cells[0].best and cells[0].ratio == ""
    assert [c.best for c in cells] == [False, False, True]


def test_memory_is_shown_but_not_ranked_next_to_backends():
    t = build_summary_table(
        [run("memory", lag_ms={"p99": 1.0}), run("pg_a", lag_ms={"p99": 50.0}), run("pg_b", lag_ms={"p99": 20.0})]
    )
    assert [c.best for c in t.row("lag_p99_ms").cells] == [False, False, True]
    assert t.row("lag_p99_ms").cells[0].value == 1.0


def test_ratios_are_against_the_chosen_baseline():
    t = build_summary_table([run("a", lag_ms={"p99": 10.0}), run("b", lag_ms={"p99": 25.0})], baseline=1)
    assert [c.ratio for c in t.row("lag_p99_ms").cells] == ["×0.40", ""]


def test_figures_that_do_not_apply_are_none_and_shown_as_a_dash():
    t = build_summary_table([run("memory", dead_tuples=None, per_fire={"inserts": None})])
    cell = t.row("dead_table_peak").cells[0]
    assert cell.value is None and cell.text == "—"
    assert t.row("inserts_per_fire").cells[0].text == "—"


def test_cells_keep_the_unrounded_value():
    t = build_summary_table([run("a", lag_ms={"p99": 12.3456789})])
    cell = t.row("lag_p99_ms").cells[0]
    assert cell.value == 12.3456789 and cell.text == "12.35"


def test_formats():
    assert format_value(0.953, "percent") == "95.3%"
    assert format_value(1234567, "count") == "1,234,567"
    assert human_bytes(1536) == "1.5 KiB"
    assert format_ratio(5, 0) == "" and format_ratio(3, 2) == "×1.50"


def test_checks_flag_an_unheld_rate_a_short_window_lost_fires_and_duplicate_effects():
    checks = {
        c.name: c.ok
        for c in run_checks(
            run(
                "a",
                achieved_rate=80.0,
                rate_held=False,
                lost=2,
                duplicate_effects=1,
                complete=False,
                steady_state=False,
                cycles_per_trigger=0.7,
            )
        )
    }
    assert checks == {
        "complete": False,
        "rate held": False,
        "steady state": False,
        "no lost fires": False,
        "no duplicate keyed effects": False,
        "harness ceiling": None,
    }  # no calibration: cannot tell
    assert all(c.ok for c in run_checks(run("b")) if c.name != "harness ceiling")
    # lost fires in the warm-up fail the check too: a lost fire is never a warm-up artefact
    assert not {c.name: c.ok for c in run_checks(run("c", lost_in_warmup=1))}["no lost fires"]


def test_the_report_says_how_a_run_counts_and_what_a_compressed_workload_compressed():
    from reports.tables import how_to_read_report

    r = run("a", cadence="fixed", on_time_s=10.0, warmup_s=30.0)
    r.config["workload"] = {
        "name": "production-compressed",
        "time_compression": 4,
        "description": "the production shape time-compressed 4x",
    }
    text = how_to_read_report([r, run("b", cadence="fixed", on_time_s=10.0, warmup_s=30.0)])
    assert len(text) == 2  # one explanation shared by both runs, one note on the compressed workload
    assert text[0].startswith("Load is open-loop (fixed cadence") and "on time (lag <= 10 s" in text[0]
    assert "pending" in text[0] and "lost" in text[0] and "late" in text[0]
    assert text[1].startswith("Workload production-compressed: the production shape time-compressed 4x.")
    closed = how_to_read_report([run("c", cadence="after-poll", on_time_s=5.0, warmup_s=1.0)])
    assert closed[0].startswith("Load is closed-loop (after-poll cadence")


def test_a_figure_that_could_not_be_measured_says_not_available_and_why():
    why = "pg_stat_statements is not created in database mine (CREATE EXTENSION pg_stat_statements, as a superuser)"
    r = run("pg_a", statements=None, unavailable={"statements": why}, fires=100, bill={"stores": ["postgres"]})
    t = build_summary_table([r, run("memory")])
    cell = t.row("statement_ms_per_fire").cells[0]
    assert cell.value is None and cell.text == "not available" and cell.note == why
    assert t.row("statement_ms_per_fire").cells[1].text == "—"  # memory: does not apply, no reason
    assert t.notes() == [("pg_a", why)]
