"""``bench env up | status | down``: the embedded stack (:mod:`harness.stack`)."""

from __future__ import annotations

import click


@click.group()
def env() -> None:
    """The embedded stack: a private Postgres and a Temporal dev server on loopback."""


@env.command("up")
@click.option("--no-temporal", is_flag=True, help="Start only Postgres.")
def env_up(no_temporal: bool) -> None:
    """Start the embedded Postgres and Temporal (harmless if already up)."""
    from harness import stack

    s = stack.up(with_temporal=not no_temporal, say=lambda m: click.echo(f"note: {m}"))
    click.echo(f"postgres  {stack.redact_dsn(s.dsn)}")
    if s.temporal_address:
        click.echo(f"temporal  {s.temporal_address}")
    click.echo("the stack stays up for the next command; `bench env down` stops it")


@env.command("down")
def env_down() -> None:
    """Stop the embedded servers; leaves no process behind."""
    from harness import stack

    stack.down()
    click.echo("stopped")


@env.command("status")
def env_status() -> None:
    """Print the DSN (no password) and the Temporal address, and whether each is running."""
    from harness import stack

    pg = stack.postgres()
    tp = stack.temporal()
    click.echo(f"postgres  {pg.dsn()}  {'running' if pg.running() else 'stopped'}  (data: {pg.data})")
    if pg.running():
        from metrics.extensions import extensions

        found = extensions(pg.dsn()).values()
        click.echo("          Postgres " + pg.version() + "; extensions: "
                   + ", ".join(f"{e.name} {e.version}" if e.usable else f"{e.name} not available ({e.missing})" for e in found))
    click.echo(f"temporal  {tp.address()}  {'running' if tp.running() else 'stopped'}  (db: {tp.db})")
