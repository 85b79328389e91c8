"""``bench scale``: how a design's cost grows with the number of armed timers (the rules, pure, in
:mod:`harness.scale_rule`).

At a fixed fire rate the armed population steps up: the periodic timers the rate needs, and
long-horizon ones beyond them (first fires 30-60 days out, a small state, as callbacks are), a
share of which the application moves while they are armed during the window
(:mod:`loadgen.moves`). Each step is its own child ``bench run`` (:mod:`harness.child`) with its own
warm-up, on a workload file written into the scale directory ``runs/scale-<timestamp>-<name>/``;
its warm-up is the one asked for plus the time the population is expected to take to arm (at the
rate the design armed its previous step), so the window opens on an armed store. With several
``--rates`` at one population the same steps give the rate axis.

Before a step starts its disk (the Postgres data directory, the Temporal dev server's) and the
run process's memory are estimated from the design's previous step and checked against what is
free; a step that would not fit, or that would take longer than ``--arm-limit`` to arm, is
skipped with one line saying why, and so is every larger step of that design. A step that fails
(its run crashed, or hit temporal_shards' 2 MB Continue-As-New payload) is a finding at that
step, not a crash of the scale. ``scale.json`` is rewritten (atomically) after every step, so an
interrupted scale keeps its finished steps; the report (``bench report`` of the steps) has a scale
section (:mod:`reports.scale`).
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from harness import scale_rule
from harness.child import bench_run, failed_run
from harness.stack import redact_argv
from metrics import accounting, rundir

DEFAULT_WORKLOAD = "production-compressed"  # 556/s at 15-30 s intervals: 12k periodic timers
DEFAULT_RATE = 556.0
LONG_HORIZON_STATE_BYTES = 256  # a callback's payload, not a poll cursor
MOVE_SHARE = 0.001  # of the long-horizon timers, moved while armed during the window
DEFAULT_ARM_RATE = 2_000.0  # timers/s assumed for a design's first step (conservative)
ARM_MARGIN = 1.25  # the warm-up allows this much more than the expected arming time
PROJECT_POPULATION = 100_000_000
TOTALS = ("storage_bytes", "rss_bytes")  # sizes of a whole store or process: fixed + per timer


@dataclass
class ScalePlan:
    schedulers: list[str]
    populations: list[int]
    rates: list[float]  # one rate (the population axis) or several at one population (the rate axis)
    share: float | None  # None: auto, the share that fills each step at its rate
    duration: str
    warmup_s: float | None  # None: the workload's own (one maximum interval)
    workload: str = DEFAULT_WORKLOAD
    long_horizon_state_bytes: int = LONG_HORIZON_STATE_BYTES
    move_share: float = MOVE_SHARE
    project_population: int = PROJECT_POPULATION
    arm_limit_s: float = 1800.0
    extra_args: list[str] = field(default_factory=list)
    out_dir: Path = Path("runs")
    dsn: str | None = None
    temporal_address: str | None = None
    command: list[str] = field(default_factory=list)


@dataclass
class ScaleResult:
    data: dict[str, Any]
    path: Path
    html: Path | None
    interrupted: bool


def steps_of(plan: ScalePlan) -> list[tuple[int, float]]:
    """(population, rate) of every step, in order."""
    if len(plan.rates) > 1:
        return [(plan.populations[0], r) for r in plan.rates]
    return [(n, plan.rates[0]) for n in plan.populations]


def step_workload(plan: ScalePlan, population: int, rate: float) -> dict[str, Any]:
    """The step's workload as canonical fields: the base workload with this population and rate,
    the long-horizon share, their small state and the moves."""
    from loadgen.workload import load

    w = load(plan.workload)
    e = w.fires_per_trigger_s()
    share = scale_rule.auto_share(population, rate, e) if plan.share is None else plan.share
    data = asdict(w)
    for key in ("duration_s", "warmup_s", "poll_concurrency", "trace"):
        data.pop(key, None)
    data.update(
        name=f"{w.name}-scale-{population}",
        triggers=int(population),
        # auto: the rate asked for (a population just short of it, share 0: the population's own)
        rate_per_s=(min(float(rate), population * e) if share == 0 else float(rate))
        if plan.share is None
        else population * (1 - share) * e,
        long_horizon_share=float(share),
        long_horizon_state_bytes=int(plan.long_horizon_state_bytes),
        long_horizon_move_share=float(plan.move_share),
        description=(
            f"{w.name} at {rate:g} fires/s with {population:,} armed timers: "
            f"{share:.2%} long-horizon ({plan.long_horizon_state_bytes} B state), "
            f"{plan.move_share:.2%} of them moved during the window"
        ),
    )
    return data


def check_steps(plan: ScalePlan) -> None:
    """Every step's workload resolves (ValueError naming the problem), before anything runs."""
    from loadgen.workload import from_mapping

    for n, r in steps_of(plan):
        from_mapping(step_workload(plan, n, r)).resolved()


