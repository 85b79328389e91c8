"""``bench soak``: trends rather than percentiles, from what the run directory recorded.

The measured window is cut into bins of ``config.json``'s ``soak.bin_s`` (a minute by default).
Per bin:

* ``dead_tuples``: the mean over the bin's samples of ``n_dead_tup`` summed over the design's
  tables and their TOAST tables (the statistics system's estimate, sampled every second: cheap,
  not exact; ``bloat.json`` has pgstattuple's exact count at the end);
* ``bytes``: table + index + TOAST size at the bin's last sample;
* ``autovacuum_runs``: autovacuum passes over those tables that ended in the bin;
* ``claim_ms`` / ``claim_buffers``: execution time and shared buffers (hit + read) per call of
  the design's claim statement(s), from reads of ``pg_stat_statements`` at every bin's edge
  (``soak_statements.jsonl``; designs without SQL have none);
* ``lag_p99_ms``: the p99 lag of the fires due in the bin (undelivered ones count as late as
  the records go);
* ``neighbour_p99_ms``: the neighbour's p99 (with ``--neighbour``);
* ``xmin_age_s``: the oldest snapshot's age at its highest in the bin (what the readers held).

Each series but ``autovacuum_runs`` and ``xmin_age_s`` gets a verdict, "steady" or "growing"
(:func:`metrics.trend.verdict`), over the span the readers held the horizon when there were
readers (when it has 3 bins or more: a soak killed before then is judged over what it recorded),
else over the whole window. **Recovery**: after the readers stop, how long until dead
tuples and claim time come back to their level before the readers started (the median of the
bins before, with :data:`RECOVERY_TOLERANCE`); None when they had not by the end.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from metrics import neighbour as nb
from metrics import rundir
from metrics.trend import verdict

SOAK_STATEMENTS = "soak_statements.jsonl"  # the claim statements' counters at every bin edge
RECOVERY_TOLERANCE = 0.25  # back within 25% of the level before the readers (or the series' floor)
# below these a series is flat whatever its relative change (a verdict on noise around zero)
FLOORS = {
    "dead_tuples": 200.0,
    "bytes": float(1 << 20),
    "claim_ms": 0.05,
    "claim_buffers": 5.0,
    "lag_p99_ms": 20.0,
    "neighbour_p99_ms": 2.0,
}
JUDGED = tuple(FLOORS)
SHOWN = ("autovacuum_runs", "xmin_age_s")


def _bins(start: float, end: float, bin_s: float) -> list[tuple[float, float]]:
    out, lo = [], start
    while lo < end - 1e-9:
        hi = min(end, lo + bin_s)
        if hi - lo >= bin_s / 2 or not out:
            out.append((lo, hi))
        lo = hi
    return out


def _relation_series(samples, bins) -> dict[str, list]:
    out: dict[str, list] = {"dead_tuples": [], "bytes": [], "autovacuum_runs": [], "xmin_age_s": []}
    if samples.num_rows == 0:
        for k in out:
            out[k] = [None] * len(bins)
        return out
    df = samples.to_pandas()
    rel = df[~df.scope.isin(["run"]) & ~df.scope.str.startswith(rundir.SERVER_PREFIX)]
    dead = rel[rel.metric == "n_dead_tup"].groupby("t").value.sum()
    size = rel[rel.metric.isin(["table_bytes", "index_bytes"])].groupby("t").value.sum()
    av = rel[rel.metric == "autovacuum_count"].groupby("t").value.sum()
    xmin = df[(df.scope == "run") & (df.metric == "oldest_xmin_age_s")].set_index("t").value
    last_av = None
    for lo, hi in bins:
        d = dead[(dead.index >= lo) & (dead.index < hi)]
        out["dead_tuples"].append(float(d.mean()) if len(d) else None)
        s = size[(size.index >= lo) & (size.index < hi)]
        out["bytes"].append(float(s.iloc[-1]) if len(s) else None)
        a = av[av.index < hi]
        now = float(a.iloc[-1]) if len(a) else None
        before = av[av.index < lo]
        base = float(before.iloc[-1]) if len(before) else (last_av if last_av is not None else 0.0)
        out["autovacuum_runs"].append(None if now is None else max(0.0, now - base))
        last_av = now if now is not None else last_av
        x = xmin[(xmin.index >= lo) & (xmin.index < hi)]
        out["xmin_age_s"].append(float(x.max()) if len(x) else None)
    return out


def _lag_series(fires, bins, records_end: float) -> list:
    if fires.num_rows == 0:
        return [None] * len(bins)
    due = fires.column("due_at").to_numpy(zero_copy_only=False).astype(float)
    lag = np.asarray(fires.column("lag_s").to_numpy(zero_copy_only=False), float)
    lag = np.where(np.isfinite(lag), lag, np.maximum(0.0, records_end - due))
    out = []
    for lo, hi in bins:
        keep = (due >= lo) & (due < hi)
        out.append(float(np.percentile(lag[keep], 99)) * 1000.0 if keep.any() else None)
    return out


def read_statement_edges(run_dir: str | Path) -> list[dict[str, Any]]:
    path = Path(run_dir) / SOAK_STATEMENTS
    if not path.exists():
        return []
    rows = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue  # cut short by a kill
    return sorted(rows, key=lambda r: r["t"])


def _claim_series(edges: list[dict[str, Any]], bins) -> tuple[list, list]:
    """Per call of the claim statements in each bin, between the reads nearest its two edges
    (within half a bin: a read lands a little after the edge it was due at), summed over the
    reads between them so that a counter that fell (a reset) counts from zero again."""
    ms, bufs = [], []
    ts = np.array([e["t"] for e in edges], float)

    def nearest(b: float, half: float) -> int | None:
        if not len(ts):
            return None
        i = int(np.argmin(np.abs(ts - b)))
        return i if abs(ts[i] - b) <= half else None

    for lo, hi in bins:
        half = (hi - lo) / 2
        i, j = nearest(lo, half), nearest(hi, half)
        if i is None or j is None or j <= i:
            ms.append(None)
            bufs.append(None)
            continue
        totals = {"calls": 0.0, "total_exec_ms": 0.0, "blocks": 0.0}
        for a, b in zip(edges[i:j], edges[i + 1 : j + 1]):
            for key in totals:
                totals[key] += b[key] - a[key] if b[key] >= a[key] else b[key]
        calls = totals["calls"]
        ms.append(totals["total_exec_ms"] / calls if calls else None)
        bufs.append(totals["blocks"] / calls if calls else None)
    return ms, bufs


def _level(values: list, ts: list, lo: float, hi: float) -> float | None:
    v = [x for x, t in zip(values, ts) if x is not None and lo <= t < hi]
    return float(np.median(v)) if v else None


def soak_analysis(run_dir: str | Path, measure_start: float, measure_end: float) -> dict[str, Any] | None:
    """``summary.json``'s ``soak``; None when the run was not a soak."""
    cfg = rundir.read_config(run_dir)
    spec = cfg.get("soak")
    if not spec:
        return None
    bin_s = float(spec.get("bin_s") or 60.0)
    bins = _bins(measure_start, measure_end, bin_s)
    t = [lo - measure_start for lo, _ in bins]
    series: dict[str, list] = {}
    samples = rundir.read_samples(run_dir)
    series.update(_relation_series(samples, bins))
    edges = read_statement_edges(run_dir)
    if edges:
        series["claim_ms"], series["claim_buffers"] = _claim_series(edges, bins)
    fires = rundir.read_fires(run_dir)
    series["lag_p99_ms"] = _lag_series(fires, bins, measure_end)
    if cfg.get("neighbour"):
        e, lat = nb.read_log(nb.log_files(run_dir, rundir.NEIGHBOUR_RUN_LOG))
        series["neighbour_p99_ms"] = [nb.figures(e, lat, lo, hi)["p99_ms"] for lo, hi in bins]
    window = cfg.get("window") or {}
    r_start, r_stop = window.get("readers_start_at"), window.get("readers_stop_at")
    span = (measure_start, measure_end)
    span_name = "the whole measured window"
    if r_start is not None and r_stop is not None:
        held = (float(r_start), min(float(r_stop), measure_end))
        if sum(1 for lo, hi in bins if held[0] <= lo + (hi - lo) / 2 < held[1]) >= 3:
            span, span_name = held, "the span the readers held the horizon"
        else:  # an interrupted soak that stopped before (or soon after) the readers began
            span_name = "the whole measured window (the readers' span has fewer than 3 bins)"
    trends = {}
    for name in JUDGED:
        if name not in series:
            continue
        pts = [(lo + (hi - lo) / 2, v) for (lo, hi), v in zip(bins, series[name]) if v is not None]
        pts = [(x, v) for x, v in pts if span[0] <= x < span[1]]
        xs = np.array([p[0] for p in pts], float)
        ys = np.array([p[1] for p in pts], float)
        trends[name] = verdict(xs - measure_start, ys, floor=FLOORS[name])
    recovery = None
    if r_start is not None and r_stop is not None:
        recovery = {}
        abs_t = [lo for lo, _ in bins]
        for name in ("dead_tuples", "claim_ms"):
            if name not in series:
                continue
            before = _level(series[name], abs_t, measure_start, float(r_start))
            if before is None:
                recovery[name] = {"before": None, "recovered_after_s": None, "note": "no bin before the readers"}
                continue
            limit = max(before * (1 + RECOVERY_TOLERANCE), before + FLOORS[name])
            after = None
            for (lo, hi), v in zip(bins, series[name]):
                if lo >= float(r_stop) - 1e-6 and v is not None and v <= limit:
                    after = hi - float(r_stop)
                    break
            stopped = float(r_stop) < measure_end
            recovery[name] = {
                "before": before,
                "limit": limit,
                "recovered_after_s": after,
                "note": None
                if after is not None
                else ("not back by the end of the run" if stopped else "the readers held until the end"),
            }
    return {
        "bin_s": bin_s,
        "t_s": t,
        "series": series,
        "trend_span": {"start_s": span[0] - measure_start, "end_s": span[1] - measure_start, "what": span_name},
        "trends": trends,
        "readers_start_s": None if r_start is None else float(r_start) - measure_start,
        "readers_stop_s": None if r_stop is None else float(r_stop) - measure_start,
        "recovery": recovery,
        "claim_statements": spec.get("claim_statements"),
    }


