"""The summary's accounting, recomputed from ``fires.parquet`` with plain pandas and numpy (not
through :mod:`metrics.rundir`), so the end-to-end tests check the run's figures independently."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd


def due_keys(f: pd.DataFrame) -> pd.DataFrame:
    """One row per (timer_id, due_at): the first delivery, or the undelivered row."""
    d = f.assign(due_us=(f["due_at"] * 1e6).round().astype("int64"), due_eff=np.maximum(f["due_at"], f["armed_at"]))
    return d.sort_values("fired_at", na_position="last", kind="stable").drop_duplicates(["timer_id", "due_us"])


def outcomes(f: pd.DataFrame, window: dict, on_time_s: float) -> tuple[dict, np.ndarray]:
    """(outcome counts, lag in seconds of every key due in the window with inf for undelivered)."""
    d = due_keys(f)
    w = d[(d["due_eff"] >= window["measure_start"]) & (d["due_eff"] < window["measure_end"])]
    got = w["fired_at"].notna()
    held = w["held_at_end"]
    lost = ~got & (held == False)  # noqa: E712 (null means not asked: pending)
    counts = {
        "due": len(w),
        "on_time": int((got & (w["lag_s"] <= on_time_s)).sum()),
        "late": int((got & (w["lag_s"] > on_time_s)).sum()),
        "pending": int((~got & ~lost).sum()),
        "lost": int(lost.sum()),
    }
    return counts, np.where(got, w["lag_s"].to_numpy(dtype=float), np.inf)


def nearest_rank_ms(lags_s: np.ndarray, pct: float):
    """The summary's percentile: nearest rank, in ms; "not delivered" among undelivered fires."""
    v = np.sort(lags_s)
    x = v[max(0, math.ceil(pct / 100 * len(v)) - 1)]
    return "not delivered" if np.isinf(x) else x * 1000.0


def check_summary(s: dict, f: pd.DataFrame, cfg: dict) -> None:
    """Every outcome count, rate and percentile of ``s`` equals its recomputation from ``f``."""
    window = cfg["window"]
    counts, lags = outcomes(f, window, cfg["workload"]["on_time_s"])
    assert s["outcomes"] == counts, (s["outcomes"], counts)
    assert sum(counts[k] for k in ("on_time", "late", "pending", "lost")) == counts["due"]
    measured = window["measure_end"] - window["measure_start"]
    assert s["offered_rate"] == (counts["due"] / measured if measured > 0 else None)
    d = due_keys(f)
    first_in = ((d["fired_at"] >= window["measure_start"]) & (d["fired_at"] < window["measure_end"])).sum()
    assert s["fires"] == first_in and s["achieved_rate"] == first_in / measured
    for key, pct in (("p50", 50), ("p90", 90), ("p99", 99), ("p999", 99.9), ("max", 100)):
        want = nearest_rank_ms(lags, pct) if len(lags) else None
        got = s["lag_ms"][key]
        if isinstance(want, float):
            assert got == want or abs(got - want) < 1e-6, (key, got, want)
        else:
            assert got == want, (key, got, want)
    fired = f["fired_at"].notna()

    def keyed(rows: pd.DataFrame) -> pd.DataFrame:
        # due_us from the selected rows themselves: a Series from all of f assigned to an empty
        # selection would bring every row of f with it (pandas adopts its index)
        return pd.DataFrame({"timer_id": rows["timer_id"], "due_us": (rows["due_at"] * 1e6).round().astype("int64")})

    keys = keyed(f[fired])
    assert s["duplicate_fires"] == len(keys) - len(keys.drop_duplicates())
    eff = keyed(f[f["effect_delivered"]])
    assert s["duplicate_effects"] == len(eff) - len(eff.drop_duplicates())
    ext = keyed(f[f["external_effect"]])
    assert s["external_effects"] == len(ext)
    assert s["duplicate_external_effects"] == len(ext) - len(ext.drop_duplicates())
    assert s["early"] == int((fired & (f["lag_s"] < -0.001)).sum())
    assert s["redelivered_fires"] == int((fired & (f["attempt"] > 1)).sum())
