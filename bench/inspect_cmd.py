"""``bench inspect``: diagnose a team's own timer table, read-only (see :mod:`harness.inspect_run`)."""

from __future__ import annotations

import time
from pathlib import Path

import click

from bench.options import owntable_options


@click.command("inspect")
@owntable_options
@click.option(
    "--due-column",
    default=None,
    help="The column the due-work query orders by (default: the preset's, or guessed from a timestamp column "
    "leading a B-tree index).",
)
@click.option(
    "--watch",
    "watch",
    default="60s",
    show_default=True,
    help="How long to watch the table's counters (churn, HOT, vacuum, the horizon); 0s skips it.",
)
@click.option(
    "--analyze",
    is_flag=True,
    help="Also run the due-work query (EXPLAIN ANALYZE of a plain SELECT in a read-only transaction).",
)
@click.option(
    "--compare",
    "compare",
    multiple=True,
    help="Run directories or a directory of runs (bench compare's --out) to cite (repeatable).",
)
@click.option(
    "-o",
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where inspect.json and inspect.md go (default: runs/inspect-<timestamp>).",
)
def inspect(
    dsn, table, preset, where, statement_timeout, lock_timeout, due_column, watch, analyze, compare, out_dir
) -> None:
    """Diagnose SCHEMA.TABLE (or a job library's, --preset) read-only: shape, churn, the vacuum
    horizon, bloat, the cost of finding due work, and which failure signatures it shows (the
    Composio article's, and the job library's own)."""
    from harness.inputs import parse_duration_option
    from harness.inspect_run import inspect_table
    from harness.job_libraries import preset as find_preset
    from harness.owntable import guards_from, resolve_dsn

    if preset:
        find_preset(preset)  # an unknown name fails before anything else
    watch_s = parse_duration_option("--watch", watch)
    guards = guards_from(
        parse_duration_option("--statement-timeout", statement_timeout),
        parse_duration_option("--lock-timeout", lock_timeout),
    )
    out_dir = out_dir or Path("runs") / time.strftime("inspect-%Y%m%d-%H%M%S", time.gmtime())
    say = lambda m: click.echo(m, err=True)  # noqa: E731
    result = inspect_table(
        resolve_dsn(dsn, say),
        table,
        due_column=due_column,
        watch_s=watch_s,
        analyze=analyze,
        compare=list(compare),
        out_dir=out_dir,
        guards=guards,
        say=say,
        preset_name=preset,
        where=where,
    )
    for line in result.terminal:
        click.echo(line)
    click.echo(f"inspect: {result.json_path} {result.md_path}")
