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
comparison (:func:`lag_comparison`) is a result of its own. A store's lag is taken where its
processor received the fire; a store that observes (does not execute) answers at once, so its
figure is the lag it would have had. Per store: its lag over the fires it executed, while it
executed them (a store that never executed: over the fires it observed; ``role`` says which).
Per period between switches, the regression compares like with like (see
:func:`lag_comparison`); the headline regression is the worst period's, and the same per tenant,
worst first. The verdict (:func:`verdict`) checks the shadow's p99 against ``max_lag_p99`` (default:
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


def _side_lags(
    fires: SideFires, judged: Callable[[float, float], bool], role: Callable[[float], bool] | None = None
) -> tuple[dict[tuple[str, float], float], dict[str, str]]:
    """Lag (ms) of each judged fire of one side (its first delivery per key) whose due time
    ``role(due)`` accepts (None: every one), by key; and each timer's tenant.
    ``judged(due, lag_s)``."""
    out: dict[tuple[str, float], float] = {}
    for timer_id, items in fires.by_id.items():
        unique, _ = _dedupe(items)
        for due, lag in unique:
            if judged(due, lag) and (role is None or role(due)):
                out[(timer_id, due)] = lag * 1000.0
    return out, fires.tenants


def _summary(lags: dict[tuple[str, float], float] | np.ndarray, role: str | None = None) -> dict:
    arr = np.asarray(list(lags.values()) if isinstance(lags, dict) else lags)
    out: dict = (
        {"fires": 0, "p50": None, "p99": None, "max": None}
        if len(arr) == 0
        else {
            "fires": int(len(arr)),
            "p50": float(np.percentile(arr, 50)),
            "p99": float(np.percentile(arr, 99)),
            "max": float(arr.max()),
        }
    )
    if isinstance(lags, dict) and lags:
        dues = [d for _, d in lags]
        out["due_from"], out["due_to"] = min(dues), max(dues)
    if role is not None:
        out["role"] = role
    return out


def _p99(values: list[float]) -> float | None:
    return float(np.percentile(np.asarray(values), 99)) if values else None


Switches = list[tuple[float, str]]


def _executor(switches: Switches) -> Callable[[float], str]:
    def side(due: float) -> str:
        s = "primary"
        for due_from, who in switches:
            if due >= due_from:
                s = who
            else:
                break
        return s

    return side


