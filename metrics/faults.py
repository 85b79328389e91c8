"""Fault figures for the summary: what each injected fault cost, from ``fires.parquet`` and the
spans ``bench run --fault`` recorded in ``faults.json`` (see :mod:`harness.faults`).

Every figure of a fault is about the fires **due** in its window -- from ``max_lag_s`` before
its start until ``max_lag_s`` before the next fault that starts after it has ended (or the end
of the run) -- because a fire is hurt by what happens between its due time and its delivery: a
batch lost in a crash at 30 s is redelivered (late, and twice) long after, but it belongs to the
crash. Overlapping faults (a snapshot held across a restart) share fires and say so in
``overlaps``. "Due" is ``max(due_at, armed_at)``, where the lag clock starts.

``lost`` / ``pending``
    fires due in the window that never came (rows of ``fires.parquet`` with a null
    ``fired_at``): lost when the backend no longer held them at the end (must be 0), pending
    when it still did (a backlog the run's drain did not clear).
``duplicate_fires`` / ``duplicate_effects`` / ``duplicate_external_effects``
    second and later deliveries (committed keyed effects, external effects) of a
    ``(timer_id, due_at)`` key due in the window: at-least-once shows in the first and last,
    never in the keyed effects.
``lag_peak_ms``
    the largest lag of a fire due in the window.
``time_to_recover_s``
    seconds from the fault's end until the delivery of the last fire due in the window whose
    lag exceeded the scheduler's declared ``capabilities.max_lag_s`` (0 when none did, or when
    they had all arrived by the time the fault ended); None when no fire at all was delivered
    within the bound after it (lag never came back under the bound within the run).
``dead_tuples`` (hold-snapshot)
    per relation (sampler scope, TOAST tables as ``schema.table#toast``): ``start`` and
    ``release``, ``n_dead_tup`` when the snapshot was taken and when it was released (read by the
    fault itself), and ``lowest_after`` / ``lowest_after_s``, the lowest ``n_dead_tup`` the
    sampler read after the release and how many seconds after it (None without such a sample):
    what vacuum and page pruning took away once the horizon moved.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from metrics.rundir import FAULTS as FAULTS_FILE


def read_faults(run_dir: str | Path) -> dict[str, Any] | None:
    path = Path(run_dir) / FAULTS_FILE
    if not path.exists():
        return None
    return json.loads(path.read_text())


def fault_spans(run_dir: str | Path) -> list[tuple[str, float, float]]:
    """(spec, start, end) in epoch seconds of every fault that fired, for plots."""
    data = read_faults(run_dir) or {}
    return [
        (f["text"], float(f["start"]), float(f["end"] if f.get("end") is not None else f["start"]))
        for f in data.get("faults", [])
        if f.get("start") is not None
    ]


def _later_dups(keys: np.ndarray, fired_at: np.ndarray) -> np.ndarray:
    """True for every row that is not the first (by fired_at) of its key."""
    out = np.zeros(len(keys), bool)
    if len(keys) == 0:
        return out
    order = np.lexsort((fired_at, keys))
    k = keys[order]
    later = np.r_[False, k[1:] == k[:-1]]
    out[order] = later
    return out


def fault_summary(run_dir: str | Path) -> list[dict[str, Any]] | None:
    """The summary's ``faults`` (None for a run without ``--fault``)."""
    from metrics.accounting import fire_keys
    from metrics.rundir import read_fires

    data = read_faults(run_dir)
    if data is None:
        return None
    bound_s = float(data["max_lag_s"])
    arm_start = float(data.get("arm_start") or 0.0)
    fires = read_fires(run_dir)
    n = len(fires)
    fired_at = fires.column("fired_at").to_numpy(zero_copy_only=False).astype(np.float64) if n else np.zeros(0)
    lag_s = fires.column("lag_s").to_numpy(zero_copy_only=False).astype(np.float64) if n else np.zeros(0)
    due = fires.column("due_at").to_numpy(zero_copy_only=False).astype(np.float64) if n else np.zeros(0)
    ids = np.asarray(fires.column("timer_id").to_pylist(), dtype=object) if n else np.array([], dtype=object)
    effect = fires.column("effect_delivered").to_numpy(zero_copy_only=False).astype(bool) if n else np.zeros(0, bool)
    external = fires.column("external_effect").to_numpy(zero_copy_only=False).astype(bool) if n else np.zeros(0, bool)
    not_held = np.array([h is False for h in fires.column("held_at_end").to_pylist()], bool) if n else np.zeros(0, bool)
    armed = fires.column("armed_at").to_numpy(zero_copy_only=False).astype(np.float64) if n else np.zeros(0)
    due_eff = np.fmax(due, armed)  # where the lag clock starts
    got = ~np.isnan(fired_at)
    keys = fire_keys(ids, due) if n else np.array([], dtype=str)
    dup_fire = np.zeros(n, bool)
    dup_fire[got] = _later_dups(keys[got], fired_at[got])
    dup_effect = np.zeros(n, bool)
    dup_effect[effect] = _later_dups(keys[effect], fired_at[effect])
    dup_external = np.zeros(n, bool)
    dup_external[external] = _later_dups(keys[external], fired_at[external])

    fired = [f for f in data.get("faults", []) if f.get("start") is not None]

    def end_of(g: dict[str, Any]) -> float:
        return float(g["end"]) if g.get("end") is not None else float(g["start"])

    out: list[dict[str, Any]] = []
    for f in data.get("faults", []):
        row: dict[str, Any] = {
            "spec": f["text"],
            "kind": f["kind"],
            "fired": f.get("start") is not None,
            "note": f.get("note", ""),
        }
        if not row["fired"]:
            out.append(row)
            continue
        start, end = float(f["start"]), end_of(f)
        nxt = [float(g["start"]) for g in fired if g is not f and float(g["start"]) >= end]
        lo = start - bound_s
        hi = (min(nxt) - bound_s) if nxt else float("inf")
        overlaps = [g["text"] for g in fired if g is not f and float(g["start"]) < end and end_of(g) > start]
        due_in = (due_eff >= lo) & (due_eff < hi)
        got_w = got & due_in
        late = got_w & (lag_s > bound_s)
        if late.any():
            last_late = float(fired_at[late].max())
            # recovered: the run went on delivering within the bound after it
            recovered = bool((got & (fired_at > last_late) & (lag_s <= bound_s)).any())
            ttr = max(0.0, last_late - end) if recovered else None
        else:
            ttr = 0.0
        lag_w = lag_s[got_w]
        row.update(
            {
                "start": start,
                "end": end,
                "start_s": start - arm_start,
                "end_s": end - arm_start,
                "due_window_s": [lo - arm_start, (hi - arm_start) if np.isfinite(hi) else None],
                "fires": int(got_w.sum()),
                "lost": int((~got & due_in & not_held).sum()),
                "pending": int((~got & due_in & ~not_held).sum()),
                "duplicate_fires": int((dup_fire & due_in).sum()),
                "duplicate_effects": int((dup_effect & due_in).sum()),
                "duplicate_external_effects": int((dup_external & due_in).sum()),
                "lag_bound_s": bound_s,
                "late_fires": int(late.sum()),
                "time_to_recover_s": ttr,
                "lag_peak_ms": float(lag_w.max() * 1000.0) if len(lag_w) else None,
                "overlaps": overlaps,
            }
        )
        for extra in ("worker", "replacement", "mid_batch", "xmin"):
            if extra in f:
                row[extra] = f[extra]
        if f["kind"] == "hold-snapshot" and "dead_tuples_start" in f:
            row["dead_tuples"] = _dead_tuples_held(run_dir, f, end)
        out.append(row)
    return out


