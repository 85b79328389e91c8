"""``bench migrate dry-run`` and ``bench migrate reconcile``: rehearse moving timers from one
scheduler to another, and compare two live stores (the engines: :mod:`harness.migration_run`,
:mod:`harness.reconcile_run`)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click

from bench.options import overrides, stack_options, workload_options


@click.group("migrate")
def migrate() -> None:
    """Rehearse a migration between two schedulers; reconcile two live stores."""


@migrate.command("dry-run")
@click.option("--from", "from_name", required=True, help="The scheduler in charge today (the old store, the primary).")
@click.option("--to", "to_name", required=True, help="The scheduler to move to (the new store, the shadow).")
@workload_options("workload", "rate", "triggers", "interval", "duration", "warmup", "seed", workload_default="smoke")
@click.option(
    "--steps",
    default=None,
    help="The move, in order, each optionally @TIME after the start: dual-write, backfill, switch-execution, "
    "stop-old-writes, rollback, reconcile. Default: dual-write,backfill (observe only).",
)
@click.option("--plan", "plan_file", default=None, help="A YAML plan file with the same steps (steps: [...]).")
@click.option("--switch-at", default=None, help="Shorthand for --steps dual-write,backfill,switch-execution@TIME.")
@click.option(
    "--max-lag-p99",
    default=None,
    help="The shadow's lag p99 must stay within this (default: the --to design's declared bound).",
)
@click.option(
    "--max-lag-regression",
    default=None,
    help="Shadow lag p99 minus primary lag p99 must stay within this (default: no limit).",
)
@click.option("--tolerance", default="15s", show_default=True, help="Due times within this match.")
@click.option(
    "--max-extra",
    default=0.001,
    show_default=True,
    type=float,
    help="Extra shadow fires allowed, as a share of matched fires.",
)
@click.option(
    "--fault",
    "faults",
    multiple=True,
    help="A fault during the rehearsal (repeatable): restart-temporal@20s[:5s] (stays down 5 s), "
    "restart-postgres@20s[:5s], pause-worker@20s:5s (stalls the new store's workers), "
    "kill-worker@20s (crashes them; a replacement starts 1 s later).",
)
@click.option(
    "--app-writes",
    default="10/s",
    show_default=True,
    help="The application's own writes during the rehearsal (moves of long-horizon timers), 0 for none.",
)
@click.option(
    "--settle",
    default=None,
    help="Store checks and reconcile confirm a difference by reading again this much later "
    "(default: twice the slower design's max lag + 2 s).",
)
@click.option(
    "--write-timeout",
    default="2s",
    show_default=True,
    help="How long the application waits for a write to the store that is not the store of record "
    "before queueing it (plus 1 ms per timer in the write).",
)
@click.option("--opt-from", "opts_from", multiple=True, help="Primary scheduler option key=value.")
@click.option("--opt-to", "opts_to", multiple=True, help="Shadow scheduler option key=value.")
@click.option(
    "--control", is_flag=True, help="First rehearse --from against itself (separate stores) to measure the noise floor."
)
@click.option(
    "--keep",
    is_flag=True,
    help="Keep both schemas (`bench env gc` leaves them; for bench migrate reconcile afterwards).",
)
@click.option("--out", default="runs", show_default=True, help="Parent directory of run directories.")
@click.option(
    "--allow-leftovers",
    is_flag=True,
    help="Start even though schemas left by interrupted runs hold more than 1 GiB on the server.",
)
@stack_options
def dry_run(
    from_name,
    to_name,
    workload_spec,
    steps,
    plan_file,
    switch_at,
    max_lag_p99,
    max_lag_regression,
    tolerance,
    max_extra,
    faults,
    app_writes,
    settle,
    write_timeout,
    opts_from,
    opts_to,
    control,
    keep,
    out,
    allow_leftovers,
    dsn,
    temporal_address,
    **workload,
) -> None:
    """Rehearse a move (dual write, backfill, switch, stop old writes, rollback) with a GO / NO-GO verdict."""
    from harness import faults as faults_mod
    from harness import migration_run
    from harness.errors import UsageError
    from harness.inputs import (
        check_finite_option,
        check_writable_dir,
        load_plan,
        load_workload,
        parse_duration_option,
        parse_faults,
        parse_rate_option,
    )
    from harness.schemas import check_leftovers
    from harness.servers import resolve_servers, scheduler_class, scheduler_options

    primary_cls = scheduler_class(from_name)
    shadow_cls = scheduler_class(to_name)
    in_process = not all(
        getattr(c, "needs_postgres", False) or getattr(c, "needs_temporal", False) for c in (primary_cls, shadow_cls)
    )
    w = load_workload(workload_spec, overrides(workload), state_in_process=in_process)
    tolerance_s = parse_duration_option("--tolerance", tolerance)
    if tolerance_s <= 0:
        raise UsageError(f"bad --tolerance {tolerance}; give a positive duration such as 15s")
    if sum(x is not None for x in (steps, plan_file, switch_at)) > 1:
        raise UsageError("give one of --steps, --plan and --switch-at")
    if switch_at is not None:
        parse_duration_option("--switch-at", switch_at)
        steps = f"dual-write,backfill,switch-execution@{switch_at}"
    try:
        plan_steps = load_plan(steps, plan_file, w.warmup_s + w.duration_s)
    except UsageError as exc:
        raise UsageError(("--switch-at: " if switch_at is not None else "") + str(exc)) from None
    limits = {}
    for name, text in (
        ("--max-lag-p99", max_lag_p99),
        ("--max-lag-regression", max_lag_regression),
        ("--settle", settle),
        ("--write-timeout", write_timeout),
    ):
        limits[name] = parse_duration_option(name, text) if text is not None else None
    for name in ("--max-lag-p99", "--write-timeout"):
        if limits[name] is not None and limits[name] <= 0:
            raise UsageError(f"bad {name} {limits[name]:g} s; give a positive duration")
    check_finite_option("--max-extra", max_extra, lo=0.0)
    app_writes_per_s = 0.0 if app_writes.strip() in ("0", "0/s") else parse_rate_option("--app-writes", app_writes)
    opts = {"from": scheduler_options(primary_cls, opts_from), "to": scheduler_options(shadow_cls, opts_to)}
    fault_specs = parse_faults(faults)
    check_writable_dir("--out", out)
    note = lambda m: click.echo(f"note: {m}", err=True)  # noqa: E731
    dsn, address = resolve_servers([primary_cls, shadow_cls], dsn, temporal_address, say=note)
    if dsn:
        check_leftovers(dsn, allow_leftovers, say=note)
    faults_mod.check(fault_specs, dsn=dsn, temporal_address=address, nodes=None, can_pause=True)
    code = migration_run.dry_run(
        primary_cls,
        shadow_cls,
        opts,
        w,
        dsn,
        address,
        Path(out),
        keep,
        list(sys.argv),
        control=control,
        say=click.echo,
        steps=plan_steps,
        tolerance_s=tolerance_s,
        max_extra_ratio=max_extra,
        max_lag_p99_s=limits["--max-lag-p99"],
        max_lag_regression_s=limits["--max-lag-regression"],
        settle_s=limits["--settle"],
        app_writes_per_s=app_writes_per_s,
        write_timeout_s=limits["--write-timeout"],
        fault_specs=fault_specs,
    )
    if code:
        sys.exit(code)


@migrate.command("reconcile")
@click.option("--from", "from_name", required=True, help="The source of truth (the store that executes).")
@click.option("--to", "to_name", required=True, help="The store checked against it (and repaired with --repair).")
@click.option("--schema", default=None, help="A rehearsal's schema: --from in SCHEMA_p, --to in SCHEMA_s.")
@click.option("--from-schema", default=None, help="The --from store's schema.")
@click.option("--to-schema", default=None, help="The --to store's schema.")
@click.option("--tolerance", default="1ms", show_default=True, help="Fire times within this are equal.")
@click.option(
    "--settle",
    default=None,
    help="Read again this much later; only differences still there count as drift "
    "(default: twice the slower design's max lag + 2 s; 0 for stores at rest).",
)
@click.option("--repair", is_flag=True, help="Re-arm the --to store from the --from store (and disarm its extras).")
@click.option("--json", "json_out", default=None, help="Also write the report to this file.")
@click.option("--opt-from", "opts_from", multiple=True, help="--from scheduler option key=value.")
@click.option("--opt-to", "opts_to", multiple=True, help="--to scheduler option key=value.")
@stack_options
def reconcile_cmd(
    from_name,
    to_name,
    schema,
    from_schema,
    to_schema,
    tolerance,
    settle,
    repair,
    json_out,
    opts_from,
    opts_to,
    dsn,
    temporal_address,
) -> None:
    """Compare two live stores' armed timers by id and next fire time; report drift (missing, extra,
    moved) with samples; read-only unless --repair. Exit 0: no drift left; 3: drift."""
    import asyncio

    from harness import reconcile_run
    from harness.errors import UsageError
    from harness.inputs import parse_duration_option
    from harness.servers import resolve_servers, scheduler_class, scheduler_options
    from migration.reconcile import summary_line

    from_cls, to_cls = scheduler_class(from_name), scheduler_class(to_name)
    from_schema, to_schema = reconcile_run.schemas(schema, from_schema, to_schema)
    tolerance_s = parse_duration_option("--tolerance", tolerance)
    if tolerance_s <= 0:
        raise UsageError(f"bad --tolerance {tolerance}; give a positive duration such as 1ms")
    settle_s = parse_duration_option("--settle", settle) if settle is not None else None
    opts = {"from": scheduler_options(from_cls, opts_from), "to": scheduler_options(to_cls, opts_to)}
    dsn, address = resolve_servers(
        [from_cls, to_cls], dsn, temporal_address, say=lambda m: click.echo(f"note: {m}", err=True)
    )
    report, code = asyncio.run(
        reconcile_run.run(
            from_cls,
            to_cls,
            opts,
            from_schema,
            to_schema,
            dsn,
            address,
            tolerance_s=tolerance_s,
            settle_s=settle_s,
            repair=repair,
            say=click.echo,
        )
    )
    click.echo(summary_line(report))
    samples = report["after_repair_samples"] if report.get("after_repair") else report["samples"]
    label = "left after repair" if report.get("after_repair") else ("drift" if not repair else "repaired")
    if repair and report.get("after_repair") and not report["after_repair"]["total"]:
        samples, label = report["samples"], "repaired"
    for kind in ("missing", "extra", "moved"):
        for line in samples[kind]:
            click.echo(f"  {label} {kind}: {line}")
    if json_out:
        Path(json_out).write_text(json.dumps(report, indent=2, default=str))
    if from_cls.needs_temporal or to_cls.needs_temporal:
        # The Temporal client's Rust threads can outlive the interpreter's shutdown and crash it
        # (seen here as SIGSEGV after the report was printed; temporalio/sdk-python#300): the
        # work is done and written, so leave without the teardown.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    if code:
        sys.exit(code)
