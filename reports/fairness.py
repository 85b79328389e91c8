"""The fairness scorecard: how evenly a design serves its tenants, from ``fires.parquet`` alone.

Every figure is over the fires **due in the measured window** (one row per ``(timer_id, due_at)``
key, when it became due in the store: the accounting of :func:`metrics.accounting.fire_accounting`),
so a tenant whose fires never arrived is in it, infinitely late:

* per tenant: due fires, on time, late, missed (pending + lost), lag p50 and p99;
* **Jain's fairness index** over per-tenant goodput relative to what the tenant was offered
  (``x_t`` = on-time fires / due fires): ``(sum x)^2 / (n * sum x^2)``, 1.0 when every tenant
  got the same share of its own load on time, ``1/n`` when one tenant got everything;
* **worst / median tenant p99**: the worst tenant's lag p99 over the median tenant's;
* **starvation bound**: the longest any tenant with due work went without a fire **while other
  tenants fired** (a global stall, when nobody fires, is not starvation: it shows in the lag).

Pure: the tests compute these by hand on small synthetic logs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

TENANT_COLUMNS = ["tenant", "due", "on_time", "late", "missed", "p50_ms", "p99_ms"]


@dataclass
class Scorecard:
    tenants: pd.DataFrame  # TENANT_COLUMNS, largest tenant (most due fires) first
    jain: float | None  # Jain's index over on-time share per tenant
    worst_tenant: str | None
    worst_p99_ms: float | None  # math.inf when the worst tenant's p99 fire never arrived
    median_p99_ms: float | None
    worst_over_median: float | None
    starved_s: float | None  # the starvation bound
    starved_tenant: str | None
    notes: list[str] = field(default_factory=list)

    @property
    def n_tenants(self) -> int:
        return len(self.tenants)


def _pct_ms(lags_s: np.ndarray, pct: float) -> float:
    """The nearest-rank percentile (as :func:`metrics.accounting.lag_percentiles_ms`), in ms;
    ``inf`` when it falls among fires that never arrived."""
    v = np.sort(lags_s)
    x = float(v[max(0, int(math.ceil(pct / 100.0 * len(v))) - 1)])
    return x * 1000.0


def jain_index(shares: np.ndarray) -> float | None:
    x = np.asarray(shares, float)
    if len(x) == 0:
        return None
    total_sq = float((x * x).sum())
    if total_sq == 0:
        return 1.0 if len(x) else None  # nobody got anything: equally (un)served
    return float(x.sum() ** 2 / (len(x) * total_sq))


def due_keys(fires: pd.DataFrame, measure_start: float, measure_end: float) -> pd.DataFrame:
    """One row per ``(timer_id, due_at)`` key due in ``[measure_start, measure_end)``: tenant,
    ``due_eff`` (when it became due) and ``fired`` (first delivery, NaN when never) and ``lag``
    (inf when never)."""
    if fires.empty:
        return pd.DataFrame({"tenant": [], "due_eff": [], "fired": [], "lag": []})
    due_eff = np.fmax(fires["due_at"].to_numpy(float), fires["armed_at"].to_numpy(float))
    df = pd.DataFrame(
        {
            "id": fires["timer_id"].to_numpy(object),
            "due_us": np.rint(fires["due_at"].to_numpy(float) * 1e6).astype(np.int64),
            "tenant": fires["tenant_id"].astype(str).to_numpy(object),
            "due_eff": due_eff,
            "fired": fires["fired_at"].to_numpy(float),
            "lag": fires["lag_s"].to_numpy(float),
        }
    )
    first = df.sort_values("fired", na_position="last", kind="stable").drop_duplicates(["id", "due_us"])
    first = first[(first["due_eff"] >= measure_start) & (first["due_eff"] < measure_end)]
    lag = np.where(first["fired"].notna(), first["lag"], np.inf)
    return first.assign(lag=lag)[["tenant", "due_eff", "fired", "lag"]].reset_index(drop=True)


def starvation(keys: pd.DataFrame, fires: pd.DataFrame, measure_end: float) -> tuple[float | None, str | None]:
    """The longest wait, over tenants, from one of its fires becoming due (``keys``: those due in
    the window) to that tenant's next delivery (any of its fires, the drain's included), counted
    only when some other tenant fired meanwhile. A key never delivered waits until the tenant's
    next delivery or the end of the records."""
    if keys.empty:
        return None, None
    fired = fires["fired_at"].to_numpy(float)
    got = ~np.isnan(fired)
    everyone = np.sort(fired[got])
    end = max(measure_end, float(everyone[-1]) if len(everyone) else measure_end)
    by_tenant = pd.Series(fired[got]).groupby(fires["tenant_id"].astype(str).to_numpy(object)[got])
    worst, who = 0.0, None
    for tenant, k in keys.groupby("tenant", sort=False):
        own = np.sort(by_tenant.get_group(tenant).to_numpy(float)) if tenant in by_tenant.groups else np.zeros(0)
        due = k["due_eff"].to_numpy(float)
        i = np.searchsorted(own, due, side="left")  # the tenant's first delivery at or after due
        nxt = own[np.minimum(i, len(own) - 1)] if len(own) else np.full(len(due), end)
        nxt = np.where(i < len(own), nxt, end)
        # deliveries to anyone strictly inside (due, next): none of them the tenant's own
        others = np.searchsorted(everyone, nxt, side="left") - np.searchsorted(everyone, due, side="right")
        wait = np.where(others > 0, nxt - due, 0.0)
        j = int(np.argmax(wait))
        if wait[j] > worst:
            worst, who = float(wait[j]), str(tenant)
    return worst, who


def scorecard(fires: pd.DataFrame, measure_start: float, measure_end: float, on_time_s: float) -> Scorecard:
    keys = due_keys(fires, measure_start, measure_end)
    notes: list[str] = []
    if keys.empty:
        return Scorecard(
            pd.DataFrame(columns=TENANT_COLUMNS),
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            ["no fire was due in the measured window"],
        )
    rows = []
    for tenant, k in keys.groupby("tenant", sort=False):
        lag = k["lag"].to_numpy(float)
        got = np.isfinite(lag)
        rows.append(
            {
                "tenant": str(tenant),
                "due": int(len(k)),
                "on_time": int((got & (lag <= on_time_s)).sum()),
                "late": int((got & (lag > on_time_s)).sum()),
                "missed": int((~got).sum()),
                "p50_ms": _pct_ms(lag, 50.0),
                "p99_ms": _pct_ms(lag, 99.0),
            }
        )
    tenants = (
        pd.DataFrame(rows, columns=TENANT_COLUMNS)
        .sort_values(["due", "tenant"], ascending=[False, True], kind="stable")
        .reset_index(drop=True)
    )
    shares = (tenants["on_time"] / tenants["due"]).to_numpy(float)
    p99 = tenants["p99_ms"].to_numpy(float)
    worst_i = int(np.argmax(p99))
    median = float(np.median(p99))
    if len(tenants) == 1:
        notes.append("one tenant: fairness across tenants does not apply")
    ratio = None
    if median > 0 and math.isfinite(median):
        ratio = float(p99[worst_i] / median)
    elif median == 0 and p99[worst_i] == 0:
        ratio = 1.0
    starved_s, starved = starvation(keys, fires, measure_end)
    return Scorecard(
        tenants=tenants,
        jain=jain_index(shares),
        worst_tenant=str(tenants["tenant"].iloc[worst_i]),
        worst_p99_ms=float(p99[worst_i]),
        median_p99_ms=median,
        worst_over_median=ratio,
        starved_s=starved_s,
        starved_tenant=starved,
        notes=notes,
    )
