"""The neighbour's figures and the long readers' holds, from what a run directory recorded.

``--neighbour``: pgbench wrote one line per transaction (``-l``) into ``neighbour/``, once alone
before the scheduler started (the **baseline**) and once beside it. A line is ``client_id
transaction_no time script_no time_epoch time_us [schedule_lag ...]``; ``time`` is the latency in
microseconds, which under ``-R`` counts from the transaction's *scheduled* start (the open-loop
latency: a stalled server shows as latency, not as fewer transactions), or a word (``failed``,
``skipped``, ...) for a transaction that did not commit. A transaction belongs to the window its
completion (``time_epoch + time_us``) falls in.

Figures over a window: ``transactions``, ``tx_per_s``, ``failed`` and the latency p50 / p99 /
p99.9 in ms (numpy's linear-interpolation percentiles of every committed transaction's
latency). ``p99_ratio`` is the run's p99 over the baseline's: "neighbour p99 xN against the
neighbour alone".

``--readers``: ``readers.jsonl`` holds one line per snapshot a reader held (``reader``,
``start``, ``end``, ``xmin``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from metrics import rundir

MINUTE_S = 60.0
KEPT_RATE = 0.9  # a neighbour below 90% of its rate fell behind its schedule: its latency is queueing


def log_files(run_dir: str | Path, prefix: str) -> list[Path]:
    """pgbench's log files for ``--log-prefix neighbour/<prefix>`` (``prefix.<pid>[.<thread>]``)."""
    d = Path(run_dir) / rundir.NEIGHBOUR_DIR
    return sorted(d.glob(f"{prefix}.*")) if d.is_dir() else []


def read_log(files: list[Path]) -> tuple[np.ndarray, np.ndarray]:
    """(completion epoch s, latency ms; NaN for a transaction that did not commit), in completion
    order. A last line cut short (the run was killed while pgbench wrote it) is skipped."""
    ends: list[float] = []
    lats: list[float] = []
    for path in files:
        with open(path, errors="replace") as fh:
            for line in fh:
                parts = line.split()
                if len(parts) < 6:
                    continue
                try:
                    end = int(parts[4]) + int(parts[5]) / 1e6
                except ValueError:
                    continue
                try:
                    lat = int(parts[2]) / 1000.0
                except ValueError:
                    lat = math.nan  # failed / skipped / serialization / deadlock
                ends.append(end)
                lats.append(lat)
    end_a, lat_a = np.asarray(ends, float), np.asarray(lats, float)
    order = np.argsort(end_a, kind="stable")
    return end_a[order], lat_a[order]


def figures(end: np.ndarray, lat_ms: np.ndarray, start: float, stop: float) -> dict[str, Any]:
    """The neighbour's figures over ``[start, stop)`` of completion time."""
    keep = (end >= start) & (end < stop)
    lat = lat_ms[keep]
    ok = lat[np.isfinite(lat)]
    span = max(0.0, stop - start)
    out: dict[str, Any] = {
        "start": start,
        "end": stop,
        "transactions": int(len(ok)),
        "failed": int(len(lat) - len(ok)),
        "tx_per_s": len(ok) / span if span > 0 else None,
    }
    for key, q in (("p50_ms", 50.0), ("p99_ms", 99.0), ("p999_ms", 99.9)):
        out[key] = float(np.percentile(ok, q)) if len(ok) else None
    return out


def per_minute(end: np.ndarray, lat_ms: np.ndarray, start: float, stop: float, every_s: float = MINUTE_S) -> dict:
    """p99 (ms) and transactions per second in each ``every_s`` bin of ``[start, stop)``: ``t``
    is the bin's start, seconds since ``start``."""
    t, p99, tps = [], [], []
    lo = start
    while lo < stop - 1e-9:
        hi = min(stop, lo + every_s)
        f = figures(end, lat_ms, lo, hi)
        t.append(lo - start)
        p99.append(f["p99_ms"])
        tps.append(f["tx_per_s"])
        lo = hi
    return {"t_s": t, "p99_ms": p99, "tx_per_s": tps}


