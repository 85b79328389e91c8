"""Option groups shared by several commands, declared once: the servers and the workload."""

from __future__ import annotations

from pathlib import Path

import click


def out_dir_option(help: str):
    """``--out DIR`` (``out_dir``, default ``runs``): where a command writes its directories."""
    return click.option(
        "--out",
        "out_dir",
        type=click.Path(file_okay=False, path_type=Path),
        default=Path("runs"),
        show_default=True,
        help=help,
    )


def stack_options(f):
    """``--dsn`` and ``--temporal-address``: use existing servers instead of the embedded ones."""
    f = click.option(
        "--temporal-address",
        envvar="TIMERBENCH_TEMPORAL",
        default=None,
        help="host:port of a Temporal frontend (default: the embedded dev server).",
    )(f)
    f = click.option(
        "--dsn",
        envvar="TIMERBENCH_DSN",
        default=None,
        help="Postgres connection string (default: the embedded server).",
    )(f)
    return f


def neighbour_options(f):
    """``--neighbour``, ``--neighbour-rate``, ``--neighbour-script`` and ``--readers``: what the
    scheduler does to the rest of its database (harness/neighbour.py)."""
    f = click.option(
        "--readers",
        default=None,
        help="N overlapping long readers, e.g. 3x120s: each holds a REPEATABLE READ snapshot that read the "
        "neighbour's tables for 120 s, staggered so one is always open, until the window ends.",
    )(f)
    f = click.option(
        "--neighbour-script",
        default=None,
        help="A pgbench script run as the neighbour instead of the built-in TPC-B-like transaction.",
    )(f)
    f = click.option(
        "--neighbour-rate",
        type=float,
        default=None,
        help="The neighbour's open-loop rate, transactions/s (pgbench -R; default 200).",
    )(f)
    f = click.option(
        "--neighbour",
        default=None,
        help="A neighbour workload on the same server and database, in its own tables: oltp (pgbench's "
        "TPC-B-like transaction), measured alone first (the baseline), then beside the scheduler.",
    )(f)
    return f


def owntable_options(f):
    """``--dsn``, ``--table``, ``--preset``, ``--where`` and the read-only safeguards of ``bench inspect``
    and ``bench capture``."""
    f = click.option(
        "--lock-timeout",
        default="1s",
        show_default=True,
        help="lock_timeout of every statement: the longest wait for a lock.",
    )(f)
    f = click.option(
        "--statement-timeout",
        default="5s",
        show_default=True,
        help="statement_timeout of every statement (one statement per transaction, so also the "
        "longest any lock is held).",
    )(f)
    f = click.option(
        "--where",
        default=None,
        help="The pending rows: COLUMN=VALUE, COLUMN in (A,B), COLUMN is [not] null, joined by 'and' "
        "(COLUMN may be a JSON path, args.kind=poll); default: the preset's, or every row.",
    )(f)
    f = click.option(
        "--preset",
        default=None,
        help="A job library's table: procrastinate, pgqueuer, dbos, pg-boss, graphile-worker, river, oban, "
        "solid-queue, good_job (its table, due column, pending rows; --table, --map and --where override).",
    )(f)
    f = click.option(
        "--table", default=None, help="SCHEMA.TABLE, as SQL would name it (quote mixed case); default: the preset's."
    )(f)
    f = click.option(
        "--dsn",
        envvar="TIMERBENCH_DSN",
        default=None,
        help="Postgres connection string of the table's database (default: the embedded server).",
    )(f)
    return f


_WORKLOAD = {
    "workload": ("--workload", "A preset name or a YAML file."),
    "rate": ("--rate", "Steady-state fire rate: 556/s, 33360/min or 556. The population follows it."),
    "triggers": ("--triggers", "Population size (the rate follows it)."),
    "interval": ("--interval", "Poll interval range, e.g. 60s..120s."),
    "tenants": ("--tenants", "Number of tenants."),
    "tenant_skew": ("--tenant-skew", "Zipf exponent of triggers per tenant (0 = uniform)."),
    "state_size": ("--state-size", "Poll state per trigger, bytes."),
    "duration": ("--duration", "Measured window, e.g. 10m."),
    "warmup": ("--warmup", "Warm-up before the measured window, e.g. 60s."),
    "seed": ("--seed", "Random seed of the population and the provider."),
    "trace": ("--trace", "CSV to replay: trigger_id,tenant_id,interval_s,first_fire_s."),
    "cadence": (
        "--cadence",
        "fixed (next due = previous due + interval: open loop, the default) or after-poll "
        "(next due = poll end + interval: closed loop, as the articles' systems re-armed).",
    ),
    "on_time": (
        "--on-time",
        "A delivered fire with lag up to this is on time, later is late; one bound for every "
        "backend (default 10s, the Composio article's polling MaxLag).",
    ),
    "drain_limit": (
        "--drain-limit",
        "After the window, wait at most this long for every fire due in it (default 3m); "
        "what is still undelivered then is pending (still held) or lost.",
    ),
}


def workload_options(*names: str, workload_default: str | None = None):
    """The workload options ``names`` (keys of ``_WORKLOAD``), each passed as a keyword of the
    same name (``workload`` as ``workload_spec``)."""

    def decorate(f):
        for name in reversed(names):
            flag, text = _WORKLOAD[name]
            dest = "workload_spec" if name == "workload" else name
            default = workload_default if name == "workload" else None
            if name == "workload" and default is None:  # resolved later (production), so said here
                text = text.rstrip(".") + " (default: production)."
            f = click.option(flag, dest, default=default, show_default=default is not None, help=text)(f)
        return f

    return decorate


def overrides(values: dict) -> dict:
    """The workload overrides among a command's keyword arguments."""
    from harness.inputs import WORKLOAD_OVERRIDES

    return {k: values.get(k) for k in WORKLOAD_OVERRIDES}


def workload_args(params: dict, skip: tuple[str, ...] = ()) -> list[str]:
    """The workload options among parsed ``params`` as command-line arguments again (for a child
    run that must see the same workload), leaving out ``skip``."""
    out: list[str] = []
    for name, (flag, _) in _WORKLOAD.items():
        value = params.get("workload_spec" if name == "workload" else name)
        if value is not None and name not in skip:
            out += [flag, str(value)]
    return out
