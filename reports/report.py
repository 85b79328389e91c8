"""Write a report: load the runs, build the model (:mod:`reports.model`), render HTML and/or
Markdown (:mod:`reports.html`, :mod:`reports.markdown`)."""

from __future__ import annotations

from pathlib import Path

from reports import harness_ceiling
from reports.errors import ReportError
from reports.gate import GateVerdict, evaluate, verdict_markdown
from reports.html import render_html
from reports.load import baseline_side, load_runs, pick_baseline
from reports.markdown import render_markdown
from reports.model import FailedRun, Report, build_report

__all__ = ["FailedRun", "Report", "build_report", "write_report"]


def gate_runs(runs, baseline: str | None, fail_on: str) -> GateVerdict:
    """The regression gate over loaded runs: ``baseline`` names the baseline side, the rest are
    the candidates (:mod:`reports.gate`)."""
    from reports.thresholds import parse_thresholds

    thresholds = parse_thresholds(fail_on, "--fail-on", allow_relative=True)
    if not baseline:
        raise ReportError(
            "--fail-on needs --baseline: name the run(s) (a directory, a run, or a scheduler) to compare against"
        )
    side = set(baseline_side(runs, baseline))
    base = [r for i, r in enumerate(runs) if i in side]
    cand = [r for i, r in enumerate(runs) if i not in side]
    if not cand:
        raise ReportError(f"--baseline {baseline!r} names every run; give the candidate runs too")
    return evaluate(base, cand, thresholds)


def write_report(
    run_args: list[str],
    html_path: Path | None,
    markdown_path: Path | None,
    baseline: str | None = None,
    failures: list[FailedRun] | None = None,
    slo: str | None = None,
    project_rate: float | None = None,
    fail_on: str | None = None,
    gate_path: Path | None = None,
    markdown_full: bool = False,
) -> Report:
    """Load the runs, build the report and write the requested files; with ``fail_on``, the gate's
    Markdown verdict too (``gate_path``). The Markdown is the summary unless ``markdown_full``."""
    runs = load_runs(run_args) if run_args else []
    # the harness's own calibration runs are not compared: each run carries the one for its workload
    runs, calibrations = harness_ceiling.split(runs)
    harness_ceiling.attach(runs, calibrations)
    gate = gate_runs(runs, baseline, fail_on) if fail_on else None
    if slo:  # a bad --slo fails before anything is written
        from reports.thresholds import parse_thresholds

        parse_thresholds(slo, "--slo", allow_relative=False)
    base_i = 0
    if runs and baseline:
        base_i = baseline_side(runs, baseline)[0] if gate is not None else pick_baseline(runs, baseline)
    report = build_report(
        runs, base_i, failures, with_figures=html_path is not None, slo=slo, project_rate=project_rate, gate=gate
    )
    if gate is not None and gate_path is not None:
        gate_path.parent.mkdir(parents=True, exist_ok=True)
        gate_path.write_text(verdict_markdown(gate), encoding="utf-8")
    if html_path is not None:
        html_path.parent.mkdir(parents=True, exist_ok=True)
        html_path.write_text(render_html(report), encoding="utf-8")
    if markdown_path is not None:
        markdown_path.parent.mkdir(parents=True, exist_ok=True)
        html_name = None if html_path is None else html_path.name
        markdown_path.write_text(render_markdown(report, markdown_full, html_name), encoding="utf-8")
    return report
