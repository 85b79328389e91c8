"""``bench sweep``: step each backend up a list of rates until it cannot hold one."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from bench.options import stack_options
from harness.sweep import DEFAULT_DURATION, DEFAULT_WARMUP, DEFAULT_WORKLOAD, DEFAULT_WORKLOAD_ARGS
from harness.sweep_rule import DEFAULT_RATES, DEFAULT_SLO, MAX_LAG


@click.command("sweep", context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.option(
    "--scheduler",
    "scheduler_opt",
    default="all",
    show_default=True,
    help="A registered scheduler, a comma-separated list, or 'all' (every backend, memory last).",
)
@click.option(
    "--rates", default=DEFAULT_RATES, show_default=True, help="Target fire rates to step through, per second."
)
@click.option(
    "--slo-p99",
    "slo_spec",
    default=None,
    help="A rate is held only with p99 lag at most this: a duration for every backend, then optional "
    f"NAME=duration or NAME={MAX_LAG} (the backend's declared max lag) overrides "
    f"(default: {DEFAULT_SLO}, one bound for every backend, 10s unless the workload sets --on-time).",
)
@click.option("--duration", default=DEFAULT_DURATION, show_default=True, help="Measured window of each run.")
@click.option(
    "--warmup",
    default=DEFAULT_WARMUP,
    help="Warm-up of each run (default: one maximum interval of the workload, so every trigger re-arms "
    "before the window; longer for a backend with a long max lag).",
)
@click.option(
    "--workload",
    default=None,
    help=f"Workload preset or YAML file (default: the {DEFAULT_WORKLOAD} preset, 10s..20s intervals, "
    f"with {' '.join(DEFAULT_WORKLOAD_ARGS)}).",
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("runs"),
    show_default=True,
    help="Parent of the sweep directory sweep-<timestamp>/.",
)
@click.option(
    "--retries",
    default=1,
    show_default=True,
    type=click.IntRange(0, 5),
    help="Runs of a rate not held before the backend stops there (a shared machine has bad seconds); "
    "a rate is held if any of its runs held, and every run is kept in sweep.json.",
)
@click.option("--no-pgbench", is_flag=True, help="Skip the database ceiling (pgbench).")
@click.option("--pgbench-duration", default="10s", show_default=True, help="pgbench -T per batch size.")
@stack_options
@click.pass_context
def sweep(
    ctx: click.Context,
    scheduler_opt: str,
    rates: str,
    slo_spec: str | None,
    duration: str,
    warmup: str,
    workload: str | None,
    out_dir: Path,
    retries: int,
    no_pgbench: bool,
    pgbench_duration: str,
    dsn: str | None,
    temporal_address: str | None,
) -> None:
    """Step each backend up --rates until it cannot hold one; record its maximum sustainable rate.

    Writes runs/sweep-<timestamp>/: one run directory per (backend, rate), sweep.json, report.html
    and report.md. Any other option (such as --seed or --opt key=value) is passed to every
    `bench run`.
    """
    from bench.compare_cmd import check_children
    from harness.compare import default_schedulers
    from harness.errors import UsageError
    from harness.inputs import check_writable_dir, parse_duration_option
    from harness.sweep import SweepPlan, run_args, run_sweep
    from harness.sweep_rule import parse_rates, parse_slo

    try:
        rate_list = parse_rates(rates)
        slo_source = "--slo-p99"
        if slo_spec is None:
            from harness.sweep import default_slo_spec

            slo_spec = default_slo_spec(workload, ctx.args)
            slo_source = "the workload's on-time bound, one for every backend"
        slo_ms, slo_overrides = parse_slo(slo_spec)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    pgbench_s = parse_duration_option("--pgbench-duration", pgbench_duration)
    parse_duration_option("--duration", duration)
    if warmup is not None:
        warmup_s = parse_duration_option("--warmup", warmup)
    else:  # the workload's own default: one maximum interval (an --interval passed through counts)
        from harness.sweep import default_warmup_s

        warmup_s = default_warmup_s(workload, ctx.args)
    names = default_schedulers("all" if scheduler_opt.strip() == "all" else scheduler_opt)
    plan = SweepPlan(
        names=names,
        rates=rate_list,
        slo_spec=slo_spec,
        slo_source=slo_source,
        slo_ms=slo_ms,
        slo_overrides=slo_overrides,
        duration=duration,
        warmup=warmup,
        warmup_s=warmup_s,
        workload=workload,
        extra_args=list(ctx.args),
        out_dir=out_dir,
        retries=retries,
        pgbench=not no_pgbench,
        pgbench_s=pgbench_s,
        dsn=dsn,
        temporal_address=temporal_address,
        command=sys.argv[sys.argv.index("sweep") :] if "sweep" in sys.argv else ["sweep"],
    )
    # every child run's arguments at the highest rate (the largest population), before the first
    check_writable_dir("--out", out_dir)
    check_children(
        names,
        run_args(plan),
        out_dir,
        [],
        dsn,
        temporal_address,
        rate_args=["--rate", f"{max(rate_list):g}/s", "--warmup", warmup],
    )
    result = run_sweep(plan, echo=lambda line: click.echo(line, nl=False, err=True))
    _print_table(result.data)
    click.echo(f"sweep: {result.path}")
    if result.html is not None:
        click.echo(f"report: {result.html}")
    if result.interrupted:
        raise KeyboardInterrupt


def _print_table(data: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    from reports import fmt

    console = Console(highlight=False, soft_wrap=True)
    if not console.is_terminal:
        console.width = 160  # piped output (a log file): do not wrap the reasons at 80 columns
    ceiling = (data.get("pgbench") or {}).get("rows_per_s")
    t = Table(title=f"sweep: p99 SLO {data['slo_spec']}; workload {data['workload']['note']}")
    for col in (
        "backend",
        "rate/s",
        "offered/s",
        "achieved/s",
        "p99 lag",
        "late / pending / lost",
        "writes/fire",
        "held",
    ):
        t.add_column(col, justify="left" if col in ("backend", "held") else "right")
    for name, b in data["backends"].items():
        for key, e in b["rates"].items():
            t.add_row(
                name,
                key,
                fmt.fixed(e.get("offered")),
                fmt.fixed(e["achieved"]),
                fmt.fixed(e["p99_ms"], "{:,.1f} ms"),
                " / ".join(fmt.fixed(e.get(k), "{:,}") for k in ("late", "pending", "lost")),
                fmt.fixed(e["writes_per_fire"], "{:.2f}"),
                "yes" if e["held"] else f"no: {e['reason']}",
            )
    console.print(t)
    m = Table(
        title="maximum sustainable rate" + (f" vs the pgbench ceiling ({ceiling:,.0f} rows/s)" if ceiling else "")
    )
    for col in ("backend", "max rate/s", "of ceiling", "p99 SLO", "declared bound", "stopped"):
        m.add_column(col, justify="left" if col in ("backend", "stopped") else "right")
    for name, b in data["backends"].items():
        m.add_row(
            name,
            fmt.fixed(b["max_sustainable_rate"], none="below the lowest rate"),
            fmt.pct(b.get("fraction_of_ceiling")),
            fmt.fixed(b.get("slo_p99_ms"), "{:,.0f} ms"),
            fmt.fixed(b.get("declared_max_lag_s"), "{:g} s"),
            str(b.get("stop_reason") or fmt.MISSING),
        )
    console.print(m)
    pg = data.get("pgbench") or {}
    if pg.get("skipped"):
        console.print(f"pgbench ceiling: skipped ({pg['skipped']})")
