"""The soak's steady/growing verdict (the least-squares trend test of ``bench capacity``) on
synthetic series, and the neighbour's figures from a synthetic pgbench latency log."""

from __future__ import annotations

import numpy as np
import pytest

from metrics import neighbour as nb
from metrics.trend import verdict

MINUTES = np.arange(60.0)  # an hour of per-minute bins


def test_a_flat_series_is_steady():
    rng = np.random.default_rng(1)
    v = verdict(MINUTES, 5000 + rng.normal(0, 50, len(MINUTES)))
    assert v["verdict"] == "steady" and abs(v["climb"]) < v["limit"]


def test_a_slowly_growing_series_is_growing():
    """+40% of its level over the hour, with noise a tenth of the level: growing."""
    rng = np.random.default_rng(2)
    y = 1000 + MINUTES * (400 / 60) + rng.normal(0, 100, len(MINUTES))
    v = verdict(MINUTES, y)
    assert v["verdict"] == "growing"
    assert v["climb"] == pytest.approx(400, rel=0.25) and v["climb"] > 2 * v["stderr_climb"]


def test_a_noisy_series_without_a_trend_is_steady():
    """Noise as large as the level, no slope: the climb is within two standard errors."""
    rng = np.random.default_rng(3)
    y = np.abs(1000 + rng.normal(0, 1000, len(MINUTES)))
    assert verdict(MINUTES, y)["verdict"] == "steady"


def test_a_small_climb_is_steady_even_when_significant():
    """+5% of the level over the span with almost no noise: real, but below a quarter of the level."""
    y = 1000 + MINUTES * (50 / 60) + np.sin(MINUTES)
    v = verdict(MINUTES, y)
    assert v["climb"] > 2 * v["stderr_climb"] and v["verdict"] == "steady"


def test_a_series_near_zero_is_judged_against_its_floor():
    y = 0.001 * MINUTES  # doubles many times over, but stays far below the floor
    assert verdict(MINUTES, y, floor=1.0)["verdict"] == "steady"
    assert verdict(MINUTES, y)["verdict"] == "growing"


def test_too_few_points_have_no_verdict():
    assert verdict([0.0, 1.0], [1.0, 2.0])["verdict"] is None
    assert verdict(MINUTES[:5], [1.0, np.nan, np.nan, np.nan, 2.0])["verdict"] is None


def test_neighbour_figures_from_a_latency_log(tmp_path):
    """client tx latency_us script epoch epoch_us lag: a window by completion time, failed
    transactions counted apart, a line cut short by a kill skipped."""
    (tmp_path / "neighbour").mkdir()
    lines = []
    t0 = 1_700_000_000
    for i in range(1000):
        lat_us = 1000 + i  # 1.000 .. 1.999 ms
        lines.append(f"{i % 4} {i} {lat_us} 0 {t0 + i // 100} {(i % 100) * 10_000} 12")
    lines.append(f"0 1000 failed 0 {t0 + 5} 500000 0")
    lines.append(f"1 1001 3000 0 {t0 + 5}")  # cut short
    (tmp_path / "neighbour" / "run.123").write_text("\n".join(lines) + "\n")
    end, lat = nb.read_log(nb.log_files(tmp_path, "run"))
    assert len(end) == 1001 and np.isnan(lat).sum() == 1
    f = nb.figures(end, lat, t0 + 2, t0 + 7)  # completions in seconds 2..6: transactions 200..699
    assert f["transactions"] == 500 and f["failed"] == 1
    assert f["tx_per_s"] == pytest.approx(100.0)
    want = np.arange(1200, 1700) / 1000.0
    assert f["p50_ms"] == pytest.approx(np.percentile(want, 50))
    assert f["p99_ms"] == pytest.approx(np.percentile(want, 99))
    assert f["p999_ms"] == pytest.approx(np.percentile(want, 99.9))
    minutes = nb.per_minute(end, lat, t0, t0 + 10, every_s=5)
    assert minutes["t_s"] == [0, 5] and minutes["tx_per_s"] == [100.0, 100.0]
