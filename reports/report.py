"""Write a report: load the runs, build the model (:mod:`reports.model`), render HTML and/or
Markdown (:mod:`reports.html`, :mod:`reports.markdown`)."""

from __future__ import annotations

from pathlib import Path

from reports.html import render_html
from reports.load import load_runs, pick_baseline
from reports.markdown import render_markdown
from reports.model import FailedRun, Report, build_report

__all__ = ["FailedRun", "Report", "build_report", "write_report"]


def write_report(run_args: list[str], html_path: Path | None, markdown_path: Path | None,
                 baseline: str | None = None, failures: list[FailedRun] | None = None) -> Report:
    """Load the runs, build the report and write the requested files."""
    runs = load_runs(run_args) if run_args else []
    report = build_report(runs, pick_baseline(runs, baseline) if runs else 0, failures, with_figures=html_path is not None)
    if html_path is not None:
        html_path.parent.mkdir(parents=True, exist_ok=True)
        html_path.write_text(render_html(report), encoding="utf-8")
    if markdown_path is not None:
        markdown_path.parent.mkdir(parents=True, exist_ok=True)
        markdown_path.write_text(render_markdown(report), encoding="utf-8")
    return report
