"""``bench run``: one workload against one scheduler; writes ``runs/<timestamp>-<scheduler>/``."""

from __future__ import annotations

import asyncio
import dataclasses
import sys

import click

from bench.options import neighbour_options, overrides, stack_options, workload_options
from harness.errors import UsageError


@click.command("run")
@click.option("--scheduler", "scheduler_name", required=True, help="A registered scheduler (see `bench schedulers`).")
@workload_options(
    "workload",
    "rate",
    "triggers",
    "interval",
    "tenants",
    "tenant_skew",
    "state_size",
    "duration",
    "warmup",
    "seed",
    "trace",
    "cadence",
    "on_time",
    "drain_limit",
)
@click.option("--opt", "opts", multiple=True, help="Scheduler option key=value (repeatable).")
@click.option("--keep", is_flag=True, help="Keep the run's schema instead of dropping it (`bench env gc` leaves it).")
@click.option("--out", default="runs", show_default=True, help="Parent directory of run directories.")
@click.option(
    "--fault",
    "faults",
    multiple=True,
    help="Inject a fault (repeatable): kill-worker@30s, pause-worker@30s:20s, restart-postgres@60s, "
    "restart-temporal@60s, hold-snapshot@10s:120s, slow-provider@30s:60s:5s (see harness/faults.py).",
)
@click.option(
    "--nodes",
    type=int,
    default=None,
    help="Run the claim loops in N `bench serve` processes on one store (see harness/workers.py).",
)
@click.option(
    "--arm-load",
    default=None,
    help="Arm this many extra timers/s through PUT /timers with locust beside the run, e.g. 200/s "
    "(implies --nodes 1 at least).",
)
@click.option(
    "--allow-leftovers",
    is_flag=True,
    help="Start even though schemas left by interrupted runs hold more than 1 GiB on the server "
    "(see `bench env status`).",
)
@click.option("--label", default=None, help="The run's name in reports (default: the scheduler's name).")
@click.option(
    "--sample-every",
    "sample_every",
    default=None,
    help="Sampling period, e.g. 1s (the default); 0 samples only at the measured window's edges.",
)
@click.option(
    "--checkpoint",
    "checkpoint",
    type=click.Choice(["window", "warmup", "off"]),
    default="window",
    show_default=True,
    help="When the run forces a CHECKPOINT: a few seconds before the measured window (every design then "
    "pays the full-page image of each page it touches in the window), at the start of the warm-up "
    "(at high rates the forced flush of a large dirty cache stalls the server; the warm-up absorbs "
    "it), or never.",
)
@click.option(
    "--calibrates",
    "calibrates",
    type=float,
    default=None,
    hidden=True,
    help="Mark this memory run as the harness calibration for runs at this rate (set by `bench calibrate`).",
)
@click.option(
    "--temporal-metrics",
    envvar="TIMERBENCH_TEMPORAL_METRICS",
    default=None,
    help="Prometheus endpoint of the Temporal server, e.g. http://host:9090/metrics "
    "(default: the embedded dev server's).",
)
@click.option(
    "--soak",
    "soak",
    is_flag=True,
    help="A soak (what `bench soak` runs): per-bin trends with a steady/growing verdict each, and with "
    "--readers, the readers over the middle third of the window and the recovery after.",
)
@click.option(
    "--soak-bin", "soak_bin", default=None, help="With --soak: the trends' bin (default 1m, shorter under 20m)."
)
@neighbour_options
@stack_options
def run(
    scheduler_name,
    workload_spec,
    opts,
    keep,
    out,
    dsn,
    temporal_address,
    faults=(),
    nodes=None,
    arm_load=None,
    allow_leftovers=False,
    label=None,
    sample_every=None,
    temporal_metrics=None,
    checkpoint="window",
    calibrates=None,
    neighbour=None,
    neighbour_rate=None,
    neighbour_script=None,
    readers=None,
    soak=False,
    soak_bin=None,
    **workload,
) -> None:
    """Run one workload against one scheduler; write runs/<timestamp>-<scheduler>/."""
    from harness import faults as faults_mod
    from harness.inputs import check_run, parse_sample_every, parse_url_option
    from harness.schemas import check_leftovers
    from harness.servers import resolve_servers
    from harness.session import RunSession

    # every input first (nothing is created or touched before they are all good), then the servers
    plan = check_run(
        scheduler_name,
        workload_spec,
        overrides(workload),
        opts,
        out,
        faults,
        nodes,
        arm_load,
        neighbour=neighbour,
        neighbour_rate=neighbour_rate,
        neighbour_script=neighbour_script,
        readers=readers,
    )
    if calibrates is not None and (plan.cls.name != "memory" or calibrates <= 0):
        raise UsageError(
            "--calibrates marks a memory run as the harness calibration for a positive rate; "
            "use `bench calibrate` to make one"
        )
    sample_every_s = parse_sample_every(sample_every)
    soak_bin_s = soak_bin_option(soak, soak_bin, plan.workload.duration_s)
    if temporal_metrics is not None:
        temporal_metrics = parse_url_option("--temporal-metrics", temporal_metrics)
    note = lambda m: click.echo(f"note: {m}", err=True)  # noqa: E731
    dsn, address = resolve_servers([plan.cls], dsn, temporal_address, say=note)
    neighbour_dsn = None
    if plan.neighbour or plan.readers:  # on the scheduler's Postgres, or the embedded one beside Temporal
        neighbour_dsn = dsn or resolve_servers([], None, None, say=note, need_postgres=True)[0]
    faults_mod.check(plan.fault_specs, dsn=dsn, temporal_address=address, nodes=plan.nodes)
    if dsn:
        check_leftovers(dsn, allow_leftovers, say=note)
    session = RunSession(
        dataclasses.replace(
            plan,
            dsn=dsn,
            temporal_address=address,
            keep=keep,
            argv=list(sys.argv),
            label=label,
            sample_every_s=sample_every_s,
            temporal_metrics=temporal_metrics,
            checkpoint=checkpoint,
            calibrates=calibrates,
            neighbour_dsn=neighbour_dsn,
            soak_bin_s=soak_bin_s,
        )
    )
    code = asyncio.run(session.main())
    if code:
        sys.exit(code)


def check_run_args(args: list[str]) -> dict:
    """Check a child ``bench run``'s arguments as ``bench run`` would, without running it or
    touching a server (``bench compare`` and ``bench sweep``, before their first child); returns
    its parsed options."""
    from harness.inputs import check_run

    with run.make_context("run", list(args)) as ctx:
        p = dict(ctx.params)
    check_run(
        p["scheduler_name"],
        p["workload_spec"],
        overrides(p),
        p["opts"],
        p["out"],
        p["faults"],
        p["nodes"],
        p["arm_load"],
        neighbour=p["neighbour"],
        neighbour_rate=p["neighbour_rate"],
        neighbour_script=p["neighbour_script"],
        readers=p["readers"],
    )
    soak_bin_option(p["soak"], p["soak_bin"], 60.0)
    return p


def soak_bin_option(soak: bool, text: str | None, duration_s: float) -> float | None:
    """``--soak-bin``, checked: None without ``--soak``."""
    from harness.inputs import parse_duration_option
    from harness.soak import default_bin_s

    if not soak:
        if text is not None:
            raise UsageError("--soak-bin needs --soak (or `bench soak`)")
        return None
    if text is None:
        return default_bin_s(duration_s)
    bin_s = parse_duration_option("--soak-bin", text)
    if bin_s < 1.0:
        raise UsageError(f"bad --soak-bin {text!r}; give at least 1s")
    return bin_s
