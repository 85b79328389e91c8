"""Continuous comparison of two schedulers' fires, and the GO / NO-GO verdict.

Fires of the two sides are matched by ``(timer id, due time)`` within a tolerance. Counted:
matched, missing in the shadow (the primary fired it, the shadow never did), extra in the shadow
(the shadow fired something the primary never did), duplicates (a side fired the same key twice)
and the distribution of lag difference (shadow lag minus primary lag). Samples of each mismatch
kind are kept so a NO-GO names example timer ids.

Fires due in the last ``grace_s`` of the window are left out of missing/extra: the slower side
may legitimately not have fired them yet (its declared max lag is the usual grace).
"""

from __future__ import annotations

import bisect
from dataclasses import asdict, dataclass, field

import numpy as np

SAMPLES = 10  # example timer ids kept per mismatch kind


@dataclass
class SideFires:
    """Fires seen on one side: per timer id, sorted due times with their lags."""

    by_id: dict[str, list[tuple[float, float]]] = field(default_factory=dict)  # id -> [(due, lag)]
    count: int = 0

    def add(self, timer_id: str, due_at: float, lag_s: float) -> None:
        self.by_id.setdefault(timer_id, []).append((due_at, lag_s))
        self.count += 1


@dataclass
class Comparison:
    matched: int = 0
    missing_in_shadow: int = 0
    extra_in_shadow: int = 0
    duplicates_primary: int = 0
    duplicates_shadow: int = 0
    lag_diff_ms: dict[str, float | None] = field(default_factory=dict)
    samples: dict[str, list[str]] = field(default_factory=dict)
    primary_fires: int = 0
    shadow_fires: int = 0
    judged_until: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)


def _dedupe(items: list[tuple[float, float]], tolerance_s: float) -> tuple[list[tuple[float, float]], int]:
    """Sorted unique fires of one id; a repeat of the same due time (within 1 ms) is a duplicate."""
    items = sorted(items)
    out: list[tuple[float, float]] = []
    dups = 0
    for due, lag in items:
        if out and abs(due - out[-1][0]) < 0.001:
            dups += 1
            continue
        out.append((due, lag))
    return out, dups


def compare(primary: SideFires, shadow: SideFires, tolerance_s: float, judged_until: float) -> Comparison:
    """Match shadow fires to primary fires per id, greedily by nearest due time within tolerance."""
    c = Comparison(primary_fires=primary.count, shadow_fires=shadow.count, judged_until=judged_until)
    samples: dict[str, list[str]] = {"missing_in_shadow": [], "extra_in_shadow": [], "duplicates": []}
    diffs: list[float] = []

    def sample(kind: str, text: str) -> None:
        if len(samples[kind]) < SAMPLES:
            samples[kind].append(text)

    for timer_id in primary.by_id.keys() | shadow.by_id.keys():
        p, pd = _dedupe(primary.by_id.get(timer_id, []), tolerance_s)
        s, sd = _dedupe(shadow.by_id.get(timer_id, []), tolerance_s)
        c.duplicates_primary += pd
        c.duplicates_shadow += sd
        if pd or sd:
            sample("duplicates", timer_id)
        s_dues = [d for d, _ in s]
        used = [False] * len(s)
        for due, lag in p:
            i = bisect.bisect_left(s_dues, due - tolerance_s)
            best = None
            while i < len(s) and s_dues[i] <= due + tolerance_s:
                if not used[i] and (best is None or abs(s_dues[i] - due) < abs(s_dues[best] - due)):
                    best = i
                i += 1
            if best is not None:
                used[best] = True
                c.matched += 1
                diffs.append((s[best][1] - lag) * 1000.0)
            elif due <= judged_until:
                c.missing_in_shadow += 1
                sample("missing_in_shadow", f"{timer_id}@{due:.3f}")
        for k, (due, _) in enumerate(s):
            if not used[k] and due <= judged_until:
                c.extra_in_shadow += 1
                sample("extra_in_shadow", f"{timer_id}@{due:.3f}")
    if diffs:
        arr = np.asarray(diffs)
        c.lag_diff_ms = {
            "p1": float(np.percentile(arr, 1)),
            "p50": float(np.percentile(arr, 50)),
            "p99": float(np.percentile(arr, 99)),
            "mean": float(arr.mean()),
        }
    else:
        c.lag_diff_ms = {"p1": None, "p50": None, "p99": None, "mean": None}
    c.samples = samples
    return c


@dataclass
class Verdict:
    go: bool
    reasons: list[str]

    @property
    def word(self) -> str:
        return "GO" if self.go else "NO-GO"


def verdict(
    comparison: Comparison,
    duplicate_effects: int,
    lost: int,
    shadow_lag_p99_ms: float | None,
    shadow_max_lag_s: float,
    max_extra_ratio: float,
    lost_samples: list[str] | None = None,
) -> Verdict:
    """GO only if nothing is missing or lost, no effect is duplicated, extras are within the
    allowed ratio and the shadow's p99 lag stays within its declared bound."""
    reasons: list[str] = []
    if comparison.missing_in_shadow:
        reasons.append(
            f"{comparison.missing_in_shadow} fires missing in the shadow, e.g. "
            + ", ".join(comparison.samples.get("missing_in_shadow", [])[:5])
        )
    if lost:
        reasons.append(f"{lost} fires executed by neither side, e.g. " + ", ".join((lost_samples or [])[:5]))
    if duplicate_effects:
        reasons.append(f"{duplicate_effects} duplicate effects")
    allowed = max_extra_ratio * max(comparison.matched, 1)
    if comparison.extra_in_shadow > allowed:
        reasons.append(
            f"{comparison.extra_in_shadow} extra fires in the shadow (allowed {allowed:.0f}), e.g. "
            + ", ".join(comparison.samples.get("extra_in_shadow", [])[:5])
        )
    if shadow_lag_p99_ms is None:
        reasons.append("the shadow fired nothing to measure its lag on")
    elif shadow_lag_p99_ms > shadow_max_lag_s * 1000.0:
        reasons.append(
            f"shadow p99 lag {shadow_lag_p99_ms:.0f} ms exceeds its declared bound {shadow_max_lag_s * 1000:.0f} ms"
        )
    return Verdict(go=not reasons, reasons=reasons)
