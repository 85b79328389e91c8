"""The accounting of a run: what its files say happened, as figures (``summary.json``).

The run directory's format is :mod:`metrics.rundir`'s; this module reads it and computes.

**The four outcomes** (:func:`fire_accounting`, docs/design.md, "Measuring honestly"). A fire is due in
the window when ``max(due_at, armed_at)`` (when it became due in the store, where the lag clock
starts) lies in ``[measure_start, measure_end)``. Each ``(timer_id, due_at)`` key due in the
window is exactly one of: **on time** (first delivery's lag <= the workload's ``on_time_s``),
**late** (delivered later, with its real lag), **pending** (never delivered, still held by the
backend after the drain: a backlog) or **lost** (never delivered and no longer held: a failing
run). Lag percentiles cover every key due in the window; an undelivered one is infinitely late,
so a percentile that falls among them is :data:`NOT_DELIVERED`. A delivery before its due time
is **early** (counted, its negative lag kept). The offered rate is the keys due in the window per
second; the achieved rate the keys first delivered in the window per second.

Windows: performance figures (rates, lag, per-fire writes, HOT ratio) cover the measured window
only; correctness figures (lost, early, duplicate fires, duplicate effects) cover the whole run,
warm-up included, because a lost or doubled fire is never a warm-up artefact.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from metrics.bill import cost_figures, cost_warnings, run_metric_mean, table_figures
from metrics.neighbour import neighbour_summary, readers_summary
from metrics.neighbour import problems as neighbour_problems
from metrics.rundir import (
    BACKEND_GAUGE,
    BATCH_BIN_WIDTH_GAUGE,
    BATCH_SIZE_BIN_GAUGE,
    BATCHES_CLOSED_GAUGE,
    SUMMARY,
    read_config,
    read_fires,
    read_samples,
    run_state,
)
from metrics.soak import soak_analysis

RATE_HELD_SHARE = 0.95  # achieved below 95% of offered, or offered below 95% of target: rate not held


NOT_DELIVERED = "not delivered"  # a lag percentile that falls among fires never delivered


EARLY_TOLERANCE_S = 0.001  # a delivery this much before its due time is early (microsecond rounding, one clock)


STEADY_STATE_CYCLES = 2.0  # fires due per trigger in the window, at least, for a steady-state window


PERCENTILES = (("p50", 50.0), ("p90", 90.0), ("p99", 99.0), ("p999", 99.9))


EXIT_INCORRECT = 4  # bench run's exit code when a complete run lost a fire or duplicated a keyed effect


def batch_sizes_in_window(samples: Any, start: float, end: float) -> dict[str, Any] | None:
    """The batches a backend handed to its processors between ``start`` and ``end`` (epoch s),
    from its cumulative batch-size gauges (:class:`schedulers.base.BatchSizes`) in the samples
    (a data frame with ``t, scope, metric, value``): each counter's last sample at or before
    ``end`` less its last at or before ``start`` (0 before its first sample).

    Returns ``{"batches", "timers", "mean", "bins": {upper edge: batches}, "closed": {reason:
    batches}, "bin_width"}`` (bin width in timers) or None when the run has no such gauges (a backend that does not
    count its batches, or a run whose batches ran in ``--nodes`` processes)."""
    if samples is None or len(samples) == 0:
        return None
    t = np.asarray(samples["t"], dtype="float64")
    scope = np.asarray(samples["scope"], dtype=object)
    metric = np.asarray(samples["metric"], dtype=object)
    value = np.asarray(samples["value"], dtype="float64")
    run = scope == "run"
    wanted = (f"{BACKEND_GAUGE}batches", f"{BACKEND_GAUGE}batched_timers", f"{BACKEND_GAUGE}{BATCH_BIN_WIDTH_GAUGE}")
    prefixes = (f"{BACKEND_GAUGE}{BATCH_SIZE_BIN_GAUGE}", f"{BACKEND_GAUGE}{BATCHES_CLOSED_GAUGE}")
    names = {m for m in set(metric[run].tolist()) if m in wanted or m.startswith(prefixes)}
    if f"{BACKEND_GAUGE}batches" not in names:
        return None

    def delta(name: str) -> float:
        sel = run & (metric == name)
        ts, vs = t[sel], value[sel]
        order = np.argsort(ts, kind="stable")
        ts, vs = ts[order], vs[order]
        i_end = np.searchsorted(ts, end, side="right") - 1
        i_start = np.searchsorted(ts, start, side="right") - 1
        at_end = vs[i_end] if i_end >= 0 else 0.0
        at_start = vs[i_start] if i_start >= 0 else 0.0
        return float(at_end - at_start)

    bins = {int(n[len(prefixes[0]) :]): delta(n) for n in names if n.startswith(prefixes[0])}
    closed = {n[len(prefixes[1]) :]: delta(n) for n in names if n.startswith(prefixes[1])}
    batches = delta(wanted[0])
    timers = delta(wanted[1])
    widths = value[run & (metric == wanted[2])]
    return {
        "batches": batches,
        "timers": timers,
        "mean": timers / batches if batches > 0 else None,
        "bins": {edge: n for edge, n in sorted(bins.items()) if n > 0},
        "closed": {reason: n for reason, n in sorted(closed.items()) if n > 0},
        "bin_width": float(widths[-1]) if len(widths) else None,
    }


def recorded_until(fires: pa.Table, samples: pa.Table) -> tuple[float | None, float | None]:
    """The last fire received and the last sample taken (epoch s; None when there is none)."""
    import pyarrow.compute as pc

    last_fire = pc.max(fires.column("fired_at")).as_py() if len(fires) else None
    last_sample = pc.max(samples.column("t")).as_py() if len(samples) else None
    return last_fire, last_sample


def interrupted_summary(run_dir: str | Path, state: str | None = None) -> dict[str, Any]:
    """The summary of a run without ``summary.json``, recomputed from what it recorded: marked
    incomplete, its window cut where its fire log ends, its undelivered fires (pending or lost)
    not judged."""
    run_dir = Path(run_dir)
    state = state or run_state(run_dir)
    cfg = read_config(run_dir)
    window = cfg.get("window") or {}
    start = float(window.get("arm_start", cfg.get("started_at") or 0.0))
    last_fire, last_sample = recorded_until(read_fires(run_dir), read_samples(run_dir))
    known = [x for x in (last_fire, last_sample) if x is not None]
    if not known:
        reason = f"{state} before it recorded anything (no {SUMMARY})"
        return compute_summary(run_dir, complete=False, incomplete_reason=reason, stopped_at=start)
    at = f"T+{max(known) - start:.0f} s"
    if state == "running":
        reason = f"still running: {at} recorded so far (no {SUMMARY} yet)"
    else:
        reason = f"interrupted at {at} (no {SUMMARY}: figures recomputed from what it recorded)"
    return compute_summary(
        run_dir,
        complete=False,
        incomplete_reason=reason,
        stopped_at=last_fire if last_fire is not None else last_sample,
    )


def fire_keys(ids: np.ndarray, due: np.ndarray) -> np.ndarray:
    """(timer_id, due_at) keys; due at microseconds, the resolution every store keeps."""
    due_us = np.rint(due * 1e6).astype(np.int64)
    return np.char.add(np.char.add(ids.astype(str), "@"), due_us.astype(str))


def duplicates(ids: np.ndarray, due: np.ndarray) -> int:
    """Rows beyond the first of each (timer_id, due_at) key."""
    if len(ids) == 0:
        return 0
    return int(len(ids) - len(np.unique(fire_keys(ids, due))))


def how_to_read(summary: dict[str, Any]) -> str:
    """Two or three sentences on the cadence, the window and the four outcomes of a run, for the
    end-of-run table and the report (README says the same)."""
    on_time = summary.get("on_time_s") or 10.0
    if summary.get("cadence") == "after-poll":
        load = (
            "Load is closed-loop (after-poll cadence: next due = poll end + interval), so a lagging backend "
            "is offered fewer fires; the offered rate shows by how much."
        )
    else:
        load = (
            "Load is open-loop (fixed cadence: next due = previous due + interval; a fire more than one "
            "interval late fires once and realigns, the skipped periods counted), so a slow backend falls "
            "behind instead of being offered less."
        )
    warm = summary.get("warmup_s")
    warm_text = "a warm-up" if warm is None else f"a {warm:g} s warm-up"
    return (
        f"{load} The window counts every fire that became due in it, after {warm_text} (by default one "
        f"maximum interval, so every trigger has re-armed); then arming stops and the run drains. "
        f"Each of those fires is on time (lag <= "
        f"{on_time:g} s, one bound for every backend), late (delivered later, with its real lag), pending "
        f"(still held by the backend after the drain: a backlog) or lost (never delivered and no longer "
        f"held: the run fails); lag percentiles cover all of them, an undelivered fire as infinitely late."
    )


def lag_percentiles_ms(lags_s: np.ndarray) -> dict[str, float | str | None]:
    """Nearest-rank percentiles (and the max) of lags in seconds, in ms; ``inf`` is a fire never
    delivered and reads :data:`NOT_DELIVERED`; None for no fires at all. Exact (no histogram), so
    an early fire's negative lag stays negative."""
    v = np.sort(np.asarray(lags_s, dtype=np.float64))
    out: dict[str, float | str | None] = {}
    for key, pct in (*PERCENTILES, ("max", 100.0)):
        if len(v) == 0:
            out[key] = None
            continue
        x = float(v[max(0, int(math.ceil(pct / 100.0 * len(v))) - 1)])
        out[key] = x * 1000.0 if math.isfinite(x) else NOT_DELIVERED
    return out