def verdict_lines(soak: dict[str, Any] | None) -> list[str]:
    """One line per judged series: "dead tuples: growing (+12,400 over 5.0 min of readers)"."""
    if not soak:
        return []
    names = {
        "dead_tuples": "dead tuples",
        "bytes": "table+index+TOAST bytes",
        "claim_ms": "claim ms per call",
        "claim_buffers": "buffers per claim",
        "lag_p99_ms": "lag p99 ms",
        "neighbour_p99_ms": "neighbour p99 ms",
    }
    out = []
    for key, label in names.items():
        tr = (soak.get("trends") or {}).get(key)
        if not tr:
            continue
        if tr["verdict"] is None:
            out.append(f"{label}: too few bins to judge")
            continue
        out.append(
            f"{label}: {tr['verdict']} (climb {tr['climb']:+,.3g} over the span, ±{tr['stderr_climb']:,.2g}; "
            f"limit {tr['limit']:,.3g})"
        )
    for key, rec in (soak.get("recovery") or {}).items():
        label = names.get(key, key)
        if rec.get("recovered_after_s") is not None:
            out.append(f"recovery of {label}: {rec['recovered_after_s']:.0f} s after the readers stopped")
        else:
            out.append(f"recovery of {label}: {rec.get('note')}")
    return out


def fmt_num(v: float | None) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    return f"{v:,.3g}" if abs(v) < 1000 else f"{v:,.0f}"
