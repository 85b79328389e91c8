"""The "why" section: shown only beside a rejected alternative, citing the per-fire figures."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from reports.html import render_html
from reports.load import Run
from reports.markdown import render_markdown
from reports.model import build_report
from reports.why import hold_snapshot_sentence, why_blocks

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


def held(dead: dict | None, fired: bool = True) -> Run:
    r = run("pg_partitioned", {}, 2.2, 500.0)
    f = {"spec": "hold-snapshot@3s:6s", "kind": "hold-snapshot", "fired": fired, "note": "" if fired else "not fired"}
    if fired:
        f.update(start=1003.0, end=1009.0)
    if dead is not None:
        f["dead_tuples"] = dead
    r.summary["faults"] = [f]
    return r


def d(start, release, lowest=None, after_s=None):
    return {"start": start, "release": release, "lowest_after": lowest, "lowest_after_s": after_s}


def test_the_hold_snapshot_sentence_says_what_grew_by_how_much_and_what_vacuum_removed():
    s = hold_snapshot_sentence(held({"p.t0": d(10, 1010, 60, 2.0), "p.t1": d(0, 500, 500, 4.0)}))
    assert "held a snapshot for 6.0 s" in s
    assert "grew in 2 of 2 relations, by 1,500 (p.t0 10 to 1,010, p.t1 0 to 500)" in s
    assert "every one at once" in s
    assert "removed 63% of the growth (down by 950) within 4.0 s" in s


def test_the_hold_snapshot_sentence_follows_the_measurement_not_a_constant():
    # nothing grew: no claim about a horizon
    s = hold_snapshot_sentence(held({"p.t0": d(10, 10, 10, 1.0), "p.t1": d(3, 3)}))
    assert s.endswith("dead tuples grew in none of 2 relations") and "horizon" not in s
    # grew in one of two, and vacuum never took it back
    s = hold_snapshot_sentence(held({"p.t0": d(10, 410, 420, 3.0), "p.t1": d(3, 3)}))
    assert "grew in 1 of 2 relations, by 400" in s and "every one" not in s
    assert s.endswith("vacuum removed none of them by the end of the run")
    # no sample after the release
    assert hold_snapshot_sentence(held({"p.t0": d(0, 400)})).endswith("shows whether vacuum removed them")
    # a fault that never fired, or one without counts, claims nothing about dead tuples
    s = hold_snapshot_sentence(held(None, fired=False))
    assert "did not fire (not fired)" in s and "grew" not in s
    assert "recorded no dead-tuple counts" in hold_snapshot_sentence(held(None))
    assert hold_snapshot_sentence(run("pg_partitioned", {}, 2.2, 500.0)) is None