def step_args(plan: ScalePlan, workload_file: Path, warmup_s: float) -> list[str]:
    from harness.capacity import servers_and_checkpoint

    # as bench capacity: the forced CHECKPOINT at the start of the warm-up
    return [
        "--workload",
        str(workload_file),
        "--duration",
        plan.duration,
        "--warmup",
        f"{warmup_s:g}s",
        *servers_and_checkpoint(plan.dsn, plan.temporal_address, plan.extra_args),
    ]


def store_kind(scheduler: str) -> str:
    from harness.servers import scheduler_class

    cls = scheduler_class(scheduler)
    if getattr(cls, "needs_temporal", False):
        return "temporal"
    return "postgres" if getattr(cls, "needs_postgres", False) else "memory"


def store_disk(kind: str, dsn: str | None, temporal_address: str | None) -> tuple[float | None, float | None, str]:
    """(free, total, where) of the disk the design's store writes to, when it is on this machine."""
    from harness import stack

    where: Path | None = None
    if kind == "temporal":
        dev = stack.temporal()
        if dev.running() and temporal_address in (None, dev.address()):
            where = dev.db.parent
    elif kind == "postgres":
        pg = stack.postgres()
        if pg.running() and dsn in (None, pg.dsn()):
            where = pg.data
    if where is None:
        return None, None, "the store is not on this machine: its disk is not checked"
    usage = shutil.disk_usage(where)
    return float(usage.free), float(usage.total), str(where)


def available_memory() -> float:
    import psutil

    return float(psutil.virtual_memory().available)


def plan_step(
    population: int,
    kind: str,
    earlier: list[dict[str, Any]],
    disk: tuple[float | None, float | None],
    memory_available: float | None,
    state_bytes: int,
) -> scale_rule.Fit:
    """Whether the next step fits, from the design's earlier steps (pure given the readings)."""
    done = [s for s in earlier if s.get("status") in ("ok", "finding")]
    disk_pts = [(s["population"], (s.get("figures") or {}).get("storage_bytes")) for s in done]
    rss_pts = [(s["population"], (s.get("figures") or {}).get("rss_bytes")) for s in done]
    per_rss = (
        scale_rule.MEMORY_DESIGN_RSS_PER_TIMER + state_bytes if kind == "memory" else scale_rule.DEFAULT_RSS_PER_TIMER
    )
    disk_need = (
        None if kind == "memory" else scale_rule.estimate(population, disk_pts, scale_rule.DEFAULT_DISK_PER_TIMER[kind])
    )
    mem_need = scale_rule.estimate(population, rss_pts, per_rss)
    return scale_rule.check_fits(population, disk_need, disk[0], disk[1], mem_need, memory_available)


def expected_arm_s(population: int, earlier: list[dict[str, Any]]) -> tuple[float, float]:
    """(seconds, timers/s): the arming time of a step at the rate the design armed its last step."""
    rates = [((s.get("figures") or {}).get("arming") or {}).get("timers_per_s") for s in earlier]
    rates = [r for r in rates if r]
    rate = rates[-1] if rates else DEFAULT_ARM_RATE
    return population / rate, rate


# -- one step's figures, from its run directory ----------------------------------------------------


