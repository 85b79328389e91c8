"""``bench capacity``: the highest rate one backend sustains under an SLO, by search (the rule and
the "sustainable" test are pure, in :mod:`harness.capacity_rule`).

Each step is its own child ``bench run --rate R`` (:mod:`harness.child`) with its own warm-up,
into ``runs/capacity-<timestamp>-<scheduler>/``; ``capacity.json`` is rewritten after every step,
so an interrupted search keeps what it found. The pgbench ceiling of :mod:`harness.sweep` runs
first (unless ``--no-pgbench``), and the result is shown as a share of it. The report of the
steps (``bench report`` of the directory) has a capacity section (:mod:`reports.capacity`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from harness.capacity_rule import Search, lag_trend
from harness.child import bench_run, failed_run
from harness.stack import redact_argv
from harness.sweep import DEFAULT_WORKLOAD, DEFAULT_WORKLOAD_ARGS, declared_max_lag_s, pgbench_ceiling
from harness.sweep_rule import RATE_HELD_SHARE, warmup_for
from metrics import accounting, rundir

CAPACITY_JSON = "capacity.json"


@dataclass
class CapacityPlan:
    scheduler: str
    slo: str | None  # reports.thresholds syntax; None: the workload's on-time bound, 0 lost, fairness
    search: Search
    duration: str
    warmup_s: float
    workload: str | None  # None: the ceiling preset with 4 kB state
    extra_args: list[str] = field(default_factory=list)
    out_dir: Path = Path("runs")
    pgbench: bool = True
    pgbench_s: float = 10.0
    dsn: str | None = None
    temporal_address: str | None = None
    command: list[str] = field(default_factory=list)
    # (rate, out_dir) -> the harness calibration at 3x the rate found (harness.calibrate); None: skip it
    calibration: Callable[[float, Path], Any] | None = None


@dataclass
class CapacityResult:
    data: dict[str, Any]
    path: Path
    html: Path | None
    interrupted: bool


def step_args(plan: CapacityPlan) -> list[str]:
    workload = (
        ["--workload", DEFAULT_WORKLOAD, *DEFAULT_WORKLOAD_ARGS]
        if plan.workload is None
        else ["--workload", plan.workload]
    )
    return [
        *workload,
        "--duration",
        plan.duration,
        *servers_and_checkpoint(plan.dsn, plan.temporal_address, plan.extra_args),
    ]


def servers_and_checkpoint(dsn: str | None, temporal_address: str | None, extra_args: list[str]) -> list[str]:
    """A step's server options, its CHECKPOINT at the start of the warm-up (unless ``extra_args``
    say otherwise), then ``extra_args``."""
    args: list[str] = []
    for flag, value in (("--dsn", dsn), ("--temporal-address", temporal_address)):
        if value is not None:
            args += [flag, value]
    # A step's own forced CHECKPOINT goes at the start of its warm-up: at high rates, flushing
    # a large dirty cache just before the window stalled the server into it (pg_leased at
    # 8,170/s: 75 s), so the step measured the checkpoint, not the design.
    if not any(a == "--checkpoint" or a.startswith("--checkpoint=") for a in extra_args):
        args += ["--checkpoint", "warmup"]
    return args + list(extra_args)


def judge_step(run_dir: Path | None, exit_code: int, slo: str | None) -> tuple[bool, str | None, dict[str, Any]]:
    """(sustained, why not, figures) of one step's run directory."""
    from reports.load import read_run
    from reports.recommend import judge

    if run_dir is None:
        return False, f"no run directory (bench run exited {exit_code})", {}
    run = read_run(run_dir)
    s = run.summary
    w = run.window
    start, end = float(w.get("measure_start", 0.0)), float(w.get("measure_end", 0.0))
    verdict = judge(run, None if slo is None else _slo_thresholds(slo))
    bound = _lag_bound_s(verdict, run)
    f = run.fires
    trend = None
    if not f.empty and "due_at" in f:
        due_eff = np.fmax(f["due_at"].to_numpy(float), f["armed_at"].to_numpy(float))
        lag = f["lag_s"].to_numpy(float)
        records_end = float(np.nanmax(f["fired_at"].to_numpy(float))) if f["fired_at"].notna().any() else end
        trend = lag_trend(due_eff, lag, start, end, bound, records_end=max(records_end, end))
    figures = {
        "offered": s.get("offered_rate"),
        "achieved": s.get("achieved_rate"),
        "p99_ms": (s.get("lag_ms") or {}).get("p99"),
        "lost": (s.get("outcomes") or {}).get("lost"),
        "writes_per_fire": (s.get("per_fire") or {}).get("row_writes"),
        "wal_bytes_per_fire": (s.get("per_fire") or {}).get("wal_bytes"),
        "checks": [[t, m, ok] for t, m, ok in verdict.checks],
        "trend": trend.to_json() if trend else None,
        "arm_into_window_s": s.get("arming_into_window_s"),
        "exit_code": exit_code,
    }
    if exit_code not in (0, accounting.EXIT_INCORRECT):
        return False, f"bench run exited {exit_code}", figures
    failed = [f"{t} (measured {m})" for t, m, ok in verdict.checks if not ok]
    if failed:
        return False, "; ".join(failed), figures
    if trend is not None and trend.rising:
        return (
            False,
            (
                f"lag trending upward: +{trend.climb_s:.2f} s over the window (± {trend.stderr_climb_s:.2f}), "
                f"more than {trend.limit_s:.2f} s: a backlog building"
            ),
            figures,
        )
    return True, None, figures


