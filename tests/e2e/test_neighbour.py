"""``bench run --neighbour oltp --readers``: the neighbour's figures are what pgbench's own
latency log says, its baseline ran alone, and the readers' held horizon shows in the samples.

One short run (a few seconds of window, a low neighbour rate) on the shared embedded Postgres;
every figure is recomputed here from the files pgbench and the readers wrote.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

RATE = 80  # tx/s: enough transactions in a 6 s window for a p99, little load on a shared machine


@pytest.fixture(scope="module")
def neighbour_run(tmp_path_factory, bench) -> Path:
    out = tmp_path_factory.mktemp("neighbour") / "runs"
    res = bench(
        "run",
        "--scheduler",
        "pg_leased",
        "--workload",
        "smoke",
        "--duration",
        "6s",
        "--warmup",
        "2s",
        "--neighbour",
        "oltp",
        "--neighbour-rate",
        str(RATE),
        "--readers",
        "2x4s",
        "--out",
        str(out),
        timeout=300,
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "neighbour p99 ×" in res.stdout
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    return run_dir


def _log(run_dir: Path, prefix: str) -> tuple[np.ndarray, np.ndarray]:
    """(completion time, latency ms) of every committed transaction, read straight from pgbench's
    ``-l`` lines: client transaction latency_us script epoch_s epoch_us [lag]. A complete run lets
    pgbench end by itself, so its last line is whole; the check still skips a cut one."""
    ends, lats = [], []
    files = sorted((run_dir / "neighbour").glob(f"{prefix}.*"))
    assert files, f"no pgbench latency log {prefix}.*"
    for path in files:
        for line in path.read_text().splitlines():
            f = line.split()
            if f[2].isdigit():
                ends.append(int(f[4]) + int(f[5]) / 1e6)
                lats.append(int(f[2]) / 1000.0)
    return np.array(ends), np.array(lats)


def _expected(ends, lats, start, end) -> dict:
    keep = (ends >= start) & (ends < end)
    lat = lats[keep]
    return {
        "transactions": int(keep.sum()),
        "tx_per_s": keep.sum() / (end - start),
        "p50_ms": float(np.percentile(lat, 50)),
        "p99_ms": float(np.percentile(lat, 99)),
        "p999_ms": float(np.percentile(lat, 99.9)),
    }


def test_neighbour_figures_are_the_latency_log_over_the_window(neighbour_run):
    summary = json.loads((neighbour_run / "summary.json").read_text())
    config = json.loads((neighbour_run / "config.json").read_text())
    n = summary["neighbour"]
    assert n["kind"] == "oltp" and n["rate_per_s"] == RATE
    w = config["window"]
    ends, lats = _log(neighbour_run, "run")
    want = _expected(ends, lats, w["measure_start"], w["measure_end"])
    for key, value in want.items():
        assert n["run"][key] == pytest.approx(value, rel=1e-9), key
    base = config["neighbour"]["baseline"]
    b_ends, b_lats = _log(neighbour_run, "baseline")
    want_b = _expected(b_ends, b_lats, base["start"], base["end"])
    for key, value in want_b.items():
        assert n["baseline"][key] == pytest.approx(value, rel=1e-9), key
    # the baseline lasts as long as the window, and the neighbour ran open-loop near its rate
    assert base["end"] - base["start"] == pytest.approx(w["measure_end"] - w["measure_start"])
    assert n["baseline"]["tx_per_s"] == pytest.approx(RATE, rel=0.35)
    assert n["p99_ratio"] == pytest.approx(n["run"]["p99_ms"] / n["baseline"]["p99_ms"])
    # no password and no connection string in pgbench's argv: it reads libpq's environment
    assert "postgresql://" not in (neighbour_run / "neighbour" / "pgbench-run.txt").read_text()


def test_the_baseline_ran_alone(neighbour_run):
    """Every transaction of the baseline ended before the first fire was armed or delivered, and
    before the neighbour beside the scheduler started."""
    config = json.loads((neighbour_run / "config.json").read_text())
    b_ends, _ = _log(neighbour_run, "baseline")
    fired = pq.read_table(neighbour_run / "fires.parquet", columns=["fired_at"]).column("fired_at").to_numpy()
    fired = fired[np.isfinite(fired)]
    assert len(fired) and b_ends.max() < fired.min()
    assert b_ends.max() < config["window"]["arm_start"]
    assert b_ends.max() < config["neighbour"]["run"]["started_at"]
    r_ends, _ = _log(neighbour_run, "run")
    assert r_ends.min() > b_ends.max()


def test_a_readers_held_horizon_shows_in_the_samples(neighbour_run):
    holds = [json.loads(x) for x in (neighbour_run / "readers.jsonl").read_text().splitlines()]
    assert {h["reader"] for h in holds} == {0, 1} and all(h.get("xmin") for h in holds)
    s = pq.read_table(neighbour_run / "samples.parquet").to_pandas()
    age = s[(s.scope == "run") & (s.metric == "oldest_xmin_age_s")].sort_values("t")
    xids = s[(s.scope == "run") & (s.metric == "oldest_xmin_age_xids")]
    seen = 0
    for t, value in zip(age.t, age.value):
        # the longest-open hold at t: the horizon is at least that old (the sample's own read
        # of pg_stat_activity lies within a second of t)
        open_ = [h for h in holds if h["start"] + h["read_s"] < t - 0.5 and h["end"] > t + 0.5]
        if not open_:
            continue
        seen += 1
        assert value >= t - min(h["start"] for h in open_) - 1.0, (t, value, open_)
    assert seen >= 3, "no sample fell inside a hold"
    assert xids.value.max() > 0
