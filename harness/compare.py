"""``bench compare``: every backend (or the ones named) on one workload, in sequence, then one report.

Each run is a child ``bench run`` (:mod:`harness.child`). A run that fails is shown in the report
with its output, never hidden; the report still covers the others.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from harness.child import ChildRun, bench_run
from harness.errors import BenchError, UsageError

BASELINE_FIRST = "pg_queue"
# --tuned-control: pg_queue once more with pg_leased's autovacuum settings, so the report can
# tell what the design buys from what per-table vacuum tuning buys.
TUNED_CONTROL = ("pg_queue", "pg_leased")


@dataclass(frozen=True)
class PlannedRun:
    """One child run of a comparison: a scheduler, extra ``bench run`` arguments, a label."""

    scheduler: str
    extra_args: tuple[str, ...] = ()
    label: str | None = None


def tuned_control(of: str, like: str) -> PlannedRun:
    """``of`` with the autovacuum settings ``like`` uses by default (its storage knobs otherwise
    its own), labelled "<of>, tuned"."""
    from schedulers.base import scheduler_class
    from schedulers.pg import AUTOVACUUM_OPTIONS

    defaults = scheduler_class(like).default_options
    args: list[str] = ["--opt", "autovacuum_tuned=true"]
    for key in AUTOVACUUM_OPTIONS:
        args += ["--opt", f"{key}={defaults[key]}"]
    label = f"{of}, tuned"
    return PlannedRun(of, tuple(args + ["--label", label]), label)


STATE_WRITES = ("skip-unchanged", "always")
# skip-unchanged by default: the Composio article names it as its next step, pg_leased,
# temporal_per_trigger and dbos_workflows do it, and only pg_queue's delete-and-insert cannot.
DEFAULT_STATE_WRITES = "skip-unchanged"
STATE_OPTION = "skip_unchanged_state"


def state_write_args(scheduler: str, policy: str | None) -> tuple[str, ...]:
    """The ``--opt`` that holds ``scheduler`` to ``policy`` (none for a design with one policy
    of its own: its capabilities say which, and the report marks its figures)."""
    from schedulers.base import scheduler_class

    if policy is None:
        return ()
    if policy not in STATE_WRITES:
        raise UsageError(f"--state-writes {policy!r}: choose {' or '.join(STATE_WRITES)}")
    if STATE_OPTION not in scheduler_class(scheduler).default_options:
        return ()
    return ("--opt", f"{STATE_OPTION}={'true' if policy == 'skip-unchanged' else 'false'}")


def plan(names: list[str], with_tuned_control: bool, state_writes: str | None = None) -> list[PlannedRun]:
    """The runs of a comparison in order; the tuned control right after the design it controls;
    each held to the ``state_writes`` policy where the design has a choice."""
    runs = [PlannedRun(n, state_write_args(n, state_writes)) for n in names]
    if not with_tuned_control:
        return runs
    of, like = TUNED_CONTROL
    if of not in names or like not in names:
        raise UsageError(
            f"--tuned-control runs {of} with {like}'s autovacuum settings; "
            f"--schedulers must include both (got {', '.join(names)})"
        )
    i = names.index(of)
    control = tuned_control(of, like)
    control = PlannedRun(of, state_write_args(of, state_writes) + control.extra_args, control.label)
    return runs[: i + 1] + [control] + runs[i + 1 :]


def default_schedulers(choice: str | None) -> list[str]:
    """The backends ``--schedulers`` names (``a,b``, ``all``, or None for every backend but memory)."""
    # The registry's names are data; the report never imports a scheduler module.
    from schedulers.base import REGISTRY

    # The "before" design first, so the report's ratios (against the first run) read as change
    # from today's table-as-queue (docs/design.md); the rest in registry order.
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


@dataclass
class Comparison:
    html: Path
    markdown: Path
    run_dirs: list[str] = field(default_factory=list)
    failures: list = field(default_factory=list)  # reports.model.FailedRun
    interrupted: bool = False


def compare(
    names: list[str] | list[PlannedRun],
    run_args: list[str],
    out_dir: Path,
    html: Path | None,
    markdown: Path | None,
    echo: Callable[[str], None],
    calibration: Callable[[], ChildRun] | None = None,
) -> Comparison:
    """Run each backend (a name or a :class:`PlannedRun`) with ``run_args``, then the harness
    ``calibration`` (:mod:`harness.calibrate`), then write the report (HTML and Markdown). A
    calibration that fails is said, not fatal: the report then says the ceiling was not measured."""
    from reports.report import FailedRun, write_report

    runs = [r if isinstance(r, PlannedRun) else PlannedRun(r) for r in names]
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    html = html or out_dir / f"compare-{stamp}.html"
    result = Comparison(html, markdown or html.with_suffix(".md"))
    for i, planned in enumerate(runs, 1):
        name = planned.label or planned.scheduler
        child = bench_run(
            planned.scheduler, out_dir, run_args + list(planned.extra_args), echo, label=f"[{i}/{len(runs)}] "
        )
        if child.run_dir is not None:
            result.run_dirs.append(str(child.run_dir))  # a failed run's partial directory is still shown
        if child.exit_code != 0:
            result.failures.append(
                FailedRun(
                    name,
                    child.command,
                    child.exit_code,
                    "\n".join(child.tail),
                    str(child.run_dir) if child.run_dir else None,
                )
            )
            echo(f"== {name} failed (exit {child.exit_code}); continuing with the others\n")
        if child.interrupted:
            result.interrupted = True
            break
    if calibration is not None and not result.interrupted and result.run_dirs:
        child = calibration()
        if child.interrupted:
            result.interrupted = True
        elif child.exit_code != 0:
            echo(
                f"== the harness calibration failed (exit {child.exit_code}); the report says the ceiling "
                f"was not measured\n"
            )
    if not result.run_dirs and not result.failures:
        raise UsageError("no run was made")
    write_report(result.run_dirs, result.html, result.markdown, None, result.failures)
    return result


def failure_error(result: Comparison, total: int) -> BenchError:
    return BenchError(
        f"{len(result.failures)} of {total} runs failed: "
        f"{', '.join(f.scheduler for f in result.failures)} "
        f"(the report at {result.html} shows their output under 'Failed runs')"
    )
