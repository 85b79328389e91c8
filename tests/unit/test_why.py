"""The "why" section: shown only beside a rejected alternative, citing the per-fire figures."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from reports.html import render_html
from reports.load import Run
from reports.markdown import render_markdown
from reports.model import build_report
from reports.why import why_blocks

START, END = 1000.0, 1060.0


def run(scheduler: str, gauges: dict[str, float], writes: float, achieved: float) -> Run:
    rows = [(END - 1.0, "run", f"backend.{k}", v) for k, v in gauges.items()]
    samples = pd.DataFrame(rows, columns=["t", "scope", "metric", "value"]).assign(elapsed_s=lambda d: d["t"] - START)
    summary = {
        "scheduler": scheduler,
        "achieved_rate": achieved,
        "per_fire": {"row_writes": writes, "wal_bytes": 600.0},
        "outcomes": {"due": 10, "on_time": 10, "late": 0, "pending": 0, "lost": 0},
        "warnings": [],
    }
    return Run(
        path=Path(f"/runs/x-{scheduler}"),
        config={"scheduler": scheduler, "window": {"measure_start": START, "measure_end": END}},
        summary=summary,
        fires=pd.DataFrame(),
        samples=samples,
        label=scheduler,
    )


def test_no_alternative_no_section():
    assert why_blocks([run("pg_leased", {}, 2.0, 500.0), run("temporal_shards", {}, 2.1, 500.0)]) == []


def test_per_trigger_beside_shards_cites_workflows_per_fire():
    per_trigger = run(
        "temporal_per_trigger",
        {"workflows_started_per_fire": 0.02, "activities_per_fire": 1.0, "signals_per_fire": 0.0},
        3.0,
        15.0,
    )
    shards = run("temporal_shards", {"activities_per_fire": 0.004}, 2.1, 150.0)
    blocks = why_blocks([shards, per_trigger])
    said = " ".join(" ".join(b.items) for b in blocks if b.kind == "list")
    assert "temporal_per_trigger (one Temporal workflow per trigger) per fire" in said
    assert "activities 1 against 0.004 (250.0x)" in said and "Achieved 15 against 150 fires/s" in said
    page = render_html(build_report([shards, per_trigger], with_figures=False))
    assert 'id="why"' in page
    assert "Why the Composio article chose what it chose" in render_markdown(
        build_report([shards, per_trigger], with_figures=False), full=True
    )


def test_an_alternative_without_the_chosen_design_says_so():
    blocks = why_blocks([run("pg_partitioned", {}, 2.2, 500.0)])
    said = " ".join(" ".join(b.items) for b in blocks if b.kind == "list")
    assert "ran without pg_leased" in said