def step_figures(run_dir: Path, scheduler: str) -> dict[str, Any]:
    """Everything the scale section shows of one step, read from the run's files."""
    import numpy as np
    import pandas as pd

    s = rundir.read_summary(run_dir) if (run_dir / rundir.SUMMARY).exists() else {}
    cfg = json.loads((run_dir / rundir.CONFIG).read_text()) if (run_dir / rundir.CONFIG).exists() else {}
    w = cfg.get("workload") or {}
    window = cfg.get("window") or {}
    n = int(w.get("triggers") or 0)
    f: dict[str, Any] = {
        "complete": s.get("complete"),
        "correct": s.get("correct"),
        "failures": s.get("failures") or [],
        "offered": s.get("offered_rate"),
        "achieved": s.get("achieved_rate"),
        "rate_held": s.get("rate_held"),
        "lag_p50_ms": (s.get("lag_ms") or {}).get("p50"),
        "lag_p99_ms": (s.get("lag_ms") or {}).get("p99"),
        "lost": (s.get("outcomes") or {}).get("lost"),
        "periodic": (cfg.get("load") or {}).get("periodic_triggers"),
        "long_horizon_state_bytes": (cfg.get("load") or {}).get("long_horizon_state_bytes"),
        "arming": s.get("arming"),
        "arming_before_window": (
            None
            if not window.get("arming_end")
            else bool(window["arming_end"] <= window.get("measure_start", float("inf")))
        ),
        "moves": s.get("moves"),
        "moved_lag_p50_ms": ((s.get("moves") or {}).get("lag_ms") or {}).get("p50"),
        "moved_lag_p99_ms": ((s.get("moves") or {}).get("lag_ms") or {}).get("p99"),
        "pg_cpu_ms_per_fire": None,
        "storage_bytes": None,
        "rss_bytes": (s.get("harness") or {}).get("rss_peak_bytes"),
    }
    cpu = ((s.get("servers") or {}).get("postgres") or {}).get("per_fire", {}).get("cpu_s")
    if cpu is not None:
        f["pg_cpu_ms_per_fire"] = 1000.0 * cpu
    samples_path = run_dir / rundir.SAMPLES
    if samples_path.exists():
        df = pd.read_parquet(samples_path)
        rel = df[~df["scope"].isin(["run"]) & ~df["scope"].str.startswith(rundir.SERVER_PREFIX)]
        rel = rel[rel["metric"].isin(["table_bytes", "index_bytes"])]
        if len(rel):
            last = rel.sort_values("t").groupby(["scope", "metric"])["value"].last()
            f["storage_bytes"] = float(last.sum())
            f["storage_what"] = "table + indexes + TOAST of the design's tables at the end"
        tf = df[(df["scope"] == rundir.SERVER_PREFIX + "temporal") & (df["metric"] == "file_bytes")].sort_values("t")
        if len(tf):
            growth = float(tf["value"].iloc[-1] - tf["value"].iloc[0])
            f["temporal_store_growth_bytes"] = growth
            if f["storage_bytes"] is None or scheduler.startswith("temporal"):
                f["storage_bytes"] = (f["storage_bytes"] or 0.0) + max(0.0, growth)
                f["storage_what"] = "the design's Postgres tables + the Temporal store's growth over the run"
        shards = df[(df["scope"] == "run") & (df["metric"] == rundir.BACKEND_GAUGE + "shards")]
        if len(shards):
            f["shards"] = float(shards.sort_values("t")["value"].iloc[-1])
    report = s.get("scheduler_report")
    if report:
        limit = report.get("payload_limit_bytes") or 0.0
        hist = [v for k, v in report.items() if k.startswith("shard_") and k.endswith("_history")]
        f["temporal"] = {
            "shards": report.get("shards"),
            "max_can_payload_bytes": report.get("max_can_payload_bytes"),
            "max_payload_bytes": report.get("max_payload_bytes"),
            "payload_limit_bytes": limit or None,
            "payload_share_of_limit": (report.get("max_payload_bytes") or 0.0) / limit if limit else None,
            "splits": report.get("splits"),
            "continue_as_new": report.get("continue_as_new"),
            "max_history": max(hist) if hist else None,
            "max_history_at_continue": report.get("max_history_at_continue"),
            "forwarded": None,  # not exposed by the design's stats or its shard report
        }
        f["shards"] = report.get("shards", f.get("shards"))
    f.update(claim_cost(run_dir, scheduler))
    if n:
        if f["storage_bytes"] is not None:
            f["storage_bytes_per_timer"] = f["storage_bytes"] / n
        if f["rss_bytes"] is not None:
            f["rss_bytes_per_timer"] = f["rss_bytes"] / n
    arm = f["arming"] or {}
    if arm.get("timers") and arm.get("seconds"):
        f["arm_us_per_timer"] = 1e6 * arm["seconds"] / arm["timers"]
    return {k: (None if isinstance(v, float) and not np.isfinite(v) else v) for k, v in f.items()}


