"""``bench env up | status | dsn | down | gc``: the embedded stack (:mod:`harness.stack`) and the schemas
interrupted runs leave on a server (:mod:`harness.schemas`)."""

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


_DSN = click.option(
    "--dsn",
    envvar="TIMERBENCH_DSN",
    default=None,
    help="Postgres connection string (default: the embedded server, if it is running).",
)


@env.command("status")
@_DSN
def env_status(dsn: str | None) -> None:
    """The servers (DSN without password, Temporal address, running or not) and the run schemas on
    Postgres: left by interrupted runs (with their sizes), kept on purpose, or live."""
    from harness import stack

    pg = stack.postgres()
    tp = stack.temporal()
    if dsn is None:
        click.echo(
            f"postgres  {stack.redact_dsn(pg.dsn())}  {'running' if pg.running() else 'stopped'}  (data: {pg.data})"
        )
        if pg.running():
            from metrics.extensions import extensions

            found = extensions(pg.dsn()).values()
            click.echo(
                "          Postgres "
                + pg.version()
                + "; extensions: "
                + ", ".join(
                    f"{e.name} {e.version}" if e.usable else f"{e.name} not available ({e.missing})" for e in found
                )
            )
        click.echo(f"temporal  {tp.address()}  {'running' if tp.running() else 'stopped'}  (db: {tp.db})")
    target = _target_dsn(dsn)
    if target is None:
        return
    from harness.schemas import LEFTOVER_LIMIT_BYTES, run_schemas
    from reports.fmt import human_bytes

    found = run_schemas(target)
    left = [s for s in found if s.leftover]
    click.echo(
        f"run schemas on {stack.redact_dsn(target)}: {len(left)} left by interrupted runs "
        f"({human_bytes(sum(s.bytes for s in left))}; a run refuses to start above "
        f"{human_bytes(LEFTOVER_LIMIT_BYTES)}), {sum(s.kept for s in found)} kept, {sum(s.live for s in found)} live"
    )
    for s in found:
        what = "live run" if s.live else "kept (--keep)" if s.kept else "leftover"
        click.echo(f"  {s.name:<32} {human_bytes(s.bytes):>10}  {what}")
    if left:
        click.echo("`bench env gc` drops the leftovers")


@env.command("dsn")
def env_dsn() -> None:
    """Print the embedded Postgres DSN with its password, to stdout only (a note on stderr says
    so), for a client that reads no libpq password file. psql and every bench command take the
    DSN `bench env status` shows, which names the password file instead."""
    from harness import stack
    from harness.errors import UsageError

    pg = stack.postgres()
    full = pg.full_dsn()
    if full is None:
        raise UsageError("the embedded Postgres has no password yet: start it with `bench env up`")
    click.echo(
        "note: the DSN below holds the embedded Postgres password; it is printed to stdout only "
        f"(also in {pg.passfile}, mode 0600){'' if pg.running() else '; the server is stopped'}",
        err=True,
    )
    click.echo(full)


@env.command("gc")
@_DSN
@click.option("--yes", "-y", is_flag=True, help="Drop without asking.")
@click.option("--include-kept", is_flag=True, help="Also drop schemas kept on purpose (--keep).")
def env_gc(dsn: str | None, yes: bool, include_kept: bool) -> None:
    """Drop the schemas interrupted runs left behind; never the schema of a live run (one whose
    process still holds its lease, see harness/schemas.py)."""
    from harness import stack
    from harness.schemas import drop, run_schemas
    from reports.fmt import human_bytes

    target = _target_dsn(dsn)
    if target is None:
        click.echo("nothing to do: the embedded Postgres is not running (give --dsn for another server)")
        return
    chosen = [s for s in run_schemas(target) if s.leftover or (include_kept and s.kept and not s.live)]
    if not chosen:
        click.echo(f"no leftover run schema on {stack.redact_dsn(target)}")
        return
    total = sum(s.bytes for s in chosen)
    for s in chosen:
        click.echo(f"  {s.name:<32} {human_bytes(s.bytes):>10}{'  kept' if s.kept else ''}")
    if not yes and not click.confirm(
        f"drop these {len(chosen)} schema(s) ({human_bytes(total)}) from {stack.redact_dsn(target)}?",
        default=False,
        err=True,
    ):
        click.echo("nothing dropped")
        return
    dropped, live = drop(target, [s.name for s in chosen])
    click.echo(f"dropped {len(dropped)} schema(s), {human_bytes(sum(s.bytes for s in chosen if s.name in dropped))}")
    for name in live:
        click.echo(f"left {name}: its lease is held (a live run, or one whose lock key it shares)")


def _target_dsn(dsn: str | None) -> str | None:
    """The given server (checked: unreachable is a usage error), else the embedded one if it runs."""
    from harness import stack
    from harness.errors import BenchError, UsageError

    if dsn is not None:
        try:
            stack.check_dsn(dsn)
        except BenchError as exc:
            raise UsageError(str(exc)) from None
        return dsn
    pg = stack.postgres()
    return pg.dsn() if pg.running() else None