def _column(fires: pa.Table, name: str, dtype) -> np.ndarray:
    if len(fires) == 0:
        return np.zeros(0, dtype)
    return fires.column(name).to_numpy(zero_copy_only=False).astype(dtype)


def first_deliveries(fires: Any) -> Any:
    """One row per ``(timer_id, due_at)`` key of a fire log (a data frame with its columns):
    the key's first delivery, or its undelivered row, with ``due_us`` (the key's due time at
    the microseconds every store keeps) and ``due_eff`` = max(due_at, armed_at), when it became
    due in the store (where the lag clock starts). The accounting and the reports both read
    keys through this one de-duplication."""
    due = fires["due_at"].to_numpy(dtype=np.float64)
    d = fires.assign(
        due_us=np.rint(due * 1e6).astype(np.int64),
        due_eff=np.fmax(due, fires["armed_at"].to_numpy(dtype=np.float64)),
    )
    return d.sort_values("fired_at", na_position="last", kind="stable").drop_duplicates(["timer_id", "due_us"])


def fire_accounting(fires: pa.Table, measure_start: float, measure_end: float, on_time_s: float) -> dict[str, Any]:
    """Outcomes, rates' numerators and lag of the fires due in ``[measure_start, measure_end)``,
    and the whole run's correctness counts, from ``fires.parquet`` alone (see the module
    docstring). Pure: the tests recompute every figure with it and without it."""
    import pandas as pd

    n = len(fires)
    fired_at = _column(fires, "fired_at", np.float64)  # null (never delivered) reads as NaN
    due = _column(fires, "due_at", np.float64)
    armed = _column(fires, "armed_at", np.float64)
    lag = _column(fires, "lag_s", np.float64)
    attempt = _column(fires, "attempt", np.int64)
    effect = _column(fires, "effect_delivered", bool)
    external = _column(fires, "external_effect", bool)
    held = np.asarray(fires.column("held_at_end").to_pylist(), dtype=object) if n else np.zeros(0, object)
    ids = np.asarray(fires.column("timer_id").to_pylist(), dtype=object) if n else np.zeros(0, object)
    delivered = ~np.isnan(fired_at)

    first = first_deliveries(
        pd.DataFrame(
            {"timer_id": ids, "due_at": due, "armed_at": armed, "fired_at": fired_at, "lag_s": lag, "held": held}
        )
    )
    got = first["fired_at"].notna().to_numpy()
    due_eff = first["due_eff"].to_numpy()
    key_lag = np.where(got, first["lag_s"].to_numpy(), np.inf)
    key_held = first["held"].to_numpy()
    in_window = (due_eff >= measure_start) & (due_eff < measure_end)
    before_window = due_eff < measure_start
    w_lag = key_lag[in_window]
    w_got = got[in_window]
    w_held = key_held[in_window]
    late = w_got & (w_lag > on_time_s)
    not_held = np.array([h is False for h in w_held], bool)
    unknown = np.array([h is None for h in w_held], bool) & ~w_got
    first_fired = first["fired_at"].to_numpy()
    outcomes = {
        "due": int(in_window.sum()),
        "on_time": int((w_got & ~late).sum()),
        "late": int(late.sum()),
        "pending": int((~w_got & ~not_held).sum()),
        "lost": int((~w_got & not_held).sum()),
    }
    warm_held = key_held[before_window & ~got]
    return {
        "outcomes": outcomes,
        "undelivered_unjudged": int(unknown.sum()),
        "lost_in_warmup": int(sum(1 for h in warm_held if h is False)),
        "pending_from_warmup": int(sum(1 for h in warm_held if h is not False)),
        "lag_ms": lag_percentiles_ms(w_lag),
        "delivered_in_window": int(((first_fired >= measure_start) & (first_fired < measure_end)).sum()),
        "early": int((delivered & (lag < -EARLY_TOLERANCE_S)).sum()),
        "redelivered_fires": int((delivered & (attempt > 1)).sum()),
        "duplicate_fires": duplicates(ids[delivered], due[delivered]),
        "duplicate_effects": duplicates(ids[effect], due[effect]),
        "external_effects": int(external.sum()),
        "duplicate_external_effects": duplicates(ids[external], due[external]),
    }