def claim_cost(run_dir: Path, scheduler: str) -> dict[str, Any]:
    """The claim statement's ms and buffers per call over the window, from ``statements.parquet``,
    the statement found as the soak finds it (:mod:`harness.soak`: the words of the design's
    ``claim_due``)."""
    import pandas as pd

    from harness.servers import scheduler_class
    from harness.soak import MATCH, claim_words, similarity, words
    from metrics.pgcost import SAMPLER_MARK

    out: dict[str, Any] = {"claim_calls": None, "claim_ms_per_call": None, "claim_buffers_per_call": None}
    path = run_dir / rundir.STATEMENTS
    target = claim_words(scheduler_class(scheduler)) if path.exists() else None
    if target is None:
        return out
    st = pd.read_parquet(path)
    calls = ms = blocks = 0.0
    for r in st.itertuples(index=False):
        q = r.query or ""
        if SAMPLER_MARK in q or "pgbench_" in q or similarity(target, words(q)) < MATCH:
            continue
        calls += float(r.calls or 0)
        ms += float(r.total_exec_ms or 0)
        blocks += float(r.shared_blks_hit or 0) + float(r.shared_blks_read or 0)
    if calls:
        out.update(claim_calls=calls, claim_ms_per_call=ms / calls, claim_buffers_per_call=blocks / calls)
    return out


def limit_of(figures: dict[str, Any], exit_code: int, tail: list[str]) -> str | None:
    """The limit a finished step hit, in one line, or None."""
    t = figures.get("temporal") or {}
    share = t.get("payload_share_of_limit")
    if share is not None and share >= 1.0:
        return (
            f"Continue-As-New payload {t['max_payload_bytes']:,.0f} B reached the "
            f"{t['payload_limit_bytes']:,.0f} B limit"
        )
    if exit_code not in (0, accounting.EXIT_INCORRECT):
        last = next((line for line in reversed(tail) if line.strip()), "")
        return f"the step's run failed (exit {exit_code}){': ' + last.strip()[:200] if last else ''}"
    return None


def findings_of(figures: dict[str, Any]) -> list[str]:
    """What a step that ran to the end says beside its figures (not limits)."""
    out = []
    if figures.get("arming_before_window") is False:
        out.append("the population was still arming when the window opened: the window includes arming load")
    if figures.get("correct") is False:
        out.append("incorrect: " + "; ".join(figures.get("failures") or []))
    if figures.get("rate_held") is False:
        out.append(f"did not hold the rate (achieved {figures.get('achieved') or 0:,.0f}/s)")
    return out


def fits_of(steps: list[dict[str, Any]], axis: str, project: float | None) -> dict[str, Any]:
    """The log-log fit of every series against the axis (population or rate) over the finished steps."""
    done = [s for s in steps if s.get("status") in ("ok", "finding")]
    out: dict[str, Any] = {}
    from reports.scale import SERIES

    for key, _ in SERIES:
        xs = [s[axis] for s in done]
        ys = [(s.get("figures") or {}).get(key) for s in done]
        pts = [(x, y) for x, y in zip(xs, ys) if isinstance(y, (int, float))]
        fit = scale_rule.fit_loglog(
            [p[0] for p in pts],
            [p[1] for p in pts],
            project if axis == "population" else None,
            total=key in TOTALS and axis == "population",
        )
        if fit is not None:
            out[key] = fit
    return out


# -- the scale --------------------------------------------------------------------------------------


