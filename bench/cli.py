"""The ``bench`` command line.

Subcommands live in their own modules and are loaded on first use (``LAZY_COMMANDS``), so
``bench --help`` stays fast and a missing optional piece never breaks the others.
Every failure a person can act on is a :class:`harness.errors.BenchError` (or a
:class:`reports.errors.ReportError`): one line, exit 2 for bad usage, no traceback unless ``--debug``.
The commands only parse options, call the engine (``harness/``) and print.
"""

from __future__ import annotations

import importlib
import os
import sys

import click

from harness.errors import BenchError
from reports.errors import ReportError

# name -> "module:attribute" of a click command
LAZY_COMMANDS: dict[str, str] = {
    "migrate": "bench.migrate_cmd:migrate",
    "env": "bench.env_cmd:env",
    "schedulers": "bench.cli:schedulers_cmd",
    "run": "bench.run_cmd:run",
    "soak": "bench.soak_cmd:soak",
    "report": "bench.report_cmd:report",
    "compare": "bench.compare_cmd:compare",
    "sweep": "bench.sweep_cmd:sweep",
    "capacity": "bench.capacity_cmd:capacity",
    "scale": "bench.scale_cmd:scale",
    "calibrate": "bench.calibrate_cmd:calibrate",
    "serve": "bench.serve_cmd:serve",
    "inspect": "bench.inspect_cmd:inspect",
    "capture": "bench.capture_cmd:capture",
    "replicate": "bench.replicate_cmd:replicate",
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
    except (BenchError, ReportError) as exc:
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
