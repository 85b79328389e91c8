"""Cost at your rate: the per-fire figures of a run as what an operator budgets, per day (or per
hour) at ``R`` fires/s, ``R`` being the run's target rate or the reader's ``--project-rate``.

A per-fire figure times ``R`` is exact arithmetic; what it rests on is the window the figure was
measured over, so every row says how long that window was. Growth (table + index bytes) is the
only extrapolation: a least-squares line through the window's size samples, its slope's standard
error stated, and flagged when the window is too short to tell growth from noise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

DAY_S = 86_400.0
HOUR_S = 3_600.0


@dataclass
class Projection:
    figure: str  # what is projected, with its unit
    value: float | None  # None: not measured in this run (``why`` says so)
    per_fire: float | None  # the measured figure it comes from
    basis: str  # where the per-fire figure comes from
    why: str = ""  # why it is not available, or a caveat
    spread: float | None = None  # +/- (one standard error), where the figure is an extrapolation


def rate_of(summary: dict, project_rate: float | None) -> float | None:
    if project_rate:
        return float(project_rate)
    return summary.get("target_rate") or summary.get("achieved_rate")


# Projecting further than this factor from the measured rate (either way) gets a caveat.
FAR_FROM_MEASURED = 2.0


def far_projection(summary: dict, rate: float | None) -> str | None:
    """A caveat when ``rate`` is more than :data:`FAR_FROM_MEASURED` times away from the rate the
    run achieved, else None. Per-fire figures carry the costs that do not follow the fire rate
    (claimers polling an empty table, controllers, timers, background writers) spread over the
    fires measured: projected up they overstate the cost, projected down they understate it."""
    measured = summary.get("achieved_rate") or summary.get("target_rate")
    if not rate or not measured:
        return None
    factor = rate / float(measured)
    if 1 / FAR_FROM_MEASURED <= factor <= FAR_FROM_MEASURED:
        return None
    way = "overstate" if factor > 1 else "understate"
    return (
        f"measured at {float(measured):,.4g} fires/s, projected to {rate:,.4g} ({factor:,.3g}x): the per-fire "
        f"figures include costs that do not follow the fire rate (idle polls, timers, background writes), "
        f"so these projections likely {way} the cost; run at the rate you project to for figures to budget by"
    )


def _get(d: dict | None, *path: str):
    for key in path:
        if not isinstance(d, dict):
            return None
        d = d.get(key)
    return d


def _window_delta(
    samples: pd.DataFrame, metric: str, start: float, end: float, scopes: set[str] | None = None
) -> float | None:
    """The change of a cumulative counter over ``[start, end]``, summed over relations (scopes
    other than ``run`` and servers), or over ``scopes`` when given."""
    if samples.empty:
        return None
    s = samples[(samples["metric"] == metric) & (samples["t"] >= start) & (samples["t"] <= end)]
    if scopes is not None:
        s = s[s["scope"].isin(scopes)]
    else:
        s = s[(s["scope"] != "run") & ~s["scope"].astype(str).str.startswith("server:")]
    if s.empty:
        return None
    total = 0.0
    for _, part in s.sort_values("t").groupby("scope"):
        v = part["value"].to_numpy(float)
        total += float(v[-1] - v[0])
    return total


def growth(samples: pd.DataFrame, start: float, end: float) -> tuple[float, float, float] | None:
    """(bytes per second, standard error, window s) of the design's tables + indexes (heap and
    TOAST), a least-squares slope through the window's samples."""
    if samples.empty:
        return None
    s = samples[
        samples["metric"].isin(["table_bytes", "index_bytes"]) & (samples["t"] >= start) & (samples["t"] <= end)
    ]
    s = s[(s["scope"] != "run") & ~s["scope"].astype(str).str.startswith("server:")]
    if s.empty:
        return None
    total = s.groupby("t")["value"].sum().sort_index()
    # only the sample times where every relation reported (a partial sum is not a size)
    counts = s.groupby("t")["value"].count().sort_index()
    total = total[counts == counts.max()]
    if len(total) < 3:
        return None
    t = total.index.to_numpy(float) - float(total.index[0])
    y = total.to_numpy(float)
    slope, intercept = np.polyfit(t, y, 1)
    resid = y - (slope * t + intercept)
    dof = max(1, len(t) - 2)
    se = math.sqrt(float((resid**2).sum()) / dof / float(((t - t.mean()) ** 2).sum())) if len(t) > 2 else math.inf
    return float(slope), float(se), float(t[-1])