def run_scale(plan: ScalePlan, echo: Callable[[str], None]) -> ScaleResult:
    from reports.report import FailedRun

    started = time.time()
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(started))
    name = plan.schedulers[0] if len(plan.schedulers) == 1 else "all"
    out = plan.out_dir / f"scale-{stamp}-{name}"
    k = 2
    while out.exists():
        out, k = plan.out_dir / f"scale-{stamp}-{name}-{k}", k + 1
    out.mkdir(parents=True)
    axis = "rate" if len(plan.rates) > 1 else "population"
    steps = steps_of(plan)
    data: dict[str, Any] = {
        "started_at": started,
        "finished_at": None,
        "complete": False,
        "command": ["bench", *redact_argv(plan.command)],
        "axis": axis,
        "populations": plan.populations,
        "rates": plan.rates,
        "long_horizon_share": "auto" if plan.share is None else plan.share,
        "long_horizon_state_bytes": plan.long_horizon_state_bytes,
        "move_share": plan.move_share,
        "workload": plan.workload,
        "duration": plan.duration,
        "warmup_s": plan.warmup_s,
        "project_population": plan.project_population,
        "arm_limit_s": plan.arm_limit_s,
        "extra_args": redact_argv(list(plan.extra_args)),
        "rule": (
            "each step is its own bench run with its own warm-up (the one asked for plus the expected arming "
            "time); before it, its disk and memory are estimated from the design's previous step and checked "
            "against what is free; a step that does not fit, would arm longer than the arm limit, or fails, is "
            "that design's limit, and its larger steps are not run; the fits are least-squares lines on log-log "
            "axes (harness/scale_rule.py)"
        ),
        "designs": {s: {"steps": [], "fits": {}, "limit": None} for s in plan.schedulers},
    }
    path = out / rundir.SCALE
    rundir.write_json(path, data)
    echo(
        f"scale {out}: {', '.join(plan.schedulers)}; "
        + (
            f"populations {', '.join(f'{n:,}' for n in plan.populations)} at {plan.rates[0]:g} fires/s"
            if axis == "population"
            else f"rates {', '.join(f'{r:g}/s' for r in plan.rates)} at {plan.populations[0]:,} timers"
        )
        + f"; {plan.duration} measured per step\n"
    )
    run_dirs: list[str] = []
    failures: list[FailedRun] = []
    interrupted = False
    memory_available = available_memory()
    for scheduler in plan.schedulers:
        design = data["designs"][scheduler]
        kind = store_kind(scheduler)
        for i, (population, rate) in enumerate(steps):
            step: dict[str, Any] = {"population": population, "rate": rate, "run_dir": None, "figures": {}}
            design["steps"].append(step)
            if design["limit"] is not None:
                step.update(status="not run", why=f"after the limit at {design['limit']['at']}")
                continue
            wl = step_workload(plan, population, rate)
            step["long_horizon_share"] = wl["long_horizon_share"]
            free, total, where = store_disk(kind, plan.dsn, plan.temporal_address)
            fit = plan_step(
                population, kind, design["steps"][:-1], (free, total), memory_available, plan.long_horizon_state_bytes
            )
            step["fit"] = {**fit.to_json(), "disk_where": where}
            arm_s, arm_rate = expected_arm_s(population, design["steps"][:-1])
            step["expected_arm_s"] = arm_s
            label = f"{scheduler} at {population:,} timers, {rate:g}/s: "
            why = fit.why
            if why is None and arm_s > plan.arm_limit_s:
                why = (
                    f"arming {population:,} timers would take about {arm_s / 60:.0f} min at {arm_rate:,.0f} timers/s "
                    f"(the previous step's), more than the arm limit of {plan.arm_limit_s / 60:.0f} min: skipped"
                )
            if why is not None:
                step.update(status="skipped", why=why)
                design["limit"] = {"at": f"{population:,} timers at {rate:g}/s", "why": why}
                echo(f"== {label}{why}\n")
                rundir.write_json(path, data)
                continue
            wfile = out / f"workload-{scheduler}-{i + 1}-{population}.yaml"
            wfile.write_text(yaml.safe_dump(wl, sort_keys=False))
            base_warmup = plan.warmup_s if plan.warmup_s is not None else _workload_warmup(plan.workload)
            warmup_s = base_warmup + ARM_MARGIN * arm_s
            step["warmup_s"] = warmup_s
            t0 = time.time()
            child = bench_run(scheduler, out, step_args(plan, wfile, warmup_s), echo, label=label)
            step["seconds"] = time.time() - t0
            step["exit_code"] = child.exit_code
            if child.run_dir is not None:
                run_dirs.append(str(child.run_dir))
                step["run_dir"] = str(child.run_dir)
            if child.exit_code not in (0, accounting.EXIT_INCORRECT):
                failures.append(failed_run(scheduler, child))
            if child.interrupted:
                interrupted = True
                step.update(status="interrupted", why="interrupted (SIGINT)")
                rundir.write_json(path, data)
                break
            figures = step_figures(child.run_dir, scheduler) if child.run_dir is not None else {}
            step["figures"] = figures
            limit = limit_of(figures, child.exit_code, child.tail)
            found = findings_of(figures)
            if limit is not None:
                step.update(status="limit", why=limit)
                design["limit"] = {"at": f"{population:,} timers at {rate:g}/s", "why": limit}
            else:
                step.update(status="finding" if found else "ok", why="; ".join(found) or None)
            design["fits"] = fits_of(design["steps"], axis, plan.project_population)
            echo(f"== {label}{step['status']}" + (f" ({step['why']})" if step.get("why") else "") + "\n")
            rundir.write_json(path, data)
        if interrupted:
            break
    from harness.capacity import finish

    return ScaleResult(data, path, finish(data, path, run_dirs, failures, interrupted), interrupted)


def _workload_warmup(spec: str) -> float:
    from loadgen.workload import load

    w = load(spec)
    return float(w.warmup_s if w.warmup_s is not None else w.interval_max_s)
