"""``bench scale``: how a design's cost grows with the number of armed timers."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from bench.options import out_dir_option, stack_options
from harness.scale import DEFAULT_WORKLOAD, LONG_HORIZON_STATE_BYTES, MOVE_SHARE, PROJECT_POPULATION

# bench run options that change how many timers a rate needs: the step's workload file sets them
SHAPING_OPTIONS = ("--interval", "--rate", "--triggers", "--trace", "--workload")


@click.command("scale", context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.option("--scheduler", required=True, help="A registered scheduler, or 'all' (every backend, memory last).")
@click.option(
    "--population",
    "population",
    default="12k,100k,1m,10m",
    show_default=True,
    help="Armed timers per step, comma-separated (k, m, b suffixes).",
)
@click.option("--rate", "rate", default=None, help="The fire rate every step holds (default 556/s).")
@click.option(
    "--rates",
    "rates",
    default=None,
    help="Several rates at one --population: the rate axis from the same command, e.g. 556/s,2000/s.",
)
@click.option(
    "--long-horizon-share",
    "share",
    default="auto",
    show_default=True,
    help="Share of long-horizon timers (first fire 30-60 days out); auto: what fills each step at its rate.",
)
@click.option(
    "--project-population",
    "project",
    default=f"{PROJECT_POPULATION // 1_000_000}m",
    show_default=True,
    help="The population the fits predict for.",
)
@click.option("--duration", default="60s", show_default=True, help="Measured window of each step.")
@click.option(
    "--warmup",
    default=None,
    help="Warm-up of each step, before the expected arming time is added (default: one maximum interval).",
)
@click.option(
    "--workload",
    default=DEFAULT_WORKLOAD,
    show_default=True,
    help="Workload preset or YAML file the steps start from (its intervals set how many timers the rate needs).",
)
@click.option(
    "--long-horizon-state-size",
    "lh_state",
    default=LONG_HORIZON_STATE_BYTES,
    show_default=True,
    type=click.IntRange(0, 1 << 20),
    help="Poll state of a long-horizon timer, bytes (a callback's payload).",
)
@click.option(
    "--move-share",
    "move_share",
    default=MOVE_SHARE,
    show_default=True,
    type=click.FloatRange(0.0, 1.0),
    help="Share of the long-horizon timers moved while armed during the window.",
)
@click.option(
    "--arm-limit",
    "arm_limit",
    default="30m",
    show_default=True,
    help="Skip a step expected to take longer than this to arm (at the previous step's arming rate).",
)
@out_dir_option("Parent of the scale directory scale-<timestamp>-<scheduler>/.")
@stack_options
@click.pass_context
def scale(
    ctx: click.Context,
    scheduler: str,
    population: str,
    rate: str | None,
    rates: str | None,
    share: str,
    project: str,
    duration: str,
    warmup: str | None,
    workload: str,
    lh_state: int,
    move_share: float,
    arm_limit: str,
    out_dir: Path,
    dsn: str | None,
    temporal_address: str | None,
) -> None:
    """Step the armed population up at a fixed fire rate and show how each cost grows with it.

    Each step is its own `bench run` with its own warm-up: the periodic timers the rate needs and
    long-horizon ones beyond them, a share of which is moved while armed. Writes
    runs/scale-<timestamp>-<scheduler>/: one run directory per step, scale.json (rewritten after
    every step), report.html and report.md. Any other option (such as --seed or --opt key=value)
    is passed to every `bench run`.
    """
    from bench.compare_cmd import check_children
    from harness.compare import default_schedulers
    from harness.errors import UsageError
    from harness.inputs import check_writable_dir, parse_duration_option, parse_rate_option
    from harness.scale import DEFAULT_RATE, ScalePlan, check_steps, run_scale, step_args, step_workload
    from harness.scale_rule import parse_population
    from harness.servers import scheduler_class

    names = default_schedulers(scheduler) if scheduler.strip() == "all" else [scheduler_class(scheduler).name]
    try:
        populations = parse_population(population)
        (project_n,) = parse_population(project, "--project-population")
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if rates is not None and rate is not None:
        raise UsageError("give --rate (the population axis) or --rates (the rate axis), not both")
    if rates is not None:
        rate_list = [parse_rate_option("--rates", r.strip()) for r in rates.split(",") if r.strip()]
        if not rate_list:
            raise UsageError(f"--rates {rates!r}: give rates such as 556/s,2000/s")
        if len(rate_list) > 1 and len(populations) != 1:
            raise UsageError("--rates steps the rate at one population: give a single --population, e.g. 1m")
    else:
        rate_list = [parse_rate_option("--rate", rate) if rate is not None else DEFAULT_RATE]
    if share.strip() == "auto":
        share_v = None
    else:
        try:
            share_v = float(share)
        except ValueError:
            share_v = -1.0
        if not 0.0 <= share_v < 1.0:
            raise UsageError(f"--long-horizon-share {share!r}: give auto or a share in [0, 1), e.g. 0.9")
        if rate is not None or rates is not None:
            raise UsageError("with a numeric --long-horizon-share the rate follows from the population; drop --rate")
    shaping = [a for a in ctx.args if a.split("=")[0] in SHAPING_OPTIONS]
    if shaping:
        raise UsageError(
            f"bench scale sets each step's population from --population and --rate: {shaping[0].split('=')[0]} "
            "would change it behind the fit; put intervals or a trace in a --workload file"
        )
    parse_duration_option("--duration", duration)
    warmup_s = parse_duration_option("--warmup", warmup) if warmup is not None else None
    arm_limit_s = parse_duration_option("--arm-limit", arm_limit)
    plan = ScalePlan(
        schedulers=names,
        populations=populations,
        rates=rate_list,
        share=share_v,
        duration=duration,
        warmup_s=warmup_s,
        workload=workload,
        long_horizon_state_bytes=lh_state,
        move_share=move_share,
        project_population=project_n,
        arm_limit_s=arm_limit_s,
        extra_args=list(ctx.args),
        out_dir=out_dir,
        dsn=dsn,
        temporal_address=temporal_address,
        command=sys.argv[sys.argv.index("scale") :] if "scale" in sys.argv else ["scale"],
    )
    try:
        check_steps(plan)
    except ValueError as exc:
        raise UsageError(str(exc).splitlines()[0]) from None
    check_writable_dir("--out", out_dir)
    # the first step's arguments, checked as bench run checks them (its workload file is written
    # once the scale directory exists; here a temporary copy stands for it)
    import tempfile

    import yaml

    with tempfile.TemporaryDirectory() as tmp:
        first = Path(tmp) / "workload.yaml"
        first.write_text(yaml.safe_dump(step_workload(plan, plan.populations[0], rate_list[0]), sort_keys=False))
        check_children(names, step_args(plan, first, warmup_s or 0.0), out_dir, [], dsn, temporal_address)
    result = run_scale(plan, echo=lambda line: click.echo(line, nl=False, err=True))
    for name, d in result.data["designs"].items():
        done = [s for s in d["steps"] if s.get("status") in ("ok", "finding")]
        click.echo(
            f"scale of {name}: {len(done)} of {len(d['steps'])} steps measured"
            + (f"; limit at {d['limit']['at']}: {d['limit']['why']}" if d.get("limit") else "")
        )
    click.echo(f"scale: {result.path}")
    if result.html is not None:
        click.echo(f"report: {result.html}")
    if result.interrupted:
        raise KeyboardInterrupt
