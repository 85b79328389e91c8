"""Table 1 as data: best marks, baseline ratios, the memory reference, display formats."""

from pathlib import Path

import pandas as pd

from reports.load import Run
from reports.fmt import human_bytes
from reports.tables import build_summary_table, format_ratio, format_value, run_checks


def run(scheduler: str, **summary) -> Run:
    base = {"complete": True, "scheduler": scheduler, "target_rate": 100.0, "achieved_rate": 100.0,
            "lag_ms": {"p50": 1.0, "p90": 2.0, "p99": 3.0, "p999": 4.0, "max": 5.0},
            "missed": 0, "duplicate_fires": 0, "duplicate_effects": 0, "warnings": []}
    base.update(summary)
    return Run(path=Path(f"/runs/20260101-000000-{scheduler}"), config={"scheduler": scheduler}, summary=base,
               fires=pd.DataFrame(), samples=pd.DataFrame(), label=scheduler)


def test_best_is_the_lowest_lag_and_the_highest_rate():
    t = build_summary_table([run("a", lag_ms={"p99": 30.0}, achieved_rate=90.0), run("b", lag_ms={"p99": 10.0}, achieved_rate=99.0)])
    assert [c.best for c in t.row("lag_p99_ms").cells] == [False, True]
    assert [c.best for c in t.row("achieved_rate").cells] == [False, True]


def test_nothing_is_marked_when_every_run_scored_the_same():
    t = build_summary_table([run("a"), run("b")])
    assert not any(c.best for c in t.row("missed").cells)


def test_ties_are_all_marked():
    t = build_summary_table([run("a", missed=0), run("b", missed=3), run("c", missed=0)])
    assert [c.best for c in t.row("missed").cells] == [True, False, True]


def test_memory_is_shown_but_not_ranked_next_to_backends():
    t = build_summary_table([run("memory", lag_ms={"p99": 1.0}), run("pg_a", lag_ms={"p99": 50.0}), run("pg_b", lag_ms={"p99": 20.0})])
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


def test_checks_flag_an_unheld_rate_missed_fires_and_duplicate_effects():
    checks = {c.name: c.ok for c in run_checks(run("a", achieved_rate=80.0, missed=2, duplicate_effects=1, complete=False))}
    assert checks == {"complete": False, "rate held": False, "no missed fires": False, "no duplicate effects": False}
    assert all(c.ok for c in run_checks(run("b")))


def test_a_figure_that_could_not_be_measured_says_not_available_and_why():
    why = "pg_stat_statements is not created in database mine (CREATE EXTENSION pg_stat_statements, as a superuser)"
    r = run("pg_a", statements=None, unavailable={"statements": why}, fires=100, bill={"stores": ["postgres"]})
    t = build_summary_table([r, run("memory")])
    cell = t.row("statement_ms_per_fire").cells[0]
    assert cell.value is None and cell.text == "not available" and cell.note == why
    assert t.row("statement_ms_per_fire").cells[1].text == "—"  # memory: does not apply, no reason
    assert t.notes() == [("pg_a", why)]
