"""A report: the runs, Table 1, the figures, the narrative and any failed runs, built once and
rendered to HTML and/or Markdown."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path

from reports.load import Run, load_runs, pick_baseline
from reports.narrative import Sentence, sentences
from reports.plots import Figure, render_figures
from reports.tables import SummaryTable, build_summary_table


@dataclass
class FailedRun:
    """A run that ``bench compare`` started and that failed: shown in the report, never hidden."""

    scheduler: str
    command: list[str]
    exit_code: int
    output_tail: str
    run_dir: str | None = None


@dataclass
class Report:
    runs: list[Run]
    table: SummaryTable
    narrative: list[Sentence]
    figures: list[Figure] = field(default_factory=list)
    failures: list[FailedRun] = field(default_factory=list)
    generated_at: str = ""

    @property
    def baseline(self) -> Run | None:
        return self.runs[self.table.baseline] if self.runs else None


def build_report(runs: list[Run], baseline: int = 0, failures: list[FailedRun] | None = None,
                 with_figures: bool = True) -> Report:
    table = build_summary_table(runs, baseline)
    return Report(
        runs=runs,
        table=table,
        narrative=sentences(table) if runs else [],
        figures=render_figures(runs) if (with_figures and runs) else [],
        failures=list(failures or []),
        generated_at=dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
    )


def write_report(run_args: list[str], html_path: Path | None, markdown_path: Path | None,
                 baseline: str | None = None, failures: list[FailedRun] | None = None) -> Report:
    """Load the runs, build the report and write the requested files."""
    from reports.html import render_html
    from reports.markdown import render_markdown

    runs = load_runs(run_args) if run_args else []
    report = build_report(runs, pick_baseline(runs, baseline) if runs else 0, failures, with_figures=html_path is not None)
    if html_path is not None:
        html_path.parent.mkdir(parents=True, exist_ok=True)
        html_path.write_text(render_html(report), encoding="utf-8")
    if markdown_path is not None:
        markdown_path.parent.mkdir(parents=True, exist_ok=True)
        markdown_path.write_text(render_markdown(report), encoding="utf-8")
    return report