def rate_held(target: float | None, offered: float | None, achieved: float | None) -> tuple[bool | None, list[str]]:
    """(held, why not): the achieved rate against the offered one **and** the offered rate
    against the target, each at :data:`RATE_HELD_SHARE`. None when a rate is unknown."""
    if not target or offered is None or achieved is None:
        return None, []
    why = []
    if offered < RATE_HELD_SHARE * target:
        why.append(f"offered {offered:.1f} fires/s, {100 * offered / target:.0f}% of the target {target:.1f} fires/s")
    if achieved < RATE_HELD_SHARE * offered:
        why.append(
            f"achieved {achieved:.1f} fires/s, {100 * achieved / offered:.0f}% of the {offered:.1f} fires/s offered"
        )
    return not why, why


def compute_summary(
    run_dir: str | Path,
    complete: bool = True,
    incomplete_reason: str | None = None,
    stopped_at: float | None = None,
) -> dict[str, Any]:
    """The summary, recomputed from ``config.json``, ``fires.parquet`` and ``samples.parquet``.

    ``stopped_at``: the run was killed and its records end there (:func:`interrupted_summary`):
    the window is cut at that moment, and unless the run wrote its undelivered fires, whether any
    fire was pending or lost is not judged (those counts and the offered rate are None, the lag
    percentiles cover the delivered fires only, and say so): a killed run never compared what it
    armed with what fired, nor asked the backend what it still held."""
    run_dir = Path(run_dir)
    cfg = read_config(run_dir)
    window = cfg.get("window", {})
    workload = cfg.get("workload", {})
    load = cfg.get("load") or {}
    measure_start = float(window.get("measure_start", 0.0))
    measure_end = float(window.get("measure_end", measure_start))
    if stopped_at is not None:  # (just past it, so that its last batch counts)
        measure_end = max(measure_start, min(measure_end, float(np.nextafter(float(stopped_at), math.inf))))
    arm_start = float(window.get("arm_start", measure_start))
    measured_s = max(0.0, measure_end - measure_start)
    warmup_s = max(0.0, measure_start - arm_start)
    on_time_s = float(workload.get("on_time_s") or 10.0)

    fires = read_fires(run_dir)
    acc = fire_accounting(fires, measure_start, measure_end, on_time_s)
    outcomes = acc["outcomes"]
    n_fires = acc["delivered_in_window"]
    # killed before it wrote its undelivered fires: pending and lost are not judged, not zero
    judged = stopped_at is None or bool(len(fires)) and fires.column("fired_at").null_count > 0
    if not judged:  # (lag percentiles then cover the delivered fires due in the window only)
        outcomes = {**outcomes, "due": None, "pending": None, "lost": None}
        acc = {**acc, "lost_in_warmup": None}

    samples = read_samples(run_dir)
    tables = table_figures(samples, measure_start, measure_end, n_fires)
    measurement = cfg.get("measurement") or {}
    unavailable = dict(measurement.get("unavailable") or {})
    costs = cost_figures(run_dir, tables, n_fires, unavailable)

    target = workload.get("rate_per_s")
    achieved = n_fires / measured_s if measured_s > 0 else None
    offered = outcomes["due"] / measured_s if measured_s > 0 and outcomes["due"] is not None else None
    held, not_held = rate_held(target, offered, achieved)
    claim_rate = run_metric_mean(samples, "claims_per_s", measure_start, measure_end)

    triggers = load.get("periodic_triggers")
    if triggers is None and workload.get("triggers"):
        triggers = float(workload["triggers"]) * (1.0 - float(workload.get("long_horizon_share") or 0.0))
    cycles = outcomes["due"] / float(triggers) if triggers and outcomes["due"] is not None else None
    interval_max_s = load.get("interval_max_s", workload.get("interval_max_s"))
    not_steady = []
    if cycles is not None and cycles < STEADY_STATE_CYCLES:
        not_steady.append(
            f"{cycles:.2f} cycles per trigger in the window (steady state needs >= {STEADY_STATE_CYCLES:g})"
        )
    if interval_max_s is not None and warmup_s < float(interval_max_s) - 1e-6:
        not_steady.append(
            f"warm-up {warmup_s:.1f} s is shorter than the longest interval ({float(interval_max_s):.1f} s): "
            f"some triggers had not re-armed when the window opened"
        )
    # seconds the population's arm ran into the window (None: it ended before, or is unknown):
    # the window then carries the arm's writes, and the first fires of timers armed after they
    # were due, so its CPU and lag figures are not the design's steady state
    arming_end = window.get("arming_end")
    arming_into = None
    if arming_end is not None and float(arming_end) > measure_start + 1e-6:
        arming_into = into = min(float(arming_end), measure_end) - measure_start
        not_steady.append(
            f"the population was still being armed {into:.1f} s into the {measured_s:.0f} s window"
            + (" (arming had not finished when it closed)" if float(arming_end) >= measure_end else "")
            + ": its writes and late first fires are in the window's figures; a longer --warmup or a lower rate"
        )
    skipped = load.get("skipped_periods_in_window")

    lost = (outcomes["lost"] or 0) + (acc["lost_in_warmup"] or 0)
    failures = []
    if lost:
        failures.append(f"{lost:,} fires lost (due, never delivered, no longer held by the backend)")
    if acc["duplicate_effects"]:
        failures.append(
            f"{acc['duplicate_effects']:,} duplicate keyed effects (one (timer_id, due_at) committed twice)"
        )

    warnings: list[str] = []
    if not complete:
        warnings.append(f"incomplete run: {incomplete_reason or 'stopped early'}; figures cover what was recorded")
    for f in failures:
        warnings.append(f"FAILED: {f}")
    if not_held:
        text = "rate not held: " + "; ".join(not_held)
        if skipped:
            text += f" ({skipped:,} periods skipped: fires more than one interval late)"
        warnings.append(text)
    if not judged:
        warnings.append(
            "pending and lost fires not judged: the run was killed before it compared what it armed "
            "with what fired; its lag percentiles cover the delivered fires only"
        )
    if outcomes["pending"]:
        warnings.append(
            f"{outcomes['pending']:,} fires due in the window still pending after the "
            f"{float(window.get('drained_s') or 0):.0f} s drain (a backlog the backend still holds)"
        )
    if acc["undelivered_unjudged"]:
        warnings.append(
            f"lost not judged for {acc['undelivered_unjudged']:,} undelivered fires: the backend could not "
            f"say what it still holds (counted as pending)"
        )
    if acc["early"]:
        warnings.append(f"{acc['early']:,} fires delivered before their due time (early; lag kept negative)")
    if not_steady:
        warnings.append("not steady state: " + "; ".join(not_steady))
    neighbour = neighbour_summary(run_dir, measure_start, measure_end)
    if neighbour and neighbour.get("error"):
        warnings.append(f"neighbour: {neighbour['error']}")
    warnings.extend(neighbour_problems(neighbour))
    if measured_s <= 0 and complete:
        warnings.append("empty measured window")

    return {
        "complete": bool(complete),
        "incomplete_reason": None if complete else (incomplete_reason or "stopped early"),
        "correct": not failures if judged or failures else None,
        "failures": failures,
        "scheduler": cfg.get("scheduler"),
        "workload_name": workload.get("name"),
        "cadence": workload.get("cadence", "after-poll"),
        "target_rate": target,
        "offered_rate": offered,
        "achieved_rate": achieved,
        "rate_held": held,
        "claim_rate": claim_rate,
        "measured_s": measured_s,
        "warmup_s": warmup_s,
        "drained_s": window.get("drained_s"),
        "cycles_per_trigger": cycles,
        "arming_into_window_s": arming_into,
        "steady_state": None if cycles is None else not not_steady,
        "on_time_s": on_time_s,
        "outcomes": outcomes,
        "lost_in_warmup": acc["lost_in_warmup"],
        "skipped_periods": skipped,
        "lag_ms": acc["lag_ms"],
        "fires": n_fires,
        "early": acc["early"],
        "redelivered_fires": acc["redelivered_fires"],
        "duplicate_fires": acc["duplicate_fires"],
        "duplicate_effects": acc["duplicate_effects"],
        "external_effects": acc["external_effects"],
        "duplicate_external_effects": acc["duplicate_external_effects"],
        **tables,
        **costs,
        "harness": harness_cpu(cfg, measured_s, n_fires),
        "neighbour": neighbour,
        "readers": readers_summary(run_dir),
        "soak": _soak(run_dir, measure_start, measure_end, complete),
        "unavailable": unavailable,
        "warnings": warnings,
        # what the reader of the cost figures must know (they are shown as warnings in the
        # report), kept apart from the run's own problems above
        "measurement_notes": cost_warnings(window, tables, costs),
    }


