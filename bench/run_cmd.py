"""``bench run``: one workload against one scheduler; writes ``runs/<timestamp>-<scheduler>/``."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import click

from bench.options import overrides, stack_options, workload_options


@click.command("run")
@click.option("--scheduler", "scheduler_name", required=True, help="A registered scheduler (see `bench schedulers`).")
@workload_options("workload", "rate", "triggers", "interval", "tenants", "tenant_skew", "state_size", "duration",
                  "warmup", "seed", "trace")
@click.option("--opt", "opts", multiple=True, help="Scheduler option key=value (repeatable).")
@click.option("--keep", is_flag=True, help="Keep the run's schema instead of dropping it.")
@click.option("--out", default="runs", show_default=True, help="Parent directory of run directories.")
@click.option("--fault", "faults", multiple=True,
              help="Inject a fault (repeatable): kill-worker@30s, pause-worker@30s:20s, restart-postgres@60s, "
                   "restart-temporal@60s, hold-snapshot@10s:120s, slow-provider@30s:60s:5s (see harness/faults.py).")
@click.option("--nodes", type=int, default=None,
              help="Run the claim loops in N `bench serve` processes on one store (see harness/workers.py).")
@click.option("--arm-load", default=None,
              help="Arm this many extra timers/s through PUT /timers with locust beside the run, e.g. 200/s "
                   "(implies --nodes 1 at least).")
@stack_options
def run(scheduler_name, workload_spec, opts, keep, out, dsn, temporal_address, faults=(), nodes=None,
        arm_load=None, **workload) -> None:
    """Run one workload against one scheduler; write runs/<timestamp>-<scheduler>/."""
    from harness import faults as faults_mod
    from harness.inputs import check_nodes, load_workload, parse_faults, parse_rate_option
    from harness.servers import resolve_servers, scheduler_class, scheduler_options
    from harness.session import RunSession

    cls = scheduler_class(scheduler_name)
    w = load_workload(workload_spec, overrides(workload))
    options = scheduler_options(cls, opts)
    arm_load_per_s = None
    if arm_load is not None:
        arm_load_per_s = parse_rate_option("--arm-load", arm_load)
        nodes = max(1, nodes or 1)  # locust needs a node's HTTP API to arm through
    check_nodes(cls, nodes)
    fault_specs = parse_faults(faults)
    dsn, address = resolve_servers([cls], dsn, temporal_address, say=lambda m: click.echo(f"note: {m}", err=True))
    faults_mod.check(fault_specs, dsn=dsn, temporal_address=address, nodes=nodes)
    session = RunSession(cls, options, w, dsn, address, Path(out), keep, list(sys.argv), nodes=nodes,
                         arm_load_per_s=arm_load_per_s, fault_specs=fault_specs)
    code = asyncio.run(session.main())
    if code:
        sys.exit(code)
