"""``bench report``: compare recorded run directories side by side (the report lives in ``reports/``)."""

from __future__ import annotations

from pathlib import Path

import click


@click.command("report")
@click.argument("runs", nargs=-1, required=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=Path("report.html"),
              show_default=True, help="The HTML report (one self-contained file).")
@click.option("--markdown", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the tables and the narrative as Markdown to this file.")
@click.option("--baseline", default=None,
              help="The run ratios are computed against: a run directory, its name, or a scheduler name (default: the first run).")
def report(runs: tuple[str, ...], output: Path, markdown: Path | None, baseline: str | None) -> None:
    """Compare run directories side by side: tables, plots, a narrative.

    RUNS are run directories, directories of runs (such as runs/) or globs ('runs/*-pg_*').
    """
    from reports.report import write_report

    rep = write_report(list(runs), output, markdown, baseline=baseline)
    click.echo(f"report: {output} ({len(rep.runs)} runs)")
    if markdown:
        click.echo(f"markdown: {markdown}")
