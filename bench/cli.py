"""The ``bench`` command line.

Subcommands live in their own modules and are loaded on first use (``LAZY_COMMANDS``), so
``bench --help`` stays fast and a missing optional piece never breaks the others.
Every failure a person can act on is a :class:`BenchError`: one line, exit 2 for bad usage,
no traceback unless ``--debug``.
"""

from __future__ import annotations

import importlib
import os
import sys

import click

from bench.errors import BenchError, UsageError

# name -> "module:attribute" of a click command
LAZY_COMMANDS: dict[str, str] = {
    "migrate": "bench.migrate_cmd:migrate",
    "env": "bench.cli:env",
    "schedulers": "bench.cli:schedulers_cmd",
    "run": "bench.run_cmd:run",
    "report": "bench.report_cmd:report",
    "compare": "bench.report_cmd:compare",
    "sweep": "bench.sweep_cmd:sweep",
    "serve": "bench.serve_cmd:serve",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(LAZY_COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        target = LAZY_COMMANDS.get(name)
        if target is None:
            return None
        module, _, attr = target.partition(":")
        return getattr(importlib.import_module(module), attr)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
@click.version_option(package_name="timerbench")
def cli(debug: bool) -> None:
    """timerbench: decide from measurements where your timers should live."""
    if debug:
        os.environ["TIMERBENCH_DEBUG"] = "1"


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


def resolve_servers(classes, dsn: str | None, temporal_address: str | None) -> tuple[str | None, str | None]:
    """The DSN and Temporal address the given scheduler classes need: the ones the user gave
    (a wrong one is a usage error, exit 2) or the embedded servers, started on demand."""
    from bench import stack

    need_pg = any(getattr(c, "needs_postgres", False) for c in classes) or dsn is not None
    need_temporal = any(getattr(c, "needs_temporal", False) for c in classes)
    if not (need_pg or need_temporal):
        return None, None
    try:
        s = stack.resolve(dsn, temporal_address, need_temporal, say=lambda m: click.echo(f"note: {m}", err=True))
    except BenchError as exc:
        if dsn is not None or temporal_address is not None:
            raise UsageError(str(exc)) from None  # the address the user gave is wrong
        raise
    return (s.dsn if need_pg else None), (s.temporal_address if need_temporal else None)


def scheduler_options(cls, pairs) -> dict:
    """A scheduler's defaults with ``--opt key=value`` pairs applied; bad pairs exit 2."""
    from schedulers.base import OptionSpec

    try:
        return {**cls.default_options, **OptionSpec(dict(cls.default_options)).parse(pairs)}
    except ValueError as exc:
        raise UsageError(str(exc)) from None


@cli.group()
def env() -> None:
    """The embedded stack: a private Postgres and a Temporal dev server on loopback."""


@env.command("up")
@click.option("--no-temporal", is_flag=True, help="Start only Postgres.")
def env_up(no_temporal: bool) -> None:
    """Start the embedded Postgres and Temporal (harmless if already up)."""
    from bench import stack

    s = stack.up(with_temporal=not no_temporal, say=lambda m: click.echo(f"note: {m}"))
    click.echo(f"postgres  {stack.redact_dsn(s.dsn)}")
    if s.temporal_address:
        click.echo(f"temporal  {s.temporal_address}")


@env.command("down")
def env_down() -> None:
    """Stop the embedded servers; leaves no process behind."""
    from bench import stack

    stack.down()
    click.echo("stopped")


@env.command("status")
def env_status() -> None:
    """Print the DSN (no password) and the Temporal address, and whether each is running."""
    from bench import stack

    pg = stack.postgres()
    tp = stack.temporal()
    click.echo(f"postgres  {pg.dsn()}  {'running' if pg.running() else 'stopped'}  (data: {pg.data})")
    click.echo(f"temporal  {tp.address()}  {'running' if tp.running() else 'stopped'}  (db: {tp.db})")


@click.command("schedulers")
def schedulers_cmd() -> None:
    """List the registered schedulers."""
    from schedulers.base import REGISTRY, scheduler_class

    for name in REGISTRY:
        cls = scheduler_class(name)
        click.echo(f"{name:<16} {cls.description}")


def main(argv: list[str] | None = None) -> None:
    debug = "--debug" in (argv if argv is not None else sys.argv[1:]) or os.environ.get("TIMERBENCH_DEBUG")
    try:
        cli.main(args=argv, prog_name="bench", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("interrupted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        msg = exc.format_message()
        click.echo(f"error: {msg}", err=True)
        sys.exit(exc.exit_code)
    except BenchError as exc:
        if debug:
            raise
        click.echo(f"error: {exc}", err=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(130)
    except SystemExit:
        raise
    except Exception as exc:
        if debug:
            raise
        click.echo(f"error: {type(exc).__name__}: {exc} (rerun with --debug for the traceback)", err=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
