"""``bench sweep``: each backend's maximum sustainable fire rate, beside the database's own ceiling.

For each backend the rates run in ascending order, each as its own child ``bench run --rate R``
(:mod:`harness.child`), into ``runs/sweep-<timestamp>/``. A backend stops at the first rate it
cannot hold; its maximum sustainable rate is the last rate it held (the OpenMessaging
Benchmark's rate search, stepping up a fixed list instead of bisecting). Whether a rate is held
is the pure rule of :mod:`harness.sweep_rule`.

Before the backends, pgbench runs pg_leased's claim-and-re-arm SQL against the same server
(``loadgen/pgbench``): the ceiling each backend's rate is shown against (every claim is a write:
the timer-wheel article's claim-ceiling). ``sweep.json`` is
rewritten after every run, so an interrupted sweep still leaves what it measured; the HTML and
Markdown reports (``bench report`` of the sweep's runs, with a sweep section) come last.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.child import bench_run
from harness.errors import BenchError
from harness.stack import redact_argv
from harness.sweep_rule import (
    MAX_LAG,
    RATE_HELD_SHARE,
    WARMUP_MAX_LAG_FACTOR,
    judge,
    max_sustainable,
    rate_key,
    slo_for,
    warmup_for,
    writes_per_fire,
)
from metrics import rundir

# Short defaults so a sweep of every backend finishes in minutes on a 2-core machine.
DEFAULT_DURATION = "30s"
DEFAULT_WARMUP = None  # one maximum interval of the workload (bench run's default)
# The harness-ceiling preset (10-20 s intervals, a 2 ms provider) with the Composio article's 4 kB
# state: short intervals keep the population small and every trigger firing in a short run, and
# the fast provider keeps its tail out of the lag (with production's 900 ms p99 poll even the
# memory scheduler shows ~1 s p99 at 500/s: the provider, not the store).
DEFAULT_WORKLOAD = "ceiling"
DEFAULT_WORKLOAD_ARGS = ["--state-size", "4096"]


@dataclass
class SweepPlan:
    names: list[str]
    rates: list[float]
    slo_spec: str
    slo_source: str  # where the SLO of every backend without an override comes from
    slo_ms: float  # the p99 SLO of every backend without an override
    slo_overrides: dict[str, float | str]
    duration: str
    warmup: str | None  # None: one maximum interval of the workload
    warmup_s: float  # the warm-up asked for, or the workload's maximum interval
    workload: str | None  # None: the ceiling preset with 4 kB state
    extra_args: list[str] = field(default_factory=list)  # passed to every bench run
    out_dir: Path = Path("runs")
    retries: int = 1
    pgbench: bool = True
    pgbench_s: float = 10.0
    dsn: str | None = None
    temporal_address: str | None = None
    command: list[str] = field(default_factory=list)  # as given, for sweep.json


@dataclass
class SweepResult:
    data: dict[str, Any]
    path: Path  # sweep.json
    html: Path | None
    interrupted: bool


def default_warmup_s(workload: str | None, extra_args: list[str]) -> float:
    """The warm-up a campaign's runs get without --warmup: one maximum interval of the workload
    (the default preset's, with an --interval passed through to the runs taken into account)."""
    from harness.inputs import load_workload

    args = ([] if workload else DEFAULT_WORKLOAD_ARGS) + list(extra_args)
    interval = args[args.index("--interval") + 1] if "--interval" in args[:-1] else None
    return float(load_workload(workload or DEFAULT_WORKLOAD, {"interval": interval}).warmup_s or 0.0)


def default_slo_spec(workload: str | None, extra_args: list[str]) -> str:
    """The sweep's SLO without --slo-p99: one p99 bound for every backend, the workload's on-time
    bound (past it every run counts a fire late; an --on-time passed through to the runs counts)."""
    from harness.inputs import load_workload

    args = ([] if workload else DEFAULT_WORKLOAD_ARGS) + list(extra_args)
    on_time = args[args.index("--on-time") + 1] if "--on-time" in args[:-1] else None
    w = load_workload(workload or DEFAULT_WORKLOAD, {"on_time": on_time, "interval": None})
    return f"{w.on_time_s:g}s"


def workload_args(plan: SweepPlan) -> list[str]:
    return (
        ["--workload", DEFAULT_WORKLOAD, *DEFAULT_WORKLOAD_ARGS]
        if plan.workload is None
        else ["--workload", plan.workload]
    )


def run_args(plan: SweepPlan) -> list[str]:
    """What every child ``bench run`` is given besides ``--rate`` and ``--warmup``. Workload
    overrides given as extra options (--interval, --state-size, ...) come after the workload's,
    and a later option wins there."""
    passthrough = [*workload_args(plan), "--duration", plan.duration]
    for flag, value in (("--dsn", plan.dsn), ("--temporal-address", plan.temporal_address)):
        if value is not None:
            passthrough += [flag, value]
    return passthrough + list(plan.extra_args)


def run_sweep(plan: SweepPlan, echo: Callable[[str], None]) -> SweepResult:
    from reports.report import FailedRun, write_report

    workload_args_ = workload_args(plan)
    passthrough = run_args(plan)

    started = time.time()
    sweep_dir = _new_sweep_dir(plan.out_dir, started)
    extra = f" {' '.join(plan.extra_args)}" if plan.extra_args else ""
    data: dict[str, Any] = {
        "started_at": started,
        "finished_at": None,
        "complete": False,
        "command": ["bench", *redact_argv(plan.command)],
        "rates": plan.rates,
        "slo_p99_ms": plan.slo_ms,
        "slo_spec": plan.slo_spec,
        "slo_source": plan.slo_source,
        "retries": plan.retries,
        "duration": plan.duration,
        "warmup": plan.warmup or f"{plan.warmup_s:g}s",
        "warmup_rule": (
            f"each backend warms up for --warmup (default: one maximum interval of the workload) or "
            f"{WARMUP_MAX_LAG_FACTOR:g} x its declared max lag, whichever is longer (backends[name].warmup_s)"
        ),
        "workload": {
            "args": workload_args_ + list(plan.extra_args),
            "note": " ".join(
                ["preset", DEFAULT_WORKLOAD, "(poll intervals 10s..20s, 2 ms provider)", *DEFAULT_WORKLOAD_ARGS]
                if plan.workload is None
                else [plan.workload]
            )
            + extra,
        },
        "run_args": redact_argv(passthrough),
        "rule": (
            f"rates in ascending order; a backend stops at the first rate not held: incomplete run, "
            f"a broken correctness promise (a lost fire, a duplicate keyed effect), achieved < "
            f"{100 * RATE_HELD_SHARE:.0f}% of the offered rate (fires due in the window per second) or offered < "
            f"{100 * RATE_HELD_SHARE:.0f}% of the target, or p99 lag over every fire due in the window "
            f"(undelivered ones infinitely late) over the backend's SLO ({plan.slo_spec}); a rate not held is run "
            "again "
            f"up to {plan.retries} more time(s) and counts as held if any run held. Maximum sustainable rate: the "
            f"last rate held."
        ),
        "pgbench": None,
        "backends": {},
    }
    path = sweep_dir / rundir.SWEEP
    rundir.write_json(path, data)
    echo(
        f"sweep {sweep_dir}: {', '.join(plan.names)} at {', '.join(rate_key(r) for r in plan.rates)} fires/s; "
        f"workload: {data['workload']['note']}; {plan.duration} measured + {plan.warmup or f'{plan.warmup_s:g}s'} "
        f"warm-up per rate\n"
    )

    data["pgbench"] = pgbench_ceiling(plan.pgbench, plan.dsn, plan.pgbench_s, sweep_dir, echo)
    rundir.write_json(path, data)

    failures: list[FailedRun] = []
    run_dirs: list[str] = []
    interrupted = False
    for name in plan.names:
        max_lag_s = declared_max_lag_s(name, None)
        backend_slo_ms, slo_source = slo_for(name, plan.slo_ms, plan.slo_overrides, max_lag_s)
        slo_source = plan.slo_source if slo_source == "--slo-p99" else slo_source
        backend_warmup_s = warmup_for(plan.warmup_s, max_lag_s)
        backend: dict[str, Any] = {
            "rates": {},
            "max_sustainable_rate": None,
            "stopped_at": None,
            "stop_reason": None,
            "fraction_of_ceiling": None,
            "slo_p99_ms": backend_slo_ms,
            "slo_source": slo_source,
            "declared_max_lag_s": max_lag_s,
            "warmup_s": backend_warmup_s,
        }
        data["backends"][name] = backend
        entries: list[dict[str, Any]] = []
        for rate in plan.rates:
            earlier: list[dict[str, Any]] = []  # attempts before the last (retries of a rate not held)
            for attempt in range(1 + plan.retries):
                again = f" (retry {attempt} of {plan.retries})" if attempt else ""
                child = bench_run(
                    name,
                    sweep_dir,
                    ["--rate", f"{rate:g}/s", "--warmup", f"{backend_warmup_s:g}s", *passthrough],
                    echo,
                    label=f"{name} at {rate:g}/s{again}: ",
                )
                interrupted = child.interrupted
                summary = None
                if child.run_dir is not None:
                    run_dirs.append(str(child.run_dir))
                    try:
                        summary = rundir.read_summary(child.run_dir)
                    except (OSError, ValueError):
                        summary = None
                if child.exit_code != 0:
                    failures.append(
                        FailedRun(
                            name,
                            child.command,
                            child.exit_code,
                            "\n".join(child.tail),
                            str(child.run_dir) if child.run_dir else None,
                        )
                    )
                if child.run_dir is not None and plan.slo_overrides.get(name) == MAX_LAG:
                    # the bound of the options the run really used (--opt may change it)
                    backend_slo_ms, slo_source = slo_for(
                        name, plan.slo_ms, plan.slo_overrides, declared_max_lag_s(name, child.run_dir)
                    )
                    backend.update(slo_p99_ms=backend_slo_ms, slo_source=slo_source)
                held, why = judge(summary, rate, backend_slo_ms, child.exit_code)
                entry = _entry(rate, child.run_dir, child.exit_code, summary, held, why)
                entry["slo_p99_ms"] = backend_slo_ms
                entry["earlier_attempts"] = earlier
                if held or interrupted or attempt == plan.retries:
                    break
                echo(f"== {name} at {rate:g}/s: not held ({why}); trying it again\n")
                earlier = earlier + [{k: v for k, v in entry.items() if k != "earlier_attempts"}]
            entries.append(entry)
            backend["rates"][rate_key(rate)] = entry
            backend["max_sustainable_rate"] = max_sustainable(entries)
            ceiling = (data["pgbench"] or {}).get("rows_per_s")
            if backend["max_sustainable_rate"] is not None and ceiling:
                backend["fraction_of_ceiling"] = backend["max_sustainable_rate"] / ceiling
            rundir.write_json(path, data)
            echo(f"== {name} at {rate:g}/s: " + ("held" if held else f"NOT held ({why})") + "\n")
            if not held:
                backend["stopped_at"] = rate
                backend["stop_reason"] = why
                break
            if interrupted:
                break
        if backend["stopped_at"] is None and not interrupted:
            backend["stop_reason"] = f"held every rate up to {rate_key(plan.rates[-1])}/s (the ceiling is higher)"
        rundir.write_json(path, data)
        if interrupted:
            break

    data["finished_at"] = time.time()
    data["complete"] = not interrupted
    html, md = sweep_dir / "report.html", sweep_dir / "report.md"
    data["report"] = {"html": str(html), "markdown": str(md)}
    rundir.write_json(path, data)
    if run_dirs:
        write_report(run_dirs, html, md, failures=failures)
    return SweepResult(data, path, html if run_dirs else None, interrupted)


def _new_sweep_dir(out_dir: Path, started: float) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(started))
    sweep_dir = out_dir / f"sweep-{stamp}"
    n = 2
    while sweep_dir.exists():
        sweep_dir = out_dir / f"sweep-{stamp}-{n}"
        n += 1
    sweep_dir.mkdir(parents=True)
    return sweep_dir


