"""``bench migrate dry-run``: rehearse moving timers from one scheduler to another (the rehearsal
itself is :mod:`harness.migration_run`)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from bench.options import overrides, stack_options, workload_options


@click.group("migrate")
def migrate() -> None:
    """Rehearse a migration between two schedulers."""


@migrate.command("dry-run")
@click.option("--from", "from_name", required=True, help="The scheduler in charge today (the primary).")
@click.option("--to", "to_name", required=True, help="The scheduler to move to (the shadow).")
@workload_options("workload", "rate", "triggers", "interval", "duration", "warmup", "seed", workload_default="smoke")
@click.option("--tolerance", default="15s", show_default=True, help="Due times within this match.")
@click.option("--switch-at", default=None, help="Switch reads this long after the start (e.g. 30s).")
@click.option("--max-extra", default=0.001, show_default=True, type=float,
              help="Extra shadow fires allowed, as a share of matched fires.")
@click.option("--opt-from", "opts_from", multiple=True, help="Primary scheduler option key=value.")
@click.option("--opt-to", "opts_to", multiple=True, help="Shadow scheduler option key=value.")
@click.option("--control", is_flag=True,
              help="First rehearse --from against itself (separate stores) to measure the noise floor.")
@click.option("--keep", is_flag=True, help="Keep both schemas (`bench env gc` leaves them).")
@click.option("--out", default="runs", show_default=True, help="Parent directory of run directories.")
@click.option("--allow-leftovers", is_flag=True,
              help="Start even though schemas left by interrupted runs hold more than 1 GiB on the server.")
@stack_options
def dry_run(from_name, to_name, workload_spec, tolerance, switch_at, max_extra, opts_from, opts_to, control, keep,
            out, allow_leftovers, dsn, temporal_address, **workload) -> None:
    """Dual-write rehearsal from one scheduler to another, with a GO / NO-GO verdict."""
    from harness import migration_run
    from harness.errors import UsageError
    from harness.inputs import check_finite_option, check_writable_dir, load_workload, parse_duration_option
    from harness.schemas import check_leftovers
    from harness.servers import resolve_servers, scheduler_class, scheduler_options

    primary_cls = scheduler_class(from_name)
    shadow_cls = scheduler_class(to_name)
    in_process = not all(getattr(c, "needs_postgres", False) or getattr(c, "needs_temporal", False)
                         for c in (primary_cls, shadow_cls))
    w = load_workload(workload_spec, overrides(workload), state_in_process=in_process)
    tolerance_s = parse_duration_option("--tolerance", tolerance)
    if tolerance_s <= 0:
        raise UsageError(f"bad --tolerance {tolerance}; give a positive duration such as 15s")
    switch_after_s = parse_duration_option("--switch-at", switch_at) if switch_at is not None else None
    if switch_after_s is not None and not (0 < switch_after_s < w.warmup_s + w.duration_s):
        raise UsageError(
            f"--switch-at {switch_at} is outside the run (0 .. {w.warmup_s + w.duration_s:g} s); pick a time inside it"
        )
    check_finite_option("--max-extra", max_extra, lo=0.0)
    opts = {"from": scheduler_options(primary_cls, opts_from), "to": scheduler_options(shadow_cls, opts_to)}
    check_writable_dir("--out", out)
    note = lambda m: click.echo(f"note: {m}", err=True)  # noqa: E731
    dsn, address = resolve_servers([primary_cls, shadow_cls], dsn, temporal_address, say=note)
    if dsn:
        check_leftovers(dsn, allow_leftovers, say=note)
    code = migration_run.dry_run(primary_cls, shadow_cls, opts, w, dsn, address, Path(out), keep, list(sys.argv),
                                 tolerance_s=tolerance_s, switch_after_s=switch_after_s, max_extra_ratio=max_extra,
                                 control=control, say=click.echo)
    if code:
        sys.exit(code)
