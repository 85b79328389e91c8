"""``bench replicate``: the source articles' figures, measured, in one table."""

from __future__ import annotations

from pathlib import Path

import click

from harness.errors import BenchError, UsageError


@click.command("replicate")
@click.option(
    "--quick",
    is_flag=True,
    help="Compressed experiments (production-compressed intervals, 45-60 s windows): about 10 minutes on "
    "2 cores. Without it, the full-length experiments (about an hour).",
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(path_type=Path),
    default=None,
    help="Where the run directories, replication.json, replication.md and replication.html go "
    "(default: runs/replicate-<quick|full>).",
)
@click.option(
    "--table-only",
    is_flag=True,
    help="Run nothing: rebuild the table from the run directories a previous `bench replicate --out DIR` made.",
)
@click.option(
    "--only",
    default=None,
    help="Comma-separated experiments to run again into the replication already in --out (the others "
    "keep their runs), e.g. steady-temporal_shards after it could not hold its rate.",
)
@click.option("--dsn", default=None, help="Postgres connection string (default: the embedded server).")
def replicate(quick: bool, out_dir: Path | None, table_only: bool, only: str | None, dsn: str | None) -> None:
    """Run the experiments behind every quantitative claim of the three source articles, then write the
    replication table (figure, measured figure, verdict, run directory and command per claim).

    Exits 0 only when every measured row has a verdict; a row whose experiment failed says so.
    """
    from harness.inputs import check_writable_dir
    from reports import replication as table

    out_dir = out_dir or Path("runs") / f"replicate-{'quick' if quick else 'full'}"
    if out_dir.exists() and not out_dir.is_dir():
        raise UsageError(f"--out {out_dir}: a file is in the way; give a directory")
    if table_only:
        if not (out_dir / table.MANIFEST).exists():
            raise UsageError(
                f"--table-only: {out_dir} holds no {table.MANIFEST} (run `bench replicate --out {out_dir}` first)"
            )
        rows, md, html = table.write(out_dir)
    else:
        check_writable_dir("--out", out_dir)
        from bench.compare_cmd import check_children
        from harness.replicate import PLANS
        from harness.replicate import replicate as run_all

        names = [n.strip() for n in only.split(",") if n.strip()] if only else None
        if names is not None:
            unknown = [n for n in names if n not in {p.name for p in PLANS}]
            if unknown or not names:
                choices = ", ".join(p.name for p in PLANS)
                raise UsageError(
                    f"--only {only!r}: unknown experiment(s) {', '.join(unknown) or 'none'}; choose from {choices}"
                )
            if not (out_dir / table.MANIFEST).exists():
                raise UsageError(f"--only: {out_dir} holds no {table.MANIFEST} to add to; run without --only first")
        for p in PLANS:  # every child's arguments and servers, before the first starts
            if names and p.name not in names:
                continue
            check_children([p.scheduler], list(p.quick if quick else p.full), out_dir, [], dsn, None)
        rows, md, html = run_all(
            out_dir, quick, dsn, echo=lambda line: click.echo(line, nl=False, err=True), only=names
        )
    for r in rows:
        click.echo(f"{r.claim.name:<18} {r.verdict:<24} {r.figure}")
    click.echo(f"verdicts: {table.counts(rows)}")
    click.echo(f"table: {md}")
    click.echo(f"html: {html}")
    missing = table.unanswered(rows)
    if missing:
        names = ", ".join(sorted({r.claim.name for r in missing}))
        raise BenchError(f"{len(missing)} of {len(rows)} rows have no verdict ({names}); {md} says why")
