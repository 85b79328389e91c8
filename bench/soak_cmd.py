"""``bench soak``: ``bench run --soak`` with a soak's length (an hour by default)."""

from __future__ import annotations

import click

SOAK_DURATION = "60m"


@click.command(
    "soak",
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True, "help_option_names": []},
    add_help_option=False,
)
@click.option("--duration", default=SOAK_DURATION)
@click.pass_context
def soak(ctx: click.Context, duration: str) -> None:
    """A long run whose report shows per-bin trends (dead tuples, table+index+TOAST size, claim time
    and buffers per claim, lag p99, autovacuum runs, the neighbour's p99), each steady or growing,
    and with --readers the recovery after they stop. Takes every `bench run` option (see
    `bench run --help`); --duration defaults to 60m. A soak killed midway keeps what it recorded:
    `bench report` on its directory shows it as interrupted, with its trends so far."""
    from bench.run_cmd import run

    args = list(ctx.args)
    if "--help" in args or "-h" in args:
        click.echo(ctx.get_help())
        click.echo("\nEvery `bench run` option applies:\n")
    run.main(args=["--soak", "--duration", duration, *args], prog_name="bench soak", standalone_mode=False)
