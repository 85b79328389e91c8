"""``bench capacity``: search for the highest rate one backend sustains under an SLO."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from bench.options import out_dir_option, stack_options
from harness.sweep import DEFAULT_WORKLOAD, DEFAULT_WORKLOAD_ARGS, default_warmup_s


@click.command("capacity", context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.option("--scheduler", required=True, help="A registered scheduler.")
@click.option(
    "--slo",
    default=None,
    metavar="THRESHOLDS",
    help="What a sustained step must meet, e.g. 'p99<1s,lost=0' (the figures of bench report --slo; "
    "default: lag p99 within the design's declared bound, 0 lost, Jain's index >= 0.9).",
)
@click.option("--start", "start_rate", default="500/s", show_default=True, help="The first rate tried.")
@click.option(
    "--factor",
    default=2.0,
    show_default=True,
    type=click.FloatRange(1.1, 10.0),
    help="The exponential probe's step, up while steps hold and down while they do not.",
)
@click.option(
    "--precision",
    default=0.10,
    show_default=True,
    type=click.FloatRange(0.01, 1.0),
    help="Bisect until the bracket (held, not held) is this narrow, relative.",
)
@click.option("--min-rate", default="10/s", show_default=True, help="Never search below this rate.")
@click.option("--max-rate", default="100000/s", show_default=True, help="Never search above this rate.")
@click.option(
    "--max-steps",
    default=12,
    show_default=True,
    type=click.IntRange(2, 100),
    help="Steps at most, confirmation included (a step run again because its arm ran into its window counts once).",
)
@click.option("--duration", default="30s", show_default=True, help="Measured window of each step.")
@click.option(
    "--warmup",
    default=None,
    help="Warm-up of each step (default: one maximum interval of the workload, longer for a backend "
    "with a long max lag).",
)
@click.option(
    "--workload",
    default=None,
    help=f"Workload preset or YAML file (default: the {DEFAULT_WORKLOAD} preset with "
    f"{' '.join(DEFAULT_WORKLOAD_ARGS)}).",
)
@out_dir_option("Parent of the search directory capacity-<timestamp>-<scheduler>/.")
@click.option("--no-pgbench", is_flag=True, help="Skip the database ceiling (pgbench).")
@click.option(
    "--calibrate/--no-calibrate",
    default=True,
    show_default=True,
    help="After the search, measure the harness's own ceiling at 3x the rate found (`bench calibrate`).",
)
@click.option("--pgbench-duration", default="10s", show_default=True, help="pgbench -T per batch size.")
@stack_options
@click.pass_context
def capacity(
    ctx: click.Context,
    scheduler: str,
    slo: str | None,
    start_rate: str,
    factor: float,
    precision: float,
    min_rate: str,
    max_rate: str,
    max_steps: int,
    duration: str,
    warmup: str | None,
    workload: str | None,
    out_dir: Path,
    no_pgbench: bool,
    calibrate: bool,
    pgbench_duration: str,
    dsn: str | None,
    temporal_address: str | None,
) -> None:
    """Find the highest rate SCHEDULER sustains: exponential probe, bisection, a confirmation rerun.

    A step is sustained when its run is complete and correct, holds its rate, meets the SLO, and
    its lag does not trend upward across the window. Writes runs/capacity-<timestamp>-<scheduler>/:
    one run directory per step, capacity.json, report.html and report.md. Any other option (such as
    --seed or --opt key=value) is passed to every `bench run`.
    """
    from bench.compare_cmd import check_children
    from harness.capacity import CapacityPlan, run_capacity, step_args
    from harness.capacity_rule import Search
    from harness.errors import UsageError
    from harness.inputs import check_writable_dir, parse_duration_option, parse_rate_option
    from harness.servers import scheduler_class

    scheduler_class(scheduler)  # an unknown name fails here, with the names it knows
    if slo:
        from reports.thresholds import parse_thresholds

        parse_thresholds(slo, "--slo", allow_relative=False)
    start = parse_rate_option("--start", start_rate)
    lo, hi = parse_rate_option("--min-rate", min_rate), parse_rate_option("--max-rate", max_rate)
    if not 0 < lo < hi:
        raise UsageError(f"--min-rate {min_rate} must be positive and below --max-rate {max_rate}")
    parse_duration_option("--duration", duration)
    pgbench_s = parse_duration_option("--pgbench-duration", pgbench_duration)
    if warmup is not None:
        warmup_s = parse_duration_option("--warmup", warmup)
    else:  # the workload's own default: one maximum interval (an --interval passed through counts)
        warmup_s = default_warmup_s(workload, ctx.args)
    search = Search(start=start, factor=factor, precision=precision, min_rate=lo, max_rate=hi, max_steps=max_steps)
    plan = CapacityPlan(
        scheduler=scheduler,
        slo=slo,
        search=search,
        duration=duration,
        warmup_s=warmup_s,
        workload=workload,
        extra_args=list(ctx.args),
        out_dir=out_dir,
        pgbench=not no_pgbench,
        pgbench_s=pgbench_s,
        dsn=dsn,
        temporal_address=temporal_address,
        command=sys.argv[sys.argv.index("capacity") :] if "capacity" in sys.argv else ["capacity"],
        calibration=(
            calibration_at(step_args_of(workload, ctx.args), warmup_s, duration)
            if calibrate and scheduler != "memory"
            else None
        ),
    )  # memory is the harness
    check_writable_dir("--out", out_dir)
    check_children(
        [scheduler],
        step_args(plan),
        out_dir,
        [],
        dsn,
        temporal_address,
        rate_args=["--rate", f"{min(max(start, lo), hi):g}/s", "--warmup", f"{warmup_s:g}s"],
    )
    result = run_capacity(plan, echo=lambda line: click.echo(line, nl=False, err=True))
    s = result.data["search"]
    found = s.get("rate")
    ceiling = (result.data.get("pgbench") or {}).get("rows_per_s")
    click.echo(
        f"capacity of {scheduler}: "
        + (f"{found:g} fires/s" if found else "not found")
        + (f" (held at {s['held_below']:g}/s" if s.get("held_below") else " (nothing held")
        + (f", not at {s['failed_at']:g}/s)" if s.get("failed_at") else ")")
        + (
            f"; {100 * found / ceiling:.1f}% of the pgbench ceiling ({ceiling:,.0f} rows/s)"
            if found and ceiling
            else ""
        )
        + f"; {s.get('stop_reason')}"
    )
    click.echo(f"capacity: {result.path}")
    if result.html is not None:
        click.echo(f"report: {result.html}")
    if result.interrupted:
        raise KeyboardInterrupt


def step_args_of(workload: str | None, extra: list[str]) -> list[str]:
    from harness.sweep import DEFAULT_WORKLOAD, DEFAULT_WORKLOAD_ARGS

    return (
        ["--workload", DEFAULT_WORKLOAD, *DEFAULT_WORKLOAD_ARGS] if workload is None else ["--workload", workload]
    ) + extra


def calibration_at(args: list[str], warmup_s: float, duration: str):
    """The harness calibration at 3x a rate the search found, as a callable ``(rate, out_dir)``:
    the steps' workload and warm-up, a window of at most 30 s."""
    from bench.calibrate_cmd import child_params, run_calibration, short_window_s

    params = {**child_params(args), "warmup": f"{warmup_s:g}s"}
    window_s = short_window_s(duration)
    return lambda rate, out: run_calibration(params, rate, out, 3.0, window_s, label="[harness ceiling] ")