def projections(summary: dict, samples: pd.DataFrame, window: dict, rate: float | None) -> list[Projection]:
    """Every figure per day (dead tuples per hour) at ``rate`` fires/s."""
    measured_s = summary.get("measured_s") or 0.0
    basis = f"per fire over the {measured_s:.0f} s window"
    out: list[Projection] = []

    def add(figure: str, per_fire, scale: float, unit_div: float = 1.0, why_missing: str = "not measured in this run"):
        if per_fire is None or rate is None:
            out.append(
                Projection(figure, None, per_fire, basis, why_missing if per_fire is None else "no rate to project at")
            )
        else:
            out.append(Projection(figure, float(per_fire) * rate * scale / unit_div, float(per_fire), basis))

    per_fire = summary.get("per_fire") or {}
    add("WAL (GB/day)", per_fire.get("wal_bytes"), DAY_S, 1e9)
    add("Postgres row writes, heap + TOAST (M/day)", per_fire.get("row_writes"), DAY_S, 1e6)
    temporal = _get(summary, "servers", "temporal", "per_fire") or {}
    if "temporal" in (_get(summary, "bill", "stores") or []) or temporal:
        add(
            "Temporal persistence requests (M/day)",
            temporal.get("persistence_requests"),
            DAY_S,
            1e6,
            "the Temporal server's metrics were not scraped",
        )
        add(
            "Temporal persistence writes (M/day)",
            temporal.get("persistence_writes"),
            DAY_S,
            1e6,
            "the Temporal server's metrics were not scraped",
        )
    add("bytes written, every store (GB/day)", _get(summary, "bill", "bytes_written"), DAY_S, 1e9)

    start, end = window.get("measure_start"), window.get("measure_end")
    fires = summary.get("fires") or 0
    if start is not None and end is not None and fires:
        upd = _window_delta(samples, "n_tup_upd", start, end)
        hot = _window_delta(samples, "n_tup_hot_upd", start, end)
        dele = _window_delta(samples, "n_tup_del", start, end)
        produced = None if upd is None or dele is None else (upd + dele) / fires
        add("dead tuples produced (k/hour)", produced, HOUR_S, 1e3)
        if out[-1].value is not None and hot is not None:
            out[-1].why = (
                f"{100 * hot / upd:.0f}% of the updates were HOT (pruned on the page, no vacuum needed)" if upd else ""
            )
        dead = _window_delta(samples, "n_dead_tup", start, end)
        cleared = None if produced is None or dead is None else produced - dead / fires
        add("dead tuples cleared by vacuum and pruning (k/hour)", cleared, HOUR_S, 1e3)
        g = growth(samples, start, end)
        if g is None or rate is None:
            out.append(
                Projection(
                    "table + index growth (GB/day)", None, None, basis, "fewer than three size samples in the window"
                )
            )
        else:
            slope, se, span = g
            # the slope is per second at the run's own rate; scale it to the projected rate
            run_rate = fires / measured_s if measured_s else None
            scale = rate / run_rate if run_rate else 1.0
            p = Projection(
                "table + index growth (GB/day)",
                slope * scale * DAY_S / 1e9,
                slope / run_rate if run_rate else None,
                f"least-squares slope over {span:.0f} s of size samples",
                spread=se * scale * DAY_S / 1e9,
            )
            if span < 300 or abs(slope) < 2 * se:
                p.why = (
                    "a short window: a steady table may still be filling its free space, so this is "
                    "an upper bound, not a forecast"
                    if span < 300
                    else "the slope is within two standard errors of zero"
                )
            out.append(p)
    return out