def _soak(run_dir: Path, start: float, end: float, complete: bool) -> dict[str, Any] | None:
    """``bench soak``'s trends (:mod:`metrics.soak`), marked interrupted when the run did not finish."""
    analysis = soak_analysis(run_dir, start, end)
    if analysis is None:
        return None
    return {"state": "complete" if complete else "interrupted", **analysis}


def harness_cpu(cfg: dict[str, Any], measured_s: float, fires: int) -> dict[str, Any] | None:
    """The run process's CPU over the measured window: seconds, cores (of one: the harness is one
    Python process, so 1.0 is its ceiling) and milliseconds per fire delivered in the window.
    ``claim_loops_in_process`` is False for ``--nodes`` runs, whose claim loops and simulated
    provider spend their CPU in the node processes instead."""
    window = cfg.get("window") or {}
    start, end = window.get("harness_cpu_start_s"), window.get("harness_cpu_end_s")
    if start is None or end is None or measured_s <= 0:
        return None
    cpu_s = max(0.0, float(end) - float(start))
    return {
        "cpu_s": round(cpu_s, 3),
        "cores": round(cpu_s / measured_s, 3),
        "cpu_ms_per_fire": round(1000 * cpu_s / fires, 4) if fires else None,
        "claim_loops_in_process": not window.get("nodes"),
    }