def neighbour_summary(run_dir: str | Path, measure_start: float, measure_end: float) -> dict[str, Any] | None:
    """``summary.json``'s ``neighbour``: the spec, the baseline's and the run's figures and the
    p99 ratio; None when the run had no neighbour."""
    cfg = rundir.read_config(run_dir)
    spec = cfg.get("neighbour")
    if not spec:
        return None
    out: dict[str, Any] = {k: spec.get(k) for k in ("kind", "script", "rate_per_s", "clients", "scale")}
    base = spec.get("baseline") or {}
    if base.get("start") is not None and base.get("end") is not None:
        e, lat = read_log(log_files(run_dir, rundir.NEIGHBOUR_BASELINE_LOG))
        out["baseline"] = figures(e, lat, float(base["start"]), float(base["end"]))
    else:
        out["baseline"] = None
    e, lat = read_log(log_files(run_dir, rundir.NEIGHBOUR_RUN_LOG))
    out["run"] = figures(e, lat, measure_start, measure_end)
    out["per_minute"] = per_minute(e, lat, measure_start, measure_end)
    b99 = (out["baseline"] or {}).get("p99_ms")
    r99 = out["run"]["p99_ms"]
    out["p99_ratio"] = r99 / b99 if r99 is not None and b99 else None
    out["error"] = spec.get("error")
    return out


def problems(neighbour: dict[str, Any] | None) -> list[str]:
    """Warnings: a window in which the neighbour could not keep its rate (the machine or the server
    was saturated, so its latency is mostly the queue of transactions behind schedule)."""
    if not neighbour:
        return []
    out = []
    rate = neighbour.get("rate_per_s") or 0.0
    for name, when in (("baseline", "alone"), ("run", "beside the scheduler")):
        f = neighbour.get(name) or {}
        tps = f.get("tx_per_s")
        if rate and tps is not None and tps < KEPT_RATE * rate:
            out.append(
                f"the neighbour {when} ran {tps:,.0f} of its {rate:g} tx/s: it fell behind its schedule, so its "
                f"latency is mostly queueing (lower --neighbour-rate for a neighbour the server can keep up with)"
            )
    return out


def ratio_text(neighbour: dict[str, Any] | None) -> str | None:
    """ "neighbour p99 x1.8 against the neighbour alone (4.1 ms -> 7.4 ms)"; None without one."""
    if not neighbour:
        return None
    r = neighbour.get("p99_ratio")
    b = (neighbour.get("baseline") or {}).get("p99_ms")
    p = (neighbour.get("run") or {}).get("p99_ms")
    if r is None:
        return f"neighbour p99 not measured ({neighbour.get('error') or 'no baseline or no transactions'})"
    return f"neighbour p99 ×{r:.2f} against the neighbour alone ({b:.1f} ms -> {p:.1f} ms)"


def read_readers(run_dir: str | Path) -> list[dict[str, Any]]:
    """Every snapshot the long readers held (``readers.jsonl``), in order of start."""
    path = Path(run_dir) / rundir.READERS
    if not path.exists():
        return []
    holds = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            holds.append(json.loads(line))
        except ValueError:
            continue  # a line cut short by a kill
    return sorted(holds, key=lambda h: h.get("start") or 0.0)


def readers_summary(run_dir: str | Path) -> dict[str, Any] | None:
    """``summary.json``'s ``readers``: the spec, every hold, and the span some reader held."""
    cfg = rundir.read_config(run_dir)
    spec = cfg.get("readers")
    if not spec:
        return None
    holds = read_readers(run_dir)
    return {
        **{k: spec.get(k) for k in ("count", "hold_s", "stop_at")},
        "holds": holds,
        "held_from": min((h["start"] for h in holds), default=None),
        "held_until": max((h["end"] for h in holds), default=None),
    }
