"""``bench report`` (compare recorded runs) and ``bench compare`` (run every backend on one workload
in sequence, then report). The report itself lives in ``reports/`` and reads run directories only."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import deque
from pathlib import Path

import click

from bench.errors import BenchError, UsageError
from bench.stack import redact_argv


def _write(run_args: list[str], output: Path | None, markdown: Path | None, baseline: str | None, failures=None):
    from reports.report import write_report

    return write_report(run_args, output, markdown, baseline=baseline, failures=failures)


@click.command("report")
@click.argument("runs", nargs=-1, required=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=Path("report.html"),
              show_default=True, help="The HTML report (one self-contained file).")
@click.option("--markdown", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the tables and the narrative as Markdown to this file.")
@click.option("--baseline", default=None,
              help="The run ratios are computed against: a run directory, its name, or a scheduler name (default: the first run).")
def report(runs: tuple[str, ...], output: Path, markdown: Path | None, baseline: str | None) -> None:
    """Compare run directories side by side: tables, plots, a narrative.

    RUNS are run directories, directories of runs (such as runs/) or globs ('runs/*-pg_*').
    """
    rep = _write(list(runs), output, markdown, baseline)
    click.echo(f"report: {output} ({len(rep.runs)} runs)")
    if markdown:
        click.echo(f"markdown: {markdown}")


BASELINE_FIRST = "pg_queue"
RUN_DIR_LINE = "run directory: "  # what `bench run` prints last


def _default_schedulers(choice: str | None) -> list[str]:
    # The registry's names are data; the report never imports a scheduler module.
    from schedulers.base import REGISTRY

    # The "before" design first, so the report's ratios (against the first run) read as change
    # from today's table-as-queue (DESIGN.md); the rest in registry order.
    names = sorted(REGISTRY, key=lambda n: n != BASELINE_FIRST)
    if choice is None:
        chosen = [n for n in names if n != "memory"]  # memory is the harness reference: only when asked
        if not chosen:
            raise UsageError("no scheduler besides memory is registered; pass --schedulers memory to compare it alone")
        return chosen
    if choice.strip() == "all":
        return [n for n in names if n != "memory"] + (["memory"] if "memory" in names else [])
    chosen = [c.strip() for c in choice.split(",") if c.strip()]
    unknown = [c for c in chosen if c not in REGISTRY]
    if unknown or not chosen:
        raise UsageError(
            f"unknown scheduler(s) in --schedulers {choice!r}: {', '.join(unknown) or 'none given'}; "
            f"choose from: {', '.join(names)} (comma-separated) or 'all'"
        )
    return list(dict.fromkeys(chosen))


def _run_dirs(out: Path) -> set[Path]:
    return {p for p in out.iterdir() if p.is_dir()} if out.is_dir() else set()


def _new_run_dir(out: Path, before: set[Path], scheduler: str) -> Path | None:
    """The run directory ``bench run`` created for ``scheduler`` (``<stamp>-<scheduler>[-n]``)."""
    new = [p for p in _run_dirs(out) - before
           if p.name.split("-", 2)[-1] == scheduler or p.name.split("-", 2)[-1].rsplit("-", 1)[0] == scheduler]
    return max(new, key=lambda p: p.stat().st_mtime) if new else None


@click.command("compare", context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.option("--schedulers", "schedulers_opt", default=None,
              help="Comma-separated schedulers (the first is the report's baseline), or 'all' (memory too, last). "
                   "Default: every registered backend except memory, pg_queue first.")
@click.option("--workload", default=None, help="Workload file or preset, passed to every run (default: bench run's).")
@click.option("--rate", default=None, help="Target fire rate, e.g. 556/s.")
@click.option("--duration", default=None, help="Measured window of each run, e.g. 60s.")
@click.option("--warmup", default=None, help="Warm-up of each run, e.g. 10s.")
@click.option("--dsn", envvar="TIMERBENCH_DSN", default=None, help="Postgres connection string (default: the embedded server).")
@click.option("--temporal-address", envvar="TIMERBENCH_TEMPORAL", default=None,
              help="host:port of a Temporal frontend (default: the embedded dev server).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=Path("runs"), show_default=True,
              help="Where the runs' directories are written.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="The HTML report (default: <out>/compare-<timestamp>.html).")
@click.option("--markdown", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the report as Markdown (default: beside the HTML, .md).")
@click.pass_context
def compare(ctx: click.Context, schedulers_opt: str | None, workload: str | None, rate: str | None,
            duration: str | None, warmup: str | None, dsn: str | None, temporal_address: str | None,
            out_dir: Path, output: Path | None, markdown: Path | None) -> None:
    """Run every backend (or --schedulers a,b) on one workload in sequence, then write the report.

    Any other option (such as --seed or --opt key=value) is passed to each `bench run`. A run that
    fails is shown in the report with its output; the report still covers the others, and the
    command then exits with status 1.
    """
    from reports.report import FailedRun

    names = _default_schedulers(schedulers_opt)
    passthrough: list[str] = []
    for flag, value in (("--workload", workload), ("--rate", rate), ("--duration", duration), ("--warmup", warmup),
                        ("--dsn", dsn), ("--temporal-address", temporal_address)):
        if value is not None:
            passthrough += [flag, value]
    passthrough += list(ctx.args)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    output = output or out_dir / f"compare-{stamp}.html"
    markdown = markdown or output.with_suffix(".md")

    run_dirs: list[str] = []
    failures: list[FailedRun] = []
    interrupted = False
    for i, name in enumerate(names, 1):
        cmd = [sys.executable, "-m", "bench.cli", "run", "--scheduler", name, "--out", str(out_dir), *passthrough]
        # The command as shown (terminal, report): the DSN without its password.
        shown = ["bench", *redact_argv(cmd[3:])]
        click.echo(f"== [{i}/{len(names)}] {' '.join(shown)}", err=True)
        before = _run_dirs(out_dir)
        tail: deque[str] = deque(maxlen=40)
        said: Path | None = None
        # Stream the run's own output (its live line and summary) and keep the tail for the report.
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                click.echo(line, nl=False, err=True)
                tail.append(line.rstrip("\n"))
                if line.startswith(RUN_DIR_LINE):
                    said = Path(line[len(RUN_DIR_LINE):].strip())
        except KeyboardInterrupt:
            # Ctrl-C reached the run too (same process group): let it write its incomplete
            # directory, then report what was recorded so far.
            interrupted = True
            for line in proc.stdout:
                tail.append(line.rstrip("\n"))
                if line.startswith(RUN_DIR_LINE):
                    said = Path(line[len(RUN_DIR_LINE):].strip())
        code = proc.wait()
        # rich may wrap a long path when piped: trust the printed one only if it is a run directory
        made = said if said is not None and (said / "config.json").exists() else _new_run_dir(out_dir, before, name)
        if made is not None and (made / "config.json").exists():
            run_dirs.append(str(made))  # a failed run's partial directory is still shown (marked incomplete)
        if code != 0:
            failures.append(FailedRun(name, shown, code, "\n".join(tail), str(made) if made else None))
            click.echo(f"== {name} failed (exit {code}); continuing with the others", err=True)
        if interrupted:
            break

    if not run_dirs and not failures:
        raise UsageError("no run was made")
    _write(run_dirs, output, markdown, None, failures)
    click.echo(f"report: {output}")
    click.echo(f"markdown: {markdown}")
    if interrupted:
        raise KeyboardInterrupt
    if failures:
        raise BenchError(f"{len(failures)} of {len(names)} runs failed: {', '.join(f.scheduler for f in failures)} "
                         f"(the report at {output} shows their output under 'Failed runs')")
