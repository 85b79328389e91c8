"""``bench report``: compare recorded run directories side by side (the report lives in ``reports/``)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from harness.inputs import parse_rate_option


@click.command("report")
@click.argument("runs", nargs=-1, required=True)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("report.html"),
    show_default=True,
    help="The HTML report (one self-contained file).",
)
@click.option(
    "--markdown",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also write a Markdown summary to this file: the answer, a line per design, the deciding figures "
    "and the notes, short enough for a CI comment (--markdown-full: every table and the narrative).",
)
@click.option(
    "--markdown-full",
    is_flag=True,
    default=False,
    help="Write every table and the narrative to --markdown, not the summary.",
)
@click.option(
    "--baseline",
    default=None,
    help="The run ratios are computed against: a run directory, its name, or a scheduler name (default: "
    "the first run). With --fail-on, every run it names (a directory of runs, or a scheduler) is the "
    "baseline side and the others the candidates.",
)
@click.option(
    "--slo",
    default=None,
    metavar="THRESHOLDS",
    help="What the recommendation asks of a design, e.g. 'p99<1s,lost=0,jain>0.9,worst_tenant_p99<2s' "
    "(default: lag p99 within each design's declared bound, 0 lost, Jain's index >= 0.9).",
)
@click.option(
    "--project-rate",
    default=None,
    metavar="RATE",
    help="The rate of the cost-per-day table, e.g. 556/s (default: each run's target rate).",
)
@click.option(
    "--fail-on",
    default=None,
    metavar="THRESHOLDS",
    help="Regression gate against --baseline, e.g. 'lag_p99>+15%,wal_per_fire>+10%,hot_ratio<-5pp,lost>0': "
    "exit 3 when one is crossed, and write a Markdown verdict (--gate-markdown).",
)
@click.option(
    "--gate-markdown",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Where the gate's Markdown verdict goes (default: gate.md beside the HTML report).",
)
def report(
    runs: tuple[str, ...],
    output: Path,
    markdown: Path | None,
    markdown_full: bool,
    baseline: str | None,
    slo: str | None,
    project_rate: str | None,
    fail_on: str | None,
    gate_markdown: Path | None,
) -> None:
    """Compare run directories side by side: a recommendation, tables, plots, a narrative.

    RUNS are run directories, directories of runs (such as runs/) or globs ('runs/*-pg_*').
    """
    from reports.report import write_report

    rate = parse_rate_option("--project-rate", project_rate) if project_rate else None
    gate_path = (gate_markdown or output.parent / "gate.md") if fail_on else None
    rep = write_report(
        list(runs),
        output,
        markdown,
        baseline=baseline,
        slo=slo,
        project_rate=rate,
        fail_on=fail_on,
        gate_path=gate_path,
        markdown_full=markdown_full,
    )
    click.echo(f"report: {output} ({len(rep.runs)} runs)")
    if markdown:
        click.echo(f"markdown: {markdown}")
    d = rep.decision
    if d is not None:
        click.echo(d.recommendation.headline)
    if d is not None and d.gate is not None:
        click.echo(f"gate: {'FAIL' if d.gate.failed else 'PASS'} ({gate_path})")
        for line in d.gate.lines:
            if line.failed:
                click.echo(f"  {line.threshold.text}: {line.why}")
        if d.gate.failed:
            sys.exit(3)
