"""Continuous comparison of two schedulers' fires, the lag comparison, and the GO / NO-GO verdict.

Fires of the two sides are matched by ``(timer id, due time)`` within a tolerance. Counted:
matched, missing in the shadow (the primary fired it, the shadow never did), extra in the shadow
(the shadow fired something the primary never did), duplicates (a side fired the same key twice)
and the distribution of lag difference (shadow lag minus primary lag, per matched fire). Samples
of each mismatch kind are kept so a NO-GO names example timer ids.

Only fires due inside the **judged windows** count: while both stores hold every timer and both
run (from the end of the backfill until the old store stops, and again after a rollback has
re-synced it), and not in the last ``grace_s`` of the run, when the slower side may legitimately
not have fired yet (its declared max lag is the usual grace).

Matching by (id, due) says *whether* the shadow fires what the primary does, never *when*: both
sides carry the same due times. For a scheduler, when it fires is the result, so the lag
comparison (:func:`lag_comparison`) is a result of its own: each side's lag distribution over the
judged fires, the regression (shadow p99 minus primary p99), and the same per tenant, worst
first. The verdict (:func:`verdict`) checks the shadow's p99 against ``max_lag_p99`` (default:
the target design's declared bound, ``capabilities.max_lag_s``) and, when given, the regression
against ``max_lag_regression``. A NO-GO names the figure that failed.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import numpy as np

from migration.dual import SideFires

SAMPLES = 10  # example timer ids kept per mismatch kind
TENANT_MIN_FIRES = 10  # a tenant's p99 is shown among the worst only with this many fires per side
TENANTS_SHOWN = 10

Window = tuple[float, float]


def in_windows(windows: list[Window] | None, until: float) -> Callable[[float], bool]:
    """Whether a due time is judged: inside a window (None: every time) and not after ``until``."""
    if windows is None:
        return lambda due: due <= until
    ws = sorted(windows)
    return lambda due: due <= until and any(a <= due < b for a, b in ws)


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
    windows: list[Window] | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def _dedupe(items: list[tuple[float, float]]) -> tuple[list[tuple[float, float]], int]:
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


def _pcts(values_ms) -> dict[str, float | None]:
    if len(values_ms) == 0:
        return {"p1": None, "p50": None, "p99": None, "mean": None}
    arr = np.asarray(values_ms)
    return {
        "p1": float(np.percentile(arr, 1)),
        "p50": float(np.percentile(arr, 50)),
        "p99": float(np.percentile(arr, 99)),
        "mean": float(arr.mean()),
    }


def compare(
    primary: SideFires, shadow: SideFires, tolerance_s: float, judged_until: float, windows: list[Window] | None = None
) -> Comparison:
    """Match shadow fires to primary fires per id, greedily by nearest due time within tolerance."""
    judged = in_windows(windows, judged_until)
    c = Comparison(primary_fires=primary.count, shadow_fires=shadow.count, judged_until=judged_until, windows=windows)
    samples: dict[str, list[str]] = {"missing_in_shadow": [], "extra_in_shadow": [], "duplicates": []}
    diffs: list[float] = []

    def sample(kind: str, text: str) -> None:
        if len(samples[kind]) < SAMPLES:
            samples[kind].append(text)

    for timer_id in primary.by_id.keys() | shadow.by_id.keys():
        p, pd = _dedupe(primary.by_id.get(timer_id, []))
        s, sd = _dedupe(shadow.by_id.get(timer_id, []))
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
                if judged(due):
                    c.matched += 1
                    diffs.append((s[best][1] - lag) * 1000.0)
            elif judged(due):
                c.missing_in_shadow += 1
                sample("missing_in_shadow", f"{timer_id}@{due:.3f}")
        for k, (due, _) in enumerate(s):
            if not used[k] and judged(due):
                c.extra_in_shadow += 1
                sample("extra_in_shadow", f"{timer_id}@{due:.3f}")
    c.lag_diff_ms = _pcts(diffs)
    c.samples = samples
    return c


def _side_lags(fires: SideFires, judged: Callable[[float, float], bool]) -> tuple[np.ndarray, dict[str, list[float]]]:
    """Lag (ms) of each judged fire of one side (its first delivery per key), and per tenant.
    ``judged(due, lag_s)``."""
    all_ms: list[float] = []
    per_tenant: dict[str, list[float]] = {}
    for timer_id, items in fires.by_id.items():
        unique, _ = _dedupe(items)
        tenant = fires.tenants.get(timer_id, "")
        for due, lag in unique:
            if judged(due, lag):
                ms = lag * 1000.0
                all_ms.append(ms)
                per_tenant.setdefault(tenant, []).append(ms)
    return np.asarray(all_ms), per_tenant


def _summary(arr: np.ndarray) -> dict[str, float | int | None]:
    if len(arr) == 0:
        return {"fires": 0, "p50": None, "p99": None, "max": None}
    return {
        "fires": int(len(arr)),
        "p50": float(np.percentile(arr, 50)),
        "p99": float(np.percentile(arr, 99)),
        "max": float(arr.max()),
    }


def lag_comparison(primary: SideFires, shadow: SideFires, judged: Callable[[float, float], bool]) -> dict:
    """Each side's lag over the judged fires (``judged(due, lag_s)``), the p99 regression, and
    the worst tenants."""
    p_all, p_ten = _side_lags(primary, judged)
    s_all, s_ten = _side_lags(shadow, judged)
    p, s = _summary(p_all), _summary(s_all)
    regression = s["p99"] - p["p99"] if p["p99"] is not None and s["p99"] is not None else None
    tenants = []
    for tenant in p_ten.keys() & s_ten.keys():
        pl, sl = np.asarray(p_ten[tenant]), np.asarray(s_ten[tenant])
        if min(len(pl), len(sl)) == 0:
            continue
        pp, sp = float(np.percentile(pl, 99)), float(np.percentile(sl, 99))
        tenants.append(
            {
                "tenant": tenant,
                "fires_primary": int(len(pl)),
                "fires_shadow": int(len(sl)),
                "primary_p99": pp,
                "shadow_p99": sp,
                "regression_p99": sp - pp,
            }
        )
    enough = [t for t in tenants if min(t["fires_primary"], t["fires_shadow"]) >= TENANT_MIN_FIRES] or tenants
    enough.sort(key=lambda t: (-t["regression_p99"], t["tenant"]))
    return {
        "unit": "ms",
        "primary": p,
        "shadow": s,
        "regression_p99": regression,
        "tenants": len(tenants),
        "worst_tenants": enough[:TENANTS_SHOWN],
        "worst_tenant": enough[0] if enough else None,
        "tenant_min_fires": TENANT_MIN_FIRES,
    }


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f} ms"


@dataclass
class Verdict:
    go: bool
    reasons: list[str]
    checks: dict[str, dict] = field(default_factory=dict)  # figure -> {value, limit, ok}

    @property
    def word(self) -> str:
        return "GO" if self.go else "NO-GO"


def verdict(
    comparison: Comparison,
    duplicate_effects: int,
    lost: int,
    lag: dict,
    *,
    max_lag_p99_ms: float,
    max_lag_p99_source: str,
    max_lag_regression_ms: float | None = None,
    max_extra_ratio: float = 0.001,
    lost_samples: list[str] | None = None,
    double_executed: int = 0,
    more_reasons: list[str] | None = None,
) -> Verdict:
    """GO only if nothing is missing or lost, no effect is duplicated and no fire executed by both
    stores, extras are within the allowed ratio, the shadow's lag p99 is within ``max_lag_p99_ms``
    and (when given) its regression over the primary within ``max_lag_regression_ms``, and none of
    ``more_reasons`` (failed step checks, drift left after reconciliation) applies."""
    reasons: list[str] = []
    checks: dict[str, dict] = {}
    if comparison.missing_in_shadow:
        reasons.append(
            f"{comparison.missing_in_shadow} fires missing in the shadow, e.g. "
            + ", ".join(comparison.samples.get("missing_in_shadow", [])[:5])
        )
    if lost:
        reasons.append(f"{lost} fires executed by neither store, e.g. " + ", ".join((lost_samples or [])[:5]))
    if duplicate_effects:
        reasons.append(f"{duplicate_effects} duplicate effects")
    if double_executed:
        reasons.append(f"{double_executed} fires executed by both stores")
    allowed = max_extra_ratio * max(comparison.matched, 1)
    if comparison.extra_in_shadow > allowed:
        reasons.append(
            f"{comparison.extra_in_shadow} extra fires in the shadow (allowed {allowed:.0f}), e.g. "
            + ", ".join(comparison.samples.get("extra_in_shadow", [])[:5])
        )
    p99 = lag["shadow"]["p99"]
    checks["shadow_lag_p99"] = {
        "value": p99,
        "limit": max_lag_p99_ms,
        "limit_from": max_lag_p99_source,
        "ok": p99 is not None and p99 <= max_lag_p99_ms,
    }
    if p99 is None:
        reasons.append("the shadow fired nothing in the judged window to measure its lag on")
    elif p99 > max_lag_p99_ms:
        reasons.append(f"shadow lag p99 {_ms(p99)} exceeds {_ms(max_lag_p99_ms)} ({max_lag_p99_source})")
    reg = lag.get("regression_p99")
    if max_lag_regression_ms is not None:
        checks["lag_regression_p99"] = {
            "value": reg,
            "limit": max_lag_regression_ms,
            "limit_from": "--max-lag-regression",
            "ok": reg is not None and reg <= max_lag_regression_ms,
        }
        if reg is not None and reg > max_lag_regression_ms:
            reasons.append(
                f"lag regression {_ms(reg)} (shadow p99 {_ms(p99)} - primary p99 "
                f"{_ms(lag['primary']['p99'])}) exceeds --max-lag-regression {_ms(max_lag_regression_ms)}"
            )
    else:
        checks["lag_regression_p99"] = {"value": reg, "limit": None, "limit_from": "none given", "ok": True}
    reasons.extend(more_reasons or [])
    return Verdict(go=not reasons, reasons=reasons, checks=checks)
