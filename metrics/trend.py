"""The least-squares trend test: a line through a series, its climb over the span and the climb's
standard error. ``bench capacity`` judges a lag that rises across its window with it
(:func:`harness.capacity_rule.lag_trend`); ``bench soak`` says "steady" or "growing" for each
per-minute series with it (:func:`verdict`).

A series **grows** when its line climbs more than ``limit`` over the span and the climb is more
than two standard errors (noise around a flat line does not count, nor does a slope too small to
matter). For a soak series the limit is :data:`GROWTH_SHARE` of the series' own level (its median
absolute value, at least the series' floor), so a figure that climbs by a quarter of itself over
the soak is growing, whatever its unit.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

GROWTH_SHARE = 0.25  # a series that climbs by a quarter of its level over the span is growing


def climb(x: np.ndarray, y: np.ndarray, span: float | None = None) -> tuple[float, float, float] | None:
    """(slope, slope x span, standard error of that climb) of the least-squares line through
    ``(x, y)``; ``span`` defaults to ``x``'s range. None with fewer than 3 points."""
    x = np.asarray(x, float)
    y = np.asarray(y, float)
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    if len(x) < 3:
        return None
    slope, intercept = np.polyfit(x, y, 1)
    resid = y - (slope * x + intercept)
    sxx = float(((x - x.mean()) ** 2).sum())
    se = math.sqrt(float((resid**2).sum()) / max(1, len(x) - 2) / sxx) if sxx > 0 else math.inf
    span = float(x.max() - x.min()) if span is None else float(span)
    return float(slope), float(slope * span), float(se * span)


def verdict(x, y, floor: float = 0.0, share: float = GROWTH_SHARE) -> dict[str, Any]:
    """ "steady" or "growing" (or None: fewer than 3 points) for one series, with the figures the
    verdict rests on."""
    y_a = np.asarray(y, float)
    finite = y_a[np.isfinite(y_a)]
    level = float(np.median(np.abs(finite))) if len(finite) else 0.0
    limit = share * max(level, floor)
    fit = climb(x, y_a)
    if fit is None:
        return {
            "verdict": None,
            "slope": None,
            "climb": None,
            "stderr_climb": None,
            "limit": limit,
            "points": int(len(finite)),
        }
    slope, c, se = fit
    growing = c > limit and c > 2 * se
    return {
        "verdict": "growing" if growing else "steady",
        "slope": slope,
        "climb": c,
        "stderr_climb": se,
        "limit": limit,
        "points": int(len(finite)),
    }
