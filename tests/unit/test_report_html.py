"""Page sections: the migration hook, failed runs, and warnings shown where a reader sees them."""

from pathlib import Path

import pandas as pd

from reports.html import render_html
from reports.load import Run
from reports.markdown import render_markdown
from reports.report import FailedRun, build_report


def run(scheduler, migration=None, **summary) -> Run:
    base = {
        "complete": True,
        "scheduler": scheduler,
        "target_rate": 10.0,
        "achieved_rate": 10.0,
        "lag_ms": {"p50": 1.0, "p90": 2.0, "p99": 3.0, "p999": 4.0, "max": 5.0},
        "outcomes": {"due": 10, "on_time": 10, "late": 0, "pending": 0, "lost": 0},
        "lost_in_warmup": 0,
        "correct": True,
        "failures": [],
        "duplicate_fires": 0,
        "duplicate_effects": 0,
        "warnings": [],
    }
    base.update(summary)
    return Run(
        path=Path(f"/runs/x-{scheduler}"),
        config={"scheduler": scheduler},
        summary=base,
        fires=pd.DataFrame(),
        samples=pd.DataFrame(),
        migration=migration,
        label=scheduler,
    )


def test_migration_section_appears_only_for_a_migration_run():
    plain = render_html(build_report([run("a")], with_figures=False))
    assert 'id="migration"' not in plain
    page = render_html(
        build_report(
            [run("a", migration={"verdict": "NO-GO", "counts": {"missing": 3, "matched": 97}})], with_figures=False
        )
    )
    assert 'id="migration"' in page and "NO-GO" in page and "missing" in page
    assert "Migration dry-run" in render_markdown(
        build_report([run("a", migration={"verdict": "GO"})], with_figures=False), full=True
    )


def test_warnings_and_failed_runs_are_shown_at_the_top():
    rep = build_report(
        [run("a", warnings=["rate not held: achieved 5.0 fires/s"], achieved_rate=5.0)],
        failures=[FailedRun("b", ["bench", "run", "--scheduler", "b"], 3, "boom: connection refused")],
        with_figures=False,
    )
    page = render_html(rep)
    assert page.index('class="warnbox"') < page.index('id="summary"')
    assert "rate not held: achieved 5.0 fires/s" in page
    assert 'data-failed="b"' in page and "boom: connection refused" in page and "exited with 3" in page
    md = render_markdown(rep, full=True)
    assert "## Failed runs" in md and "rate not held" in md


def test_reports_never_import_a_scheduler():
    """Layering (docs/design.md): a report reads run directories only."""
    import subprocess
    import sys

    code = (
        "import sys, reports.report, reports.html, reports.markdown, reports.plots, reports.narrative, "
        "reports.tables, reports.load; print([m for m in sys.modules if m.split('.')[0] in ('schedulers', 'loadgen')])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_migration_section_shows_the_lag_comparison_and_the_slo_checks():
    m = {
        "verdict": "NO-GO",
        "from": "pg_queue",
        "to": "temporal_shards",
        "counts": {"matched": 10},
        "lag": {
            "primary": {"fires": 10, "p50": 500.0, "p99": 1000.0, "max": 1100.0},
            "shadow": {"fires": 10, "p50": 6000.0, "p99": 11000.0, "max": 12000.0},
            "regression_p99": 10000.0,
            "worst_tenant": {
                "tenant": "tenant-007",
                "primary_p99": 900.0,
                "shadow_p99": 12500.0,
                "regression_p99": 11600.0,
            },
        },
        "slo": {
            "lag_regression_p99": {"value": 10000.0, "limit": 1000.0, "limit_from": "--max-lag-regression", "ok": False}
        },
    }
    page = render_html(build_report([run("a", migration=m)], with_figures=False))
    assert 'class="migration-lag"' in page and "tenant-007" in page and "EXCEEDED" in page and "10.0 s" in page
    md = render_markdown(build_report([run("a", migration=m)], with_figures=False), full=True)
    assert "| p99 | 1,000.0 ms | 11.0 s | 10.0 s |" in md
