"""What became of the long-horizon timers moved while armed (``moves.parquet``, written by the
session from :mod:`loadgen.moves`' plan): the lag of the moved timers that came due in the
window, counted at their new time, and every fire at an old time, a failure (the move did not
take). Pure: a fires table and a moves table in, figures out.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

MATCH_S = 2e-6  # a fire's due time equals a planned time to the microsecond (timestamptz)


def move_figures(fires: pd.DataFrame, moves: pd.DataFrame) -> dict[str, Any]:
    """``moves``: ``timer_id, kind, moved_at, old_due, new_due``; ``fires``: ``fires.parquet``.

    A fire at an old time counts when it arrived after the move was made (a fire delivered before
    the move is the old time's, rightly). The moved timers due in the window are the near ones
    not moved away again; undelivered ones are infinitely late in the percentiles, as everywhere."""
    out: dict[str, Any] = {
        "moves": int(len(moves)),
        "by_kind": {k: int(v) for k, v in moves["kind"].value_counts().items()} if len(moves) else {},
        "due_in_window": 0,
        "delivered": 0,
        "lag_ms": {"p50": None, "p99": None, "max": None},
        "fires_at_old_time": 0,
        "old_time_examples": [],
    }
    if not len(moves):
        return out
    got = fires[fires["fired_at"].notna()] if "fired_at" in fires else fires.iloc[0:0]
    by_id = {tid: g for tid, g in got.groupby("timer_id")} if len(got) else {}
    bad: list[str] = []
    for m in moves.itertuples(index=False):
        g = by_id.get(m.timer_id)
        if g is None or not np.isfinite(m.old_due):
            continue
        hit = (np.abs(g["due_at"].to_numpy(float) - m.old_due) < MATCH_S) & (
            g["fired_at"].to_numpy(float) >= m.moved_at
        )
        if hit.any():
            bad.append(m.timer_id)
    out["fires_at_old_time"] = len(bad)
    out["old_time_examples"] = bad[:5]
    away = set(moves.loc[moves["kind"] == "away", "timer_id"])
    near = moves[(moves["kind"] == "near") & ~moves["timer_id"].isin(away)]
    lags: list[float] = []
    for m in near.itertuples(index=False):
        g = by_id.get(m.timer_id)
        lag = np.inf
        if g is not None:
            at = g[np.abs(g["due_at"].to_numpy(float) - m.new_due) < MATCH_S]
            if len(at):
                lag = float(at["lag_s"].min())
        lags.append(lag)
    out["due_in_window"] = len(lags)
    out["delivered"] = int(np.isfinite(lags).sum())
    if lags:
        arr = np.sort(np.asarray(lags))
        out["lag_ms"] = {q: _ms(np.quantile(arr, p, method="higher")) for q, p in (("p50", 0.5), ("p99", 0.99))}
        out["lag_ms"]["max"] = _ms(arr[-1])
    return out


def _ms(v: float) -> float | None:
    """A lag in ms; None when it falls among the undelivered (infinitely late)."""
    return float(v) * 1000.0 if np.isfinite(v) else None


def failure_line(figures: dict[str, Any]) -> str | None:
    n = figures.get("fires_at_old_time") or 0
    if not n:
        return None
    return (
        f"{n} moved timer(s) fired at the time they were moved away from "
        f"(e.g. {', '.join(figures.get('old_time_examples') or [])}): the move did not take"
    )
