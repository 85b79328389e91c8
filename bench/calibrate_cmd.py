"""``bench calibrate``: the harness's own ceiling on a workload (the memory scheduler at 3x its rate)."""

from __future__ import annotations

from pathlib import Path

import click

from bench.options import out_dir_option, overrides, workload_args, workload_options

CALIBRATION_WORKLOAD = (
    "workload",
    "rate",
    "triggers",
    "interval",
    "tenants",
    "tenant_skew",
    "state_size",
    "warmup",
    "seed",
    "trace",
    "cadence",
    "on_time",
    "drain_limit",
)


@click.command("calibrate")
@workload_options(*CALIBRATION_WORKLOAD)
@click.option(
    "--factor",
    default=3.0,
    show_default=True,
    type=click.FloatRange(1.0, 20.0),
    help="Run the memory scheduler at this multiple of the workload's rate.",
)
@click.option("--duration", default="30s", show_default=True, help="Measured window of the calibration run.")
@out_dir_option("Where the calibration's run directory is written (beside the runs it is for).")
def calibrate(workload_spec: str | None, factor: float, duration: str, out_dir: Path, **workload) -> None:
    """Measure the harness's own ceiling on a workload: the memory scheduler (no store) at FACTOR
    times the workload's rate, same shape, a short window.

    Reports of runs in the same --out directory find it and say whether a backend's figures could be
    the harness's: held at 3x the rate, they are the backend's; not held, its achieved rate is the
    harness's ceiling and any figure above a third of it is flagged.
    """
    from harness.errors import BenchError
    from harness.inputs import parse_duration_option

    duration_s = parse_duration_option("--duration", duration)
    params = {"workload_spec": workload_spec, **workload}
    rate = calibration_rate(params, out_dir)
    result = run_calibration(params, rate, out_dir, factor, duration_s)
    if result.run_dir is not None:
        click.echo(f"calibration: {result.run_dir}")
    if result.interrupted:
        raise KeyboardInterrupt
    if result.exit_code != 0:
        raise BenchError(f"the calibration run failed (exit {result.exit_code}); its output is above")


def calibration_rate(params: dict, out_dir: Path) -> float:
    """The workload's rate (the rate the calibration is for); a usage error when it has none."""
    from harness.errors import UsageError
    from harness.inputs import check_run

    plan = check_run("memory", params.get("workload_spec"), overrides(params), (), str(out_dir))
    if not plan.workload.rate_per_s:
        raise UsageError(
            "this workload has no steady rate to calibrate for (a trace of long-horizon timers only?); give --rate"
        )
    return float(plan.workload.rate_per_s)


def run_calibration(params: dict, rate: float, out_dir: Path, factor: float, duration_s: float, label: str = ""):
    from harness.calibrate import calibrate as run

    args = workload_args(params, skip=("rate", "duration", "triggers"))
    return run(args, rate, out_dir, lambda line: click.echo(line, nl=False, err=True), factor, duration_s, label)


def child_params(run_args: list[str]) -> dict:
    """The options a child ``bench run`` with ``run_args`` would parse (only parsed: the workload
    options are what a calibration reuses; a backend's ``--opt`` is not checked against memory)."""
    from bench.run_cmd import run

    with run.make_context("run", ["--scheduler", "memory", *run_args]) as ctx:
        return dict(ctx.params)


def short_window_s(duration: str | None, longest_s: float = 30.0) -> float:
    """A calibration's window: the runs' own window, at most ``longest_s``."""
    from loadgen.rates import parse_duration

    return min(longest_s, parse_duration(duration)) if duration else longest_s
