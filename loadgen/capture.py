"""A workload derived from a team's own table (``bench capture``): the trace and the YAML.

What comes in is already anonymous: :mod:`metrics.owntable` hashes ids and tenants inside the
database with a random key that is never written, so the trace holds 16-hex-digit hashes that
cannot be traced back (not even by hashing candidate ids) once the capture ends.

A trigger is an identity (``--map id=...``): one row whose due time moves, or, in the job
libraries that insert a new row for every fire, the successive rows that share it. Each
trigger's interval comes, in this order of preference, from the interval column the user mapped,
from its distinct due times seen during the watch window and in the finished rows the table
still keeps (the median gap between successive ones, a gap that spans a due time missed between
two samples counted as the intervals it spans: with a fixed cadence that is the interval exactly;
an application re-arming at "poll end + interval" adds its own lag), or, for a trigger
seen at one due time only, a lower bound: the longer of the window and the time to its next due.
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
class TriggerSeen:
    """One identity across the samples: its tenant, every distinct due time seen (of its one row,
    or of its successive rows in a library that inserts a row per fire), its state size, and its
    next due time at the last sample that held it."""

    tenant: str
    dues: set[float] = field(default_factory=set)
    state_bytes: float | None = None
    interval_column: float | None = None
    next_due: float | None = None  # the earliest due time among its rows at its last sample
    last_poll: int = 0


@dataclass
class RearmTracker:
    """Successive samples of the rows; per identity, a due time not seen before is a re-arm
    (the same row's due time moved, or a new row with the same identity appeared)."""

    triggers: dict[str, TriggerSeen] = field(default_factory=dict)
    rearms: int = 0
    polls: int = 0
    history_dues: int = 0
    first_read_s: float | None = None
    last_read_s: float | None = None

    def observe(self, rows: Iterable[dict[str, Any]]) -> None:
        """One sample: ``capture_poll`` rows (trigger_hash, tenant_hash, due_s, interval_s,
        state_bytes, read_at_s), any number per identity."""
        self.polls += 1
        for r in rows:
            read_at = r["read_at_s"]
            if self.first_read_s is None:
                self.first_read_s = read_at
            self.last_read_s = read_at
            seen = self.triggers.get(r["trigger_hash"])
            if seen is None:
                seen = self.triggers[r["trigger_hash"]] = TriggerSeen(r["tenant_hash"])
            seen.tenant = r["tenant_hash"]
            if r.get("state_bytes") is not None:
                seen.state_bytes = float(r["state_bytes"])
            if r.get("interval_s") is not None and r["interval_s"] > 0:
                seen.interval_column = float(r["interval_s"])
            due = r["due_s"]
            if seen.last_poll != self.polls:
                seen.last_poll, seen.next_due = self.polls, due
            elif due is not None and (seen.next_due is None or due < seen.next_due):
                seen.next_due = due
            if due is None:
                continue
            due = round(float(due), 3)
            if due not in seen.dues:
                if seen.dues:
                    self.rearms += 1
                seen.dues.add(due)

    def add_history(self, history: dict[str, list[float]]) -> None:
        """Due times of finished rows of the identities seen (read once from the table)."""
        for trigger, dues in history.items():
            seen = self.triggers.get(trigger)
            if seen is None:
                continue  # finished rows of a trigger that is no longer armed
            for d in dues:
                d = round(float(d), 3)
                if d not in seen.dues:
                    seen.dues.add(d)
                    self.history_dues += 1

    @property
    def window_s(self) -> float:
        if self.first_read_s is None or self.last_read_s is None:
            return 0.0
        return self.last_read_s - self.first_read_s

    def interval_of(self, trigger: str) -> float | None:
        """The median gap between successive distinct due times (None when seen once), each gap
        first divided by the number of shortest gaps it spans: a due time that came and went
        between two samples leaves a gap of two intervals, which would otherwise lengthen the
        interval of a trigger seen only a few times."""
        seen = self.triggers.get(trigger)
        if seen is None or len(seen.dues) < 2:
            return None
        gaps = np.diff(sorted(seen.dues))
        shortest = gaps.min()
        if shortest > 0:
            gaps = gaps / np.maximum(1.0, np.round(gaps / shortest))
        return float(np.median(gaps))


@dataclass
class Captured:
    trace: list[tuple[str, str, float, float]]  # trigger hash, tenant hash, interval s, first fire s
    stats: dict[str, Any]


def derive(tracker: RearmTracker, watch_s: float, empty: str = "the table has no rows") -> Captured:
    """The trace and the figures of every identity the tracker saw; its last sample is the
    capture's "now". Each trigger fires first at its next due time (at once when overdue or
    NULL); one that held no row at the last sample (a library's job being run) at its last due
    time plus its interval."""
    trace: list[tuple[str, str, float, float]] = []
    sources = {"column": 0, "rearms": 0, "lower_bound": 0}
    state_sizes: list[float] = []
    window = max(watch_s, tracker.window_s)
    now = tracker.last_read_s or 0.0
    for trigger, seen in tracker.triggers.items():
        if seen.state_bytes is not None:
            state_sizes.append(seen.state_bytes)
        interval = seen.interval_column
        if interval is not None:
            sources["column"] += 1
        elif (interval := tracker.interval_of(trigger)) is not None:
            sources["rearms"] += 1
        if seen.last_poll == tracker.polls:
            next_due = seen.next_due
        else:
            last = max(seen.dues) if seen.dues else None
            next_due = (last + interval) if (last is not None and interval) else last
        first = max(0.0, float(next_due) - now) if next_due is not None else 0.0
        if interval is None:
            interval = max(window, first, 1.0)
            sources["lower_bound"] += 1
        trace.append((trigger, seen.tenant, round(float(interval), 3), round(first, 3)))
    if not trace:
        raise ValueError(f"{empty}: nothing to capture")
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
    if tracker.polls > 1:
        stats["watch"] = {
            "window_s": tracker.window_s,
            "first_read_at_s": tracker.first_read_s,
            "last_read_at_s": tracker.last_read_s,
            "polls": tracker.polls,
            "rearms_seen": tracker.rearms,
            "rearms_per_s": tracker.rearms / tracker.window_s if tracker.window_s else None,
            "history_due_times": tracker.history_dues,
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