def declared_max_lag_s(name: str, run_dir: Path | None) -> float | None:
    """The backend's declared max lag (``capabilities.max_lag_s``) for the options a run used
    (its config.json), or for its defaults; None when it cannot be built offline. Building a
    scheduler connects to nothing (``setup()`` does)."""
    from schedulers.base import StoreContext, scheduler_class

    options: dict[str, Any] | None = None
    if run_dir is not None:
        try:
            options = rundir.read_config(run_dir).get("options")
        except (OSError, ValueError):
            options = None
    try:
        cls = scheduler_class(name)
        probe = StoreContext(dsn="postgresql://127.0.0.1:1/probe", schema="sweep_probe", temporal_address="127.0.0.1:1")
        for opts in ([options] if options else []) + [dict(cls.default_options)]:
            try:
                return float(cls(probe, **opts).capabilities.max_lag_s)
            except Exception:
                continue
    except Exception:
        return None
    return None


def _entry(
    rate: float, made: Path | None, code: int, summary: dict[str, Any] | None, held: bool, why: str | None
) -> dict[str, Any]:
    s = summary or {}
    lag = s.get("lag_ms") or {}
    return {
        "rate": rate,
        "run_dir": str(made) if made else None,
        "exit_code": code,
        "offered": s.get("offered_rate"),
        "achieved": s.get("achieved_rate"),
        "p50_ms": lag.get("p50"),
        "p99_ms": lag.get("p99"),
        "max_ms": lag.get("max"),
        "lost": (s.get("outcomes") or {}).get("lost"),
        "pending": (s.get("outcomes") or {}).get("pending"),
        "late": (s.get("outcomes") or {}).get("late"),
        "writes_per_fire": writes_per_fire(s) if s else None,
        "wal_bytes_per_fire": (s.get("per_fire") or {}).get("wal_bytes"),
        "held": held,
        "reason": why,
    }