def _dead_tuples_held(run_dir: str | Path, f: dict[str, Any], released: float) -> dict[str, dict[str, Any]]:
    """Per relation: dead tuples when the snapshot was taken, when it was released, and the
    lowest the sampler saw after the release (see the module's docstring)."""
    from metrics.rundir import read_samples

    start, end = f.get("dead_tuples_start") or {}, f.get("dead_tuples_end") or {}
    s = read_samples(run_dir)
    after: dict[str, tuple[float, float]] = {}
    if len(s):
        scope = np.asarray(s.column("scope").to_pylist(), dtype=object)
        metric = np.asarray(s.column("metric").to_pylist(), dtype=object)
        t = s.column("t").to_numpy(zero_copy_only=False).astype(np.float64)
        v = s.column("value").to_numpy(zero_copy_only=False).astype(np.float64)
        keep = (metric == "n_dead_tup") & (t > released) & ~np.isnan(v)
        for rel in set(start) | set(end):
            m = keep & (scope == rel)
            if m.any():
                i = int(np.argmin(np.where(m, v, np.inf)))
                after[rel] = (float(v[i]), float(t[i]) - released)
    return {
        rel: {
            "start": start.get(rel),
            "release": end.get(rel),
            "lowest_after": after[rel][0] if rel in after else None,
            "lowest_after_s": after[rel][1] if rel in after else None,
        }
        for rel in sorted(set(start) | set(end))
    }