def rerun_warmup_s(held: bool, into_window_s: float | None, warmup_s: float, rerun: bool) -> float | None:
    """The warm-up to run a step again with, or None to keep its verdict: a step that did not hold
    while its population was still being armed in the window measured the arm too (its writes,
    its signals, the CPU it took from the fires), not the rate; it runs once more, with a warm-up
    longer by what the arm overran, doubled at least (on a shared machine an arm's pace varies
    2-4x from one step to the next)."""
    if held or into_window_s is None or rerun:
        return None
    return round(max(2.0 * warmup_s, warmup_s + 2.0 * into_window_s), 1)


def _slo_thresholds(slo: str):
    from reports.thresholds import parse_thresholds

    return parse_thresholds(slo, "--slo", allow_relative=False)


def _lag_bound_s(verdict, run) -> float:
    """The lag bound the SLO sets (its lag_p99 threshold), the scale of the trend test."""
    from reports.recommend import on_time_bound_s

    for text, _, _ in verdict.checks:
        if text.startswith(("lag_p99", "p99")):
            for th in _slo_thresholds(text):
                return th.value
    return on_time_bound_s(run)


def harness_ceiling(child, rate: float) -> dict[str, Any]:
    """What the calibration after a search says: did the harness alone hold 3x the rate found?"""
    out: dict[str, Any] = {
        "for_rate": rate,
        "run_dir": str(child.run_dir) if child.run_dir else None,
        "exit_code": child.exit_code,
        "interrupted": child.interrupted,
    }
    if child.run_dir is not None and (child.run_dir / rundir.SUMMARY).exists():
        s = rundir.read_summary(child.run_dir)
        out.update(
            offered=s.get("offered_rate"),
            achieved=s.get("achieved_rate"),
            held=s.get("rate_held"),
            cores=(s.get("harness") or {}).get("cores"),
        )
    return out


