"""The harness's own ceiling beside every run.

A backend's figures are the backend's and the harness's together: the load generator, the
simulated provider and the recorder share one Python process with the claim loops. ``bench
calibrate`` (also the last step of ``bench compare``) runs the memory scheduler, which has no
store, on the same workload shape at three times the rate; its run directory is marked
``calibration`` in ``config.json``. This module finds that run for each run of a report (among the
runs given, then beside them in the same directories), keeps it out of the compared runs, and
turns it into a check: the harness held 3x the run's rate (its figures are the backend's), or the
run's achieved rate is above a third of the harness's ceiling (flagged: possibly the harness's).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from metrics import rundir
from reports import fmt
from reports.load import Run

MARGIN = 3.0  # the harness should stay this far above what it measures
HELD_TOLERANCE = 0.95  # a calibration at 3x that achieved 2.85x still held (rundir's rate-held share)

# What makes two workloads the same shape: everything but the rate (the population follows it),
# the window and the seed. The lanes (poll_concurrency) scale with the rate when not given.
SHAPE_FIELDS = (
    "interval_min_s",
    "interval_max_s",
    "tenants",
    "tenant_skew",
    "state_bytes",
    "latency_median_ms",
    "latency_p99_ms",
    "error_rate",
    "retry_backoff_s",
    "new_event_rate",
    "cadence",
    "long_horizon_share",
    "herd_share",
    "trace",
    "time_compression",
)


def shape(workload: dict[str, Any]) -> tuple:
    return tuple(json.dumps(workload.get(k), sort_keys=True) for k in SHAPE_FIELDS)


def split(runs: list[Run]) -> tuple[list[Run], list[Run]]:
    """``(compared, calibrations)``; a report of calibration runs only shows them as runs."""
    compared = [r for r in runs if not r.is_calibration]
    calibrations = [r for r in runs if r.is_calibration]
    if not compared:
        return calibrations, []
    return compared, calibrations


def _light_run(path: Path) -> Run | None:
    """A calibration beside the runs: its config and summary are all a check needs."""
    try:
        config = rundir.read_config(path)
        if not config.get("calibration"):
            return None
        summary = rundir.read_summary(path)
    except Exception:  # not a run directory, or one still running: not a calibration to rely on
        return None
    return Run(
        path=path,
        config=config,
        summary=summary,
        fires=pd.DataFrame(),
        samples=pd.DataFrame(),
        label=config.get("label") or path.name,
    )


def beside(runs: list[Run]) -> list[Run]:
    """Calibration runs in the directories that hold ``runs`` (a compare's or a capacity search's)."""
    out: list[Run] = []
    seen = {r.path.resolve() for r in runs}
    for parent in sorted({r.path.resolve().parent for r in runs}):
        for child in sorted(parent.iterdir()):
            if child.is_dir() and child.resolve() not in seen and (child / rundir.CONFIG).exists():
                run = _light_run(child)
                if run is not None:
                    out.append(run)
    return out


def attach(runs: list[Run], calibrations: list[Run]) -> None:
    """Give each run the calibration of its workload shape: one given with the runs before one
    found beside them, one made for the run's rate (or a higher one) before one that is not, the
    newest before older ones."""
    given = {c.path.resolve() for c in calibrations}
    pool = calibrations + [c for c in beside(runs) if c.path.resolve() not in given]
    for run in runs:
        if run.scheduler == "memory":
            continue  # the harness itself
        same = [c for c in pool if shape(c.workload) == shape(run.workload)]
        if not same:
            continue
        target = float(run.summary.get("target_rate") or run.workload.get("rate_per_s") or 0.0)
        run.calibration = max(
            same,
            key=lambda c: (
                c.path.resolve() in given,
                _for_rate(c) >= target * HELD_TOLERANCE,
                float(c.config.get("started_at") or 0.0),
            ),
        )


def _for_rate(c: Run) -> float:
    return float((c.config.get("calibration") or {}).get("for_rate") or 0.0)


def ceiling_check(run: Run) -> tuple[bool | None, str] | None:
    """``(ok, detail)`` of the run's "harness ceiling" check; None for the memory runs themselves."""
    if run.scheduler == "memory":
        return None
    achieved = run.summary.get("achieved_rate")
    cal = run.calibration
    if cal is None:
        rate = run.summary.get("target_rate") or run.workload.get("rate_per_s")
        how = f"bench calibrate --workload {run.workload.get('name') or '<this workload>'}"
        if rate:
            how += f" --rate {rate:g}/s"
        return None, f"not measured for this workload: {how} --out {run.path.parent}"
    s = cal.summary
    cal_rate = s.get("achieved_rate")
    cpu = (s.get("harness") or {}).get("cores")
    where = f"{cal.path.name}" + ("" if cpu is None else f", harness process {cpu:.2f} core")
    if not s.get("complete") or s.get("correct") is False or cal_rate is None:
        return None, f"the calibration run {cal.path.name} is incomplete or failed: no ceiling to compare with"
    if achieved is None:
        return None, f"this run has no achieved rate; the harness reached {fmt.num(cal_rate)} fires/s ({where})"
    if s.get("rate_held"):
        ratio = cal_rate / achieved if achieved else float("inf")
        if ratio >= MARGIN * HELD_TOLERANCE:
            return True, (
                f"the harness alone (memory, no store) held {fmt.num(cal_rate)} fires/s on this workload, "
                f"{ratio:.1f}× this run's {fmt.num(achieved)}: the figures are the backend's ({where})"
            )
        return None, (
            f"the harness held {fmt.num(cal_rate)} fires/s, only {ratio:.1f}× this run's "
            f"{fmt.num(achieved)}: calibrate at ≥ {fmt.num(MARGIN * achieved)} fires/s to tell ({where})"
        )
    third = cal_rate / MARGIN
    if achieved > third:
        return False, (
            f"possibly the harness's limit: this run's {fmt.num(achieved)} fires/s is above a third of "
            f"the harness's own ceiling on this workload ({fmt.num(cal_rate)} fires/s, not holding "
            f"{fmt.num(s.get('offered_rate'))}; {where})"
        )
    return True, (
        f"{fmt.num(achieved)} fires/s is below a third of the harness's ceiling on this workload "
        f"({fmt.num(cal_rate)} fires/s; {where})"
    )
