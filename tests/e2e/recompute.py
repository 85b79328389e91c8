"""The summary's accounting, recomputed from ``fires.parquet`` and ``samples.parquet`` with plain
pandas and numpy (never through :mod:`metrics`), so the end-to-end tests check the run's figures
independently: lag from the fire times themselves (not the recorder's ``lag_s`` column), the
per-fire costs from the statistics the sampler read from the servers."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest


def lag_of(f: pd.DataFrame) -> pd.Series:
    """Seconds from where the lag clock starts (due, or armed when armed after its due time) to
    the delivery; NaN for an undelivered row."""
    return f["fired_at"] - np.maximum(f["due_at"], f["armed_at"])


def due_keys(f: pd.DataFrame) -> pd.DataFrame:
    """One row per (timer_id, due_at): the first delivery, or the undelivered row."""
    d = f.assign(
        due_us=(f["due_at"] * 1e6).round().astype("int64"),
        due_eff=np.maximum(f["due_at"], f["armed_at"]),
        lag=lag_of(f),
    )
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
        "on_time": int((got & (w["lag"] <= on_time_s)).sum()),
        "late": int((got & (w["lag"] > on_time_s)).sum()),
        "pending": int((~got & ~lost).sum()),
        "lost": int(lost.sum()),
    }
    return counts, np.where(got, w["lag"].to_numpy(dtype=float), np.inf)


def nearest_rank_ms(lags_s: np.ndarray, pct: float):
    """The summary's percentile: nearest rank, in ms; "not delivered" among undelivered fires."""
    v = np.sort(lags_s)
    x = v[max(0, math.ceil(pct / 100 * len(v)) - 1)]
    return "not delivered" if np.isinf(x) else x * 1000.0


def check_summary(s: dict, f: pd.DataFrame, cfg: dict) -> None:
    """Every outcome count, rate and percentile of ``s`` equals its recomputation from ``f``."""
    window = cfg["window"]
    got = f["fired_at"].notna()
    # the recorder's column says what the fire times say
    assert np.allclose(f.loc[got, "lag_s"], lag_of(f[got]), rtol=0, atol=1e-6)
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
    assert s["early"] == int((fired & (lag_of(f) < -0.001)).sum())
    assert s["redelivered_fires"] == int((fired & (f["attempt"] > 1)).sum())


def _nearest(series: pd.Series, when: float) -> float | None:
    """The value sampled nearest to ``when`` (the earlier one on a tie): the sampler samples at
    each edge of the window, so at an edge this is that sample."""
    if series.empty:
        return None
    gap = (series.index.to_series() - when).abs()
    return float(series[gap == gap.min()].iloc[0])


def window_delta(samples: pd.DataFrame, scopes, metric: str, window: dict) -> float | None:
    """A cumulative metric summed over ``scopes``, at the window's end minus at its start."""
    rows = samples[samples["scope"].isin(list(scopes)) & (samples["metric"] == metric)]
    by_t = rows.groupby("t")["value"].apply(lambda v: v.fillna(0.0).sum()).sort_index()
    a, b = _nearest(by_t, window["measure_start"]), _nearest(by_t, window["measure_end"])
    return None if a is None or b is None else b - a


def check_per_fire(s: dict, samples: pd.DataFrame, cfg: dict) -> int:
    """Row writes per fire of the design's tables (and of their TOAST tables), WAL per fire, and
    every per-fire figure of every server, from the samples; returns how many were checked."""
    window, n = cfg["window"], s["fires"]
    pf = s["per_fire"] or {}
    checked = 0

    def same(got, delta, what):
        nonlocal checked
        want = None if delta is None or not n else delta / n
        if want is None:
            assert got is None, (what, got)
        else:
            assert got == pytest.approx(want, rel=1e-9, abs=1e-12), (what, got, want)
        checked += 1

    scopes = set(samples["scope"])
    servers = sorted(x for x in scopes if x.startswith("server:"))
    for scope in servers:
        per = (s["servers"].get(scope.split(":", 1)[1]) or {}).get("per_fire") or {}
        for metric in sorted(set(samples.loc[samples["scope"] == scope, "metric"])):
            same(per.get(metric), window_delta(samples, {scope}, metric, window), (scope, metric))
    tables = {x for x in scopes if x != "run" and not x.startswith("server:") and not x.endswith("#toast")}
    toasts = {x for x in scopes if x.endswith("#toast")}
    if tables:
        for name, metric in (("inserts", "n_tup_ins"), ("updates", "n_tup_upd"), ("deletes", "n_tup_del")):
            same(pf.get(name), window_delta(samples, tables, metric, window), name)
            if toasts:
                same(pf.get(f"toast_{name}"), window_delta(samples, toasts, metric, window), f"toast_{name}")
    # WAL: pg_stat_wal's bytes, else the WAL position's advance
    wal = window_delta(samples, {"server:postgres"}, "wal_bytes", window)
    same(pf.get("wal_bytes"), wal if wal is not None else window_delta(samples, {"run"}, "wal_bytes", window), "wal")
    return checked