def pgbench_ceiling(
    enabled: bool, dsn: str | None, duration_s: float, out_dir: Path, echo: Callable[[str], None]
) -> dict[str, Any]:
    """The pgbench ceiling as sweep.json (and capacity.json) hold it; ``skipped`` says why when
    there is none."""
    if not enabled:
        return {"skipped": "disabled by --no-pgbench", "rows_per_s": None, "results": []}
    from harness import stack
    from loadgen import pgbench

    try:
        resolved = stack.resolve(dsn, None, False, say=lambda m: echo(f"note: {m}\n")).dsn
    except BenchError as exc:
        return {"skipped": f"no Postgres for pgbench: {exc}", "rows_per_s": None, "results": []}
    try:
        bin_dir = stack.pg_bin_dir()
    except BenchError:
        bin_dir = None
    ceiling = pgbench.measure(
        resolved, pgbench.find_pgbench(bin_dir), out_dir, duration_s=duration_s, say=lambda m: echo(f"== {m}\n")
    )
    result = ceiling.to_json()
    result["command"] = redact_argv(result.get("command") or [])
    if ceiling.skipped:
        echo(f"== pgbench ceiling skipped: {ceiling.skipped}\n")
    else:
        for r in ceiling.results:
            echo(
                f"== pgbench batch {r.batch}: "
                + (
                    f"error: {r.error}"
                    if r.error
                    else f"{r.tps:,.1f} tps x {r.batch} = {r.tps_x_batch:,.0f} rows/s; re-armed {r.rearmed_per_s:,.0f} "
                    "rows/s"
                )
                + "\n"
            )
    return result
