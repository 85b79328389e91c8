"""``bench capture``: a workload (trace + YAML) derived from a team's own table, read-only (see
:mod:`harness.capture_run`)."""

from __future__ import annotations

from pathlib import Path

import click

from bench.options import owntable_options


@click.command("capture")
@owntable_options
@click.option(
    "--map",
    "mapping",
    default=None,
    help="Where things live: id=EXPR,tenant=EXPR,due=COL[,interval=COL][,state=EXPR]; EXPR is a column, a JSON "
    "path into one (args.trigger_id) or several joined by + (task_name+args); with --preset, any of them.",
)
@click.option(
    "--watch",
    "watch",
    default="5m",
    show_default=True,
    help="How long to watch re-arms (each trigger's interval when there is no interval column).",
)
@click.option(
    "-o",
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Directory for trace.csv, workload.yaml and capture.json.",
)
def capture(dsn, table, preset, where, statement_timeout, lock_timeout, mapping, watch, out_dir) -> None:
    """Derive a workload from SCHEMA.TABLE (or a job library's, --preset): population, intervals,
    tenants, state sizes, long horizons; ids and tenants hashed. Replay it with
    `bench compare --workload OUT/workload.yaml`."""
    from harness.capture_run import capture_table, parse_map
    from harness.inputs import parse_duration_option
    from harness.job_libraries import preset as find_preset
    from harness.owntable import guards_from, resolve_dsn

    if preset:
        find_preset(preset)  # an unknown name fails before anything else
    columns = parse_map(mapping, required=not preset)
    watch_s = parse_duration_option("--watch", watch)
    guards = guards_from(
        parse_duration_option("--statement-timeout", statement_timeout),
        parse_duration_option("--lock-timeout", lock_timeout),
    )
    say = lambda m: click.echo(m, err=True)  # noqa: E731
    result = capture_table(
        resolve_dsn(dsn, say),
        table,
        columns,
        watch_s=watch_s,
        out_dir=out_dir,
        guards=guards,
        say=say,
        where=where,
        preset_name=preset,
    )
    for line in result.lines:
        click.echo(line)
    click.echo(f"capture: {result.trace} {result.workload}")
