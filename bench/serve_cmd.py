"""``bench serve``: one long-running scheduler node (claim loop, polling processor, HTTP API);
the node itself is :mod:`harness.node`."""

from __future__ import annotations

import asyncio
import os
import re
import sys

import click

from bench.options import stack_options


@click.command("serve")
@click.option("--scheduler", "scheduler_name", required=True, help="A registered scheduler (see `bench schedulers`).")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind (loopback unless told).")
@click.option("--port", default=8080, show_default=True, type=int, help="TCP port; 0 picks a free one.")
@click.option(
    "--token",
    envvar="TIMERBENCH_TOKEN",
    default=None,
    help="Require 'Authorization: Bearer <token>' on /timers, /metrics, /progress (env TIMERBENCH_TOKEN).",
)
@click.option("--schema", default="timerbench", show_default=True, help="Postgres schema of the store.")
@click.option(
    "--workload",
    "workload_spec",
    default="smoke",
    show_default=True,
    help="Preset or YAML file: the population the polling processor knows.",
)
@click.option("--opt", "opts", multiple=True, help="Scheduler option key=value (repeatable).")
@click.option("--worker-id", default=None, help="Owner id of this node's claims (default: serve-<host>-<pid>).")
@click.option("--record", "record_dir", default=None, help="Directory for this node's fire log and state.")
@click.option(
    "--allow-unauthenticated",
    is_flag=True,
    help="Serve a non-loopback --host without a token (anyone who can reach it can arm timers).",
)
@stack_options
def serve(
    scheduler_name,
    host,
    port,
    token,
    schema,
    workload_spec,
    opts,
    worker_id,
    record_dir,
    allow_unauthenticated,
    dsn,
    temporal_address,
) -> None:
    """Run one scheduler node with an HTTP API (PUT /timers, /health/live, /health/ready, /metrics).

    A --host other than loopback needs --token (or TIMERBENCH_TOKEN), or --allow-unauthenticated."""
    from harness.errors import UsageError
    from harness.inputs import check_schema_name, check_serve_exposure, check_writable_dir, load_workload
    from harness.node import serve_node
    from harness.servers import resolve_servers, scheduler_class, scheduler_options

    cls = scheduler_class(scheduler_name)
    check_serve_exposure(host, token or None, allow_unauthenticated)
    if not (0 <= port < 65536):
        raise UsageError(f"bad --port {port}; use 0..65535 (0 picks a free port)")
    check_schema_name(schema)
    if worker_id is not None and not re.fullmatch(r"[\w.-]{1,100}", worker_id):
        raise UsageError(
            f"bad --worker-id {worker_id[:40]!r}; use letters, digits, '.', '_' and '-' "
            f"(or leave it out for serve-<host>-<pid>)"
        )
    w = load_workload(workload_spec, {})
    options = scheduler_options(cls, opts)
    record = check_writable_dir("--record", record_dir) if record_dir else None
    dsn, address = resolve_servers([cls], dsn, temporal_address, say=lambda m: click.echo(f"note: {m}", err=True))
    worker_id = worker_id or f"serve-{os.uname().nodename}-{os.getpid()}"
    if record is not None:
        record.mkdir(parents=True, exist_ok=True)
    code = asyncio.run(serve_node(cls, options, w, dsn, address, schema, host, port, token or None, worker_id, record))
    if code:
        sys.exit(code)
