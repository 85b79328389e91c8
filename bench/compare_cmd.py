"""``bench compare``: every backend on one workload in sequence, then the report."""

from __future__ import annotations

from pathlib import Path

import click

from bench.options import out_dir_option, stack_options, workload_options
from harness.errors import UsageError


@click.command("compare", context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.option(
    "--schedulers",
    "schedulers_opt",
    default=None,
    help="Comma-separated schedulers (the first is the report's baseline), or 'all' (memory too, last). "
    "Default: every registered backend except memory, pg_queue first.",
)
@click.option(
    "--tuned-control",
    is_flag=True,
    help="Also run pg_queue with pg_leased's autovacuum settings (labelled 'pg_queue, tuned'), so the "
    "report separates what the design buys from what tuning buys.",
)
@click.option(
    "--state-writes",
    type=click.Choice(["skip-unchanged", "always"]),
    default="skip-unchanged",
    show_default=True,
    help="The poll-state write policy every design is held to, like for like: skip-unchanged (no write "
    "when the poll left the state as it was: the Composio article's next step, pg_leased's default) or "
    "always (every commit rewrites it, as the Composio article measured). A design with one policy of "
    "its own (pg_queue: always) keeps it, and the report says so beside its figures.",
)
@workload_options("workload", "rate", "duration", "warmup")
@stack_options
@out_dir_option("Where the runs' directories are written.")
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="The HTML report (default: <out>/compare-<timestamp>.html).",
)
@click.option(
    "--markdown",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also write the report as Markdown (default: beside the HTML, .md).",
)
@click.option(
    "--calibrate/--no-calibrate",
    default=True,
    show_default=True,
    help="After the backends, measure the harness's own ceiling on the workload (`bench calibrate`: the "
    "memory scheduler at 3x the rate, a window of at most 30 s), so the report can tell the "
    "backends' figures from the harness's.",
)
@click.pass_context
def compare(
    ctx: click.Context,
    schedulers_opt: str | None,
    tuned_control: bool,
    state_writes: str,
    workload_spec: str | None,
    rate: str | None,
    duration: str | None,
    warmup: str | None,
    dsn: str | None,
    temporal_address: str | None,
    out_dir: Path,
    output: Path | None,
    markdown: Path | None,
    calibrate: bool,
) -> None:
    """Run every backend (or --schedulers a,b) on one workload in sequence, then write the report.

    Any other option (such as --seed, --opt key=value or --temporal-metrics URL) is passed to each
    `bench run`. A run that fails is shown in the report with its output; the report still covers
    the others, and the command then exits with status 1.
    """
    from harness.compare import compare as run_compare
    from harness.compare import default_schedulers, failure_error, plan

    names = default_schedulers(schedulers_opt)
    if any(a == "--opt" and v.startswith("skip_unchanged_state=") for a, v in zip(ctx.args, ctx.args[1:])):
        raise UsageError("--opt skip_unchanged_state=... would differ between designs; use --state-writes")
    runs = plan(names, tuned_control, state_writes)
    run_args: list[str] = []
    for flag, value in (
        ("--workload", workload_spec),
        ("--rate", rate),
        ("--duration", duration),
        ("--warmup", warmup),
        ("--dsn", dsn),
        ("--temporal-address", temporal_address),
    ):
        if value is not None:
            run_args += [flag, value]
    run_args += list(ctx.args)
    check_children(runs, run_args, out_dir, [output, markdown], dsn, temporal_address)
    calibration = calibration_step(run_args, out_dir) if calibrate else None
    result = run_compare(
        runs,
        run_args,
        out_dir,
        output,
        markdown,
        echo=lambda line: click.echo(line, nl=False, err=True),
        calibration=calibration,
    )
    click.echo(f"report: {result.html}")
    click.echo(f"markdown: {result.markdown}")
    if result.interrupted:
        raise KeyboardInterrupt
    if result.failures:
        raise failure_error(result, len(runs))


def check_children(
    runs: list,
    run_args: list[str],
    out_dir: Path,
    files: list[Path | None],
    dsn: str | None,
    temporal_address: str | None,
    rate_args: list[str] | None = None,
) -> None:
    """Before the first child run starts: each child's ``bench run`` arguments (``runs``: scheduler
    names or :class:`harness.compare.PlannedRun`), the report files, the servers every child needs
    (reachable, started if embedded), their faults and leftovers."""
    from bench.run_cmd import check_run_args
    from harness import faults as faults_mod
    from harness.compare import PlannedRun
    from harness.inputs import check_writable_dir, parse_faults
    from harness.schemas import check_leftovers
    from harness.servers import resolve_servers, scheduler_class

    runs = [r if isinstance(r, PlannedRun) else PlannedRun(r) for r in runs]
    names = [r.scheduler for r in runs]
    parsed = [
        check_run_args(
            ["--scheduler", r.scheduler, "--out", str(out_dir), *(rate_args or []), *run_args, *r.extra_args]
        )
        for r in runs
    ]
    for f in files:
        if f is not None:
            if f.is_dir():
                raise UsageError(f"{f} is a directory; give a file name for the report")
            check_writable_dir("the report's directory", f.parent)
    note = lambda m: click.echo(f"note: {m}", err=True)  # noqa: E731
    dsn, address = resolve_servers([scheduler_class(n) for n in names], dsn, temporal_address, say=note)
    for p in parsed:
        faults_mod.check(parse_faults(p["faults"]), dsn=dsn, temporal_address=address, nodes=p["nodes"])
    if dsn:
        check_leftovers(dsn, any(p["allow_leftovers"] for p in parsed), say=note)


def calibration_step(run_args: list[str], out_dir: Path):
    """The harness calibration of the children's workload, as a callable the comparison runs after
    the backends (None, said, when the workload has no steady rate to calibrate for)."""
    from bench.calibrate_cmd import calibration_rate, child_params, run_calibration, short_window_s
    from harness.errors import UsageError

    params = child_params(run_args)
    try:
        rate = calibration_rate(params, out_dir)
    except UsageError as exc:
        click.echo(f"note: no harness calibration: {exc}", err=True)
        return None
    window_s = short_window_s(params.get("duration"))
    return lambda: run_calibration(params, rate, out_dir, 3.0, window_s, label="[harness ceiling] ")