def run_capacity(plan: CapacityPlan, echo: Callable[[str], None]) -> CapacityResult:
    from reports.report import FailedRun

    started = time.time()
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(started))
    out = plan.out_dir / f"capacity-{stamp}-{plan.scheduler}"
    n = 2
    while out.exists():
        out, n = plan.out_dir / f"capacity-{stamp}-{plan.scheduler}-{n}", n + 1
    out.mkdir(parents=True)
    max_lag_s = declared_max_lag_s(plan.scheduler, None)
    warmup_s = warmup_for(plan.warmup_s, max_lag_s)
    args = step_args(plan)
    search = plan.search
    data: dict[str, Any] = {
        "started_at": started,
        "finished_at": None,
        "complete": False,
        "command": ["bench", *redact_argv(plan.command)],
        "scheduler": plan.scheduler,
        "slo": plan.slo
        or (
            "lag p99 within the workload's on-time bound (the one bound every design is judged by: past it, "
            "a run counts a fire late), 0 lost, Jain's index >= 0.9 across tenants"
        ),
        "declared_max_lag_s": max_lag_s,  # the design's own bound, information: it does not set the SLO
        "rule": (
            f"a step is sustained when its run completed and was correct, held its rate (achieved >= "
            f"{100 * RATE_HELD_SHARE:.0f}% of offered, offered >= {100 * RATE_HELD_SHARE:.0f}% of target), met the "
            "SLO, and its lag did not trend upward across the window (harness/capacity_rule.py); exponential probe, "
            "bisection to the precision, then a confirmation rerun at the rate found"
        ),
        "duration": plan.duration,
        "warmup_s": warmup_s,
        "workload": {
            "args": (
                ["--workload", DEFAULT_WORKLOAD, *DEFAULT_WORKLOAD_ARGS]
                if plan.workload is None
                else ["--workload", plan.workload]
            )
            + list(plan.extra_args)
        },
        "run_args": redact_argv(args),
        "pgbench": None,
        "search": search.to_json(),
        "fraction_of_ceiling": None,
    }
    path = out / CAPACITY_JSON
    rundir.write_json(path, data)
    echo(
        f"capacity {out}: {plan.scheduler}, SLO {data['slo']}; {plan.duration} measured + {warmup_s:g}s warm-up per "
        "step\n"
    )
    data["pgbench"] = pgbench_ceiling(plan.pgbench, plan.dsn, plan.pgbench_s, out, echo)
    rundir.write_json(path, data)

    run_dirs: list[str] = []
    failures: list[FailedRun] = []
    interrupted = False
    while (nxt := search.next_rate()) is not None:
        rate, confirm = nxt
        label = f"{plan.scheduler} at {rate:g}/s" + (" (confirmation)" if confirm else "") + ": "
        step_warmup_s, rerun = warmup_s, False
        while True:
            child = bench_run(
                plan.scheduler,
                out,
                ["--rate", f"{rate:g}/s", "--warmup", f"{step_warmup_s:g}s", *args],
                echo,
                label=label,
            )
            if child.run_dir is not None:
                run_dirs.append(str(child.run_dir))
            if child.exit_code not in (0, accounting.EXIT_INCORRECT):
                failures.append(failed_run(plan.scheduler, child))
            if child.interrupted:
                interrupted = True
                break
            held, why, figures = judge_step(child.run_dir, child.exit_code, plan.slo)
            into = figures.get("arm_into_window_s")
            again = rerun_warmup_s(held, into, step_warmup_s, rerun)
            if again is None:
                if into is not None and not held:
                    why = f"{why}; the population was still being armed {into:.1f} s into the window"
                break
            echo(
                f"== {label}not sustained while the population was still being armed {into:.1f} s into the "
                f"window: the step again, with a {again:g}s warm-up\n"
            )
            figures_before = {"run_dir": str(child.run_dir) if child.run_dir else None, "why": why, **figures}
            step_warmup_s, rerun = again, True
        if interrupted:
            break
        if rerun:
            figures = {**figures, "warmup_s": step_warmup_s, "rerun_after": figures_before}
        search.record(rate, held, why, str(child.run_dir) if child.run_dir else None, figures)
        echo(f"== {label}" + ("sustained" if held else f"NOT sustained ({why})") + "\n")
        data["search"] = search.to_json()
        rundir.write_json(path, data)
    if interrupted and search.stop_reason is None:
        search.stop_reason = "interrupted"
    data["search"] = search.to_json()
    ceiling = (data["pgbench"] or {}).get("rows_per_s")
    if search.result and ceiling:
        data["fraction_of_ceiling"] = search.result / ceiling
    if search.result and plan.calibration is not None and not interrupted:
        data["harness"] = harness_ceiling(plan.calibration(search.result, out), search.result)
        interrupted = data["harness"].pop("interrupted")
    html = finish(data, path, run_dirs, failures, interrupted, slo=plan.slo)
    return CapacityResult(data, path, html, interrupted)


def finish(
    data: dict[str, Any], path: Path, run_dirs: list[str], failures: list, interrupted: bool, slo: str | None = None
) -> Path | None:
    """The last write of a search's (or a scale's) JSON beside its steps, then the report of the
    steps (None: no step made a run directory), its answer judged by the SLO the steps were
    (``slo``: the search's --slo; None, the report's default)."""
    from reports.report import write_report

    data["finished_at"] = time.time()
    data["complete"] = not interrupted
    html, md = path.parent / "report.html", path.parent / "report.md"
    data["report"] = {"html": str(html), "markdown": str(md)}
    rundir.write_json(path, data)
    if not run_dirs:
        return None
    write_report(run_dirs, html, md, failures=failures, slo=slo)
    return html
