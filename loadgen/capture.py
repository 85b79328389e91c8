"""A workload derived from a team's own table (``bench capture``): the trace and the YAML.

What comes in is already anonymous: :mod:`metrics.owntable` hashes ids and tenants inside the
database with a random key that is never written, so the trace holds 16-hex-digit hashes that
cannot be traced back (not even by hashing candidate ids) once the capture ends.

Each trigger's interval comes, in this order of preference, from the interval column the user
mapped, from the re-arms seen during the watch window (the median of the differences between
successive due times of the same trigger: with a fixed cadence that is the interval exactly; an
application re-arming at "poll end + interval" adds its own lag), or, for a trigger that was not
re-armed while watched, a lower bound: the longer of the window and the time to its next due.
The count of each kind is recorded, so a reader knows how much of the rate is measured.

The trace (``trigger_id,tenant_id,interval_s,first_fire_s``, :mod:`loadgen.population`) keeps
each trigger's next due time as its first fire (overdue and NULL due times fire at once: null-due-now,
the timer-wheel article's rule), so the replay starts from the table's own phase, backlog included.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from loadgen.population import SECONDS_PER_DAY

TRACE_CSV = "trace.csv"
WORKLOAD_YAML = "workload.yaml"
CAPTURE_JSON = "capture.json"
_UNSEEN = object()


@dataclass
class RearmTracker:
    """Successive samples of every trigger's due time; a changed due time is a re-arm."""

    last_due: dict[str, Any] = field(default_factory=dict)
    diffs: dict[str, list[float]] = field(default_factory=dict)
    rearms: int = 0
    polls: int = 0
    first_read_s: float | None = None
    last_read_s: float | None = None

    def observe(self, rows: Iterable[tuple[str, float | None, float]]) -> None:
        """One poll: ``(trigger hash, due epoch s or None, read at epoch s)`` per row."""
        self.polls += 1
        for trigger, due, read_at in rows:
            if self.first_read_s is None:
                self.first_read_s = read_at
            self.last_read_s = read_at
            prev = self.last_due.get(trigger, _UNSEEN)
            if prev is not _UNSEEN and due != prev:
                self.rearms += 1
                if prev is not None and due is not None and due > prev:
                    self.diffs.setdefault(trigger, []).append(due - prev)
            self.last_due[trigger] = due

    @property
    def window_s(self) -> float:
        if self.first_read_s is None or self.last_read_s is None:
            return 0.0
        return self.last_read_s - self.first_read_s

    def interval_of(self, trigger: str) -> float | None:
        d = self.diffs.get(trigger)
        return float(np.median(d)) if d else None


@dataclass
class Captured:
    trace: list[tuple[str, str, float, float]]  # trigger hash, tenant hash, interval s, first fire s
    stats: dict[str, Any]