def lag_comparison(
    primary: SideFires,
    shadow: SideFires,
    judged: Callable[[float, float], bool],
    switches: Switches = (),  # type: ignore[assignment]
) -> dict:
    """Each store's lag where it executed (and, for the store that only observed, the lag it
    would have had), per period between switches, and the regression step by step.

    ``switches``: (due from, side executing) ascending, as :class:`migration.dual.DualState`
    keeps them. Per period the regression compares like with like: while the old store
    executes, the new one observes the same fires (new p99 minus old p99 over the fires both
    saw); while the new store executes, its p99 against the old store's own p99 from before
    the first switch (the old store only observes meanwhile, and an observer's lag is not its
    executing lag). The headline ``regression_p99`` is the worst period's."""
    switches = list(switches)
    who = _executor(switches)
    p_exec, tenants_p = _side_lags(primary, judged, lambda d: who(d) == "primary")
    s_exec, tenants_s = _side_lags(shadow, judged, lambda d: who(d) == "shadow")
    s_obs, _ = _side_lags(shadow, judged, lambda d: who(d) == "primary")
    p_obs, _ = _side_lags(primary, judged, lambda d: who(d) == "shadow")
    first_switch = next((t for t, side in switches if side == "shadow"), None)
    before = {k: v for k, v in p_exec.items() if first_switch is None or k[1] < first_switch}
    p = _summary(p_exec, "executed") if p_exec else _summary(p_obs, "observed")
    s = _summary(s_exec, "executed") if s_exec else _summary(s_obs, "observed")
    bounds = [t for t, _ in switches]
    periods = []
    for i, (lo, hi) in enumerate(zip([-np.inf, *bounds], [*bounds, np.inf])):
        side = "primary" if i == 0 else switches[i - 1][1]

        def inside(lags: dict, lo=lo, hi=hi) -> dict:
            return {k: v for k, v in lags.items() if lo <= k[1] < hi}

        if side == "primary":
            ex, ob = inside(p_exec), inside(s_obs)
            both = ex.keys() & ob.keys()
            ex_p99 = _p99([ex[k] for k in both])
            ob_p99 = _p99([ob[k] for k in both])
            reg = None if ex_p99 is None or ob_p99 is None else ob_p99 - ex_p99
            compares = "the new store observing against the old store executing, over the fires both saw"
            period = {
                "executor": "primary",
                "primary": _summary(ex, "executed"),
                "shadow": _summary(ob, "observed"),
                "same_fires": len(both),
                "primary_p99_same_fires": ex_p99,
                "shadow_p99_same_fires": ob_p99,
            }
        else:
            ex, ob = inside(s_exec), inside(p_obs)
            base = _summary(before, "executed")
            reg = None if not ex or base["p99"] is None else _summary(ex)["p99"] - base["p99"]
            compares = "the new store executing against the old store's own p99 before the switch"
            period = {
                "executor": "shadow",
                "shadow": _summary(ex, "executed"),
                "primary": _summary(ob, "observed"),
                "baseline": base,
            }
        if not ex and not ob:
            continue
        period.update(
            due_from=None if lo == -np.inf else float(lo),
            due_to=None if hi == np.inf else float(hi),
            regression_p99=reg,
            compares=compares,
        )
        periods.append(period)
    regs = [q for q in periods if q["regression_p99"] is not None]
    worst = max(regs, key=lambda q: q["regression_p99"]) if regs else None
    # per tenant: the new store's headline fires against the old store's executed ones
    s_lags = s_exec or s_obs
    per_p: dict[str, list[float]] = {}
    per_s: dict[str, list[float]] = {}
    for (tid, _), v in p_exec.items():
        per_p.setdefault(tenants_p.get(tid, ""), []).append(v)
    for (tid, _), v in s_lags.items():
        per_s.setdefault(tenants_s.get(tid, ""), []).append(v)
    tenants = []
    for tenant in per_p.keys() & per_s.keys():
        pl, sl = per_p[tenant], per_s[tenant]
        pp, sp = _p99(pl), _p99(sl)
        tenants.append(
            {
                "tenant": tenant,
                "fires_primary": len(pl),
                "fires_shadow": len(sl),
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
        "periods": periods,
        "regression_p99": None if worst is None else worst["regression_p99"],
        "regression_period": None if worst is None else periods.index(worst),
        "tenants": len(tenants),
        "worst_tenants": enough[:TENANTS_SHOWN],
        "worst_tenant": enough[0] if enough else None,
        "tenant_min_fires": TENANT_MIN_FIRES,
    }


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f} ms"


def period_figures(q: dict) -> tuple[float | None, float | None]:
    """(new store p99, old store p99) a period's regression is taken from."""
    if q["executor"] == "primary":
        return q.get("shadow_p99_same_fires"), q.get("primary_p99_same_fires")
    return q["shadow"]["p99"], (q.get("baseline") or {}).get("p99")


def period_text(lag: dict, origin: float = 0.0) -> str:
    """The worst period's regression in words: which figures, over which due times."""
    i = lag.get("regression_period")
    if i is None:
        return "no period with both figures"
    q = lag["periods"][i]
    new, old = period_figures(q)
    if q["executor"] == "primary":
        return (
            f"new store observing p99 {_ms(new)} - old store executing p99 {_ms(old)} on the same "
            f"{q['same_fires']:,} fires"
        )
    return f"new store executing p99 {_ms(new)} - old store's p99 before the switch {_ms(old)}"


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
                f"lag regression {_ms(reg)} ({period_text(lag)}) exceeds --max-lag-regression "
                f"{_ms(max_lag_regression_ms)}"
            )
    else:
        checks["lag_regression_p99"] = {"value": reg, "limit": None, "limit_from": "none given", "ok": True}
    reasons.extend(more_reasons or [])
    return Verdict(go=not reasons, reasons=reasons, checks=checks)
