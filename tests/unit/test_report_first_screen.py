"""The report leads with the answer: the first screen, each warning said once, a short Markdown."""

from __future__ import annotations

import re
from html import escape
from pathlib import Path

import pandas as pd

from reports.html import render_html
from reports.load import Run
from reports.markdown import render_markdown
from reports.report import build_report

DISAGREE = (
    "dead tuples of s.timers at the end: pgstattuple counts 10 still taking space, the statistics' "
    "n_dead_tup says 900 (off by more than 20%)"
)


def run(scheduler: str, lost: int = 0, options: int = 30, **summary) -> Run:
    base = {
        "complete": True,
        "scheduler": scheduler,
        "workload_name": "production-compressed",
        "target_rate": 556.0,
        "offered_rate": 556.0,
        "achieved_rate": 556.0,
        "rate_held": True,
        "steady_state": True,
        "cycles_per_trigger": 4.0,
        "warmup_s": 30.0,
        "measured_s": 90.0,
        "lag_ms": {"p50": 100.0, "p90": 200.0, "p99": 300.0, "p999": 400.0, "max": 500.0},
        "outcomes": {"due": 100, "on_time": 100 - lost, "late": 0, "pending": 0, "lost": lost},
        "lost_in_warmup": 0,
        "correct": lost == 0,
        "failures": [],
        "duplicate_fires": 0,
        "duplicate_effects": 0,
        "per_fire": {"row_writes": 4.0, "heap_writes": 3.0, "toast_writes": 1.0, "wal_bytes": 2000.0},
        "warnings": [],
        "measurement_notes": [DISAGREE],
    }
    base.update(summary)
    return Run(
        path=Path(f"/runs/x-{scheduler}"),
        config={"scheduler": scheduler, "options": {f"option_{i}": i for i in range(options)}},
        summary=base,
        fires=pd.DataFrame(),
        samples=pd.DataFrame(),
        label=scheduler,
    )


def three_designs() -> list[Run]:
    return [run("pg_queue"), run("pg_leased"), run("temporal_shards", lost=3)]


def test_the_answer_comes_first_then_the_reasons_the_checks_the_tables_and_the_notes():
    page = render_html(build_report(three_designs(), with_figures=False))
    ids = ["first", "recommendation", "checks-section", "summary-section", "notes", "environment"]
    at = [page.index(f'id="{i}"') for i in ids]
    assert at == sorted(at), dict(zip(ids, at))
    first = page[page.index('id="first"') : page.index('id="recommendation"')]
    assert 'class="pick"' in first  # the recommendation in one sentence
    assert all(f"{name}: " in first for name in ("pg_queue", "pg_leased", "temporal_shards"))  # a line each
    assert "workload production-compressed, 556 fires/s target" in first


def test_a_red_box_only_for_what_makes_a_figure_unusable():
    page = render_html(build_report(three_designs(), with_figures=False))
    boxes = re.findall(r'<div class="warnbox"[^>]*>(.*?)</div>', page, flags=re.S)
    assert len(boxes) == 1 and "temporal_shards" in boxes[0] and "lost" in boxes[0], boxes
    first = page[page.index('id="first"') : page.index('id="recommendation"')]
    assert 'class="warnbox"' in first  # and it is on the first screen


def test_each_warning_is_said_once_in_the_html_and_once_in_the_markdown():
    rep = build_report(three_designs(), with_figures=False)
    page, md, full = render_html(rep), render_markdown(rep), render_markdown(rep, full=True)
    for text in (DISAGREE, "Temporal's store here is the dev server's SQLite"):
        assert page.count(escape(text)) == 1, (text, page.count(escape(text)))
        assert md.count(text) == 1 and full.count(text) == 1, (text, md.count(text), full.count(text))
    notes = page[page.index('id="notes"') :]
    assert "pg_queue, pg_leased, temporal_shards" in notes and "dead tuples" in notes  # who, and what it qualifies


def test_the_markdown_summary_fits_a_ci_comment_and_points_to_the_full_report():
    rep = build_report(three_designs(), with_figures=False)
    md = render_markdown(rep, html_name="report.html")
    assert len(md.encode()) < 6000, len(md.encode())
    assert "## The answer" in md and "`report.html`" in md and "option_29" not in md
    assert "option_29" in render_markdown(rep, full=True)  # the long form keeps every table


def test_options_are_folded_away():
    page = render_html(build_report(three_designs(), with_figures=False))
    row = page[page.index('<tr data-row="options"') :]
    row = row[: row.index("</tr>")]
    assert row.count("<details><summary>30 options</summary>") == 3