def derive(rows: list[dict[str, Any]], tracker: RearmTracker | None, watch_s: float) -> Captured:
    """The trace and the figures of the population ``rows`` (``capture_rows``: trigger_hash,
    tenant_hash, due_in_s, interval_s, state_bytes), with the intervals the tracker saw."""
    trace: list[tuple[str, str, float, float]] = []
    sources = {"column": 0, "rearms": 0, "lower_bound": 0}
    seen: set[str] = set()
    state_sizes: list[float] = []
    window = max(watch_s, tracker.window_s if tracker else 0.0)
    for r in rows:
        trigger = r["trigger_hash"]
        if trigger in seen:
            continue  # a 64-bit collision, or the same id twice in the table: replayed once
        seen.add(trigger)
        if r.get("state_bytes") is not None:
            state_sizes.append(float(r["state_bytes"]))
        due_in = r["due_in_s"]
        first = max(0.0, float(due_in)) if due_in is not None else 0.0
        interval = r["interval_s"]
        if interval is not None and interval > 0:
            sources["column"] += 1
        else:
            interval = tracker.interval_of(trigger) if tracker else None
            if interval is not None:
                sources["rearms"] += 1
            else:
                interval = max(window, first, 1.0)
                sources["lower_bound"] += 1
        trace.append((trigger, r["tenant_hash"], round(float(interval), 3), round(first, 3)))
    if not trace:
        raise ValueError("the table has no rows: nothing to capture")
    iv = np.array([t[2] for t in trace])
    first = np.array([t[3] for t in trace])
    long_horizon = first > np.maximum(10 * iv, SECONDS_PER_DAY)  # as loadgen.population reads the trace
    periodic = iv[~long_horizon]
    tenants: dict[str, int] = {}
    for t in trace:
        tenants[t[1]] = tenants.get(t[1], 0) + 1
    counts = np.array(sorted(tenants.values(), reverse=True), dtype=float)
    state = np.array(state_sizes, dtype=float)
    stats: dict[str, Any] = {
        "triggers": len(trace),
        "rate_per_s": float(np.sum(1.0 / periodic)) if len(periodic) else 0.0,
        "interval_sources": sources,
        "interval_s": _percentiles(periodic),
        "overdue_at_capture": int(np.sum(first == 0.0)),
        "long_horizon_share": float(long_horizon.mean()),
        "due_beyond_one_day_share": float(np.mean(first > SECONDS_PER_DAY)),
        "tenants": len(tenants),
        "tenant_skew": zipf_exponent(counts),
        "largest_tenant_share": float(counts[0] / counts.sum()),
        "state_bytes": _percentiles(state) if len(state) else None,
    }
    if tracker is not None:
        stats["watch"] = {
            "window_s": tracker.window_s,
            "polls": tracker.polls,
            "rearms_seen": tracker.rearms,
            "rearms_per_s": tracker.rearms / tracker.window_s if tracker.window_s else None,
        }
    return Captured(trace, stats)


def _percentiles(x: np.ndarray) -> dict[str, float] | None:
    if not len(x):
        return None
    p = np.percentile(x, [0, 5, 50, 95, 100])
    return {
        "min": float(p[0]),
        "p5": float(p[1]),
        "p50": float(p[2]),
        "p95": float(p[3]),
        "max": float(p[4]),
        "mean": float(x.mean()),
    }


def zipf_exponent(counts_desc: np.ndarray) -> float:
    """The exponent s of counts ~ 1/rank^s, least squares on log-log (0 for one tenant or a flat
    distribution): what ``tenant_skew`` means in a workload."""
    if len(counts_desc) < 2:
        return 0.0
    ranks = np.arange(1, len(counts_desc) + 1, dtype=float)
    slope = np.polyfit(np.log(ranks), np.log(counts_desc), 1)[0]
    return max(0.0, round(float(-slope), 3))


def write(out_dir: Path, captured: Captured, header: list[str], name: str) -> tuple[Path, Path]:
    """``trace.csv`` and ``workload.yaml`` (the trace by a path relative to the YAML, the shape's
    figures beside it so the YAML also stands alone without the trace)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    trace_path, yaml_path = out_dir / TRACE_CSV, out_dir / WORKLOAD_YAML
    with open(trace_path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["trigger_id", "tenant_id", "interval_s", "first_fire_s"])
        w.writerows(captured.trace)
    s = captured.stats
    iv = s["interval_s"] or {"p5": 60.0, "p95": 120.0}
    spec: dict[str, Any] = {
        "name": name,
        "trace": TRACE_CSV,
        "rate": f"{s['rate_per_s']:.3f}/s",
        "interval": f"{iv['p5']:g}s..{max(iv['p95'], iv['p5']):g}s",
        "tenants": s["tenants"],
        "tenant_skew": s["tenant_skew"],
        "long_horizon_share": round(s["long_horizon_share"], 4),
    }
    if s.get("state_bytes"):
        spec["state_size"] = int(round(s["state_bytes"]["p50"]))
    text = "".join(f"# {line}\n" for line in header) + yaml.safe_dump(spec, sort_keys=False)
    yaml_path.write_text(text)
    return trace_path, yaml_path


def rate_note(stats: dict[str, Any]) -> str:
    """One line on how much of the rate is measured rather than bounded."""
    src = stats["interval_sources"]
    total = max(1, sum(src.values()))
    if src["lower_bound"] == 0:
        return "every interval measured"
    return (
        f"{src['lower_bound']:,} of {total:,} triggers ({100 * src['lower_bound'] / total:.1f}%) were not re-armed "
        f"while watched: their intervals are lower bounds (a longer --watch or --map interval=COL measures them)"
    )
