"""`bench capacity` end to end: a short real search on the memory scheduler (the search rule itself
is tested on synthetic steps in tests/unit/test_capacity_rule.py)."""

from __future__ import annotations

import json
from pathlib import Path

from metrics import rundir

SHORT = ["--duration", "4s", "--warmup", "2s", "--interval", "2s..4s", "--no-pgbench"]


def test_a_short_search_on_memory_records_every_step_and_reports_it(bench, tmp_path):
    res = bench(
        "capacity",
        "--scheduler",
        "memory",
        "--start",
        "100/s",
        "--max-rate",
        "200/s",
        "--max-steps",
        "3",
        "--slo",
        "p99<5s,lost=0",
        "--out",
        str(tmp_path),
        *SHORT,
        timeout=240,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    (cap_dir,) = [p for p in tmp_path.iterdir() if p.name.startswith("capacity-")]
    data = json.loads((cap_dir / "capacity.json").read_text())
    assert data["complete"] is True and data["scheduler"] == "memory"
    steps = data["search"]["steps"]
    assert 2 <= len(steps) <= 3
    # the probe: the start rate, then up (held) or down (not held) by the factor
    assert steps[0]["rate"] == 100.0 and steps[0]["held"] is True, steps[0]
    assert steps[1]["rate"] == 200.0
    for st in steps:
        run = Path(st["run_dir"])
        assert run.parent == cap_dir and (run / rundir.SUMMARY).exists()
        s = rundir.read_summary(run)
        assert s["target_rate"] == st["rate"]
        assert st["figures"]["achieved"] == s["achieved_rate"] and st["figures"]["trend"]["seconds"] > 0
        assert st["held"] == (st["why"] is None)
    if steps[1]["held"]:  # 200/s is the top: confirmed there, or the search says why not
        assert steps[2]["rate"] == 200.0 and steps[2]["confirmation"] is True
        if steps[2]["held"]:
            assert data["search"]["rate"] == 200.0 and "capacity is higher" in data["search"]["stop_reason"]
    assert data["search"]["stop_reason"]
    assert "capacity of memory:" in res.stdout
    page = (cap_dir / "report.html").read_text()
    assert 'id="capacity"' in page and "figure-capacity-p99" in page
    md = (cap_dir / "report.md").read_text()
    assert "## Capacity search" in md
    # the answer judges each step by the search's --slo, not the report's default
    assert "p99<5s" in md.split("## Capacity search")[0] and "lag_p99<=10s" not in md


def test_a_bad_slo_is_a_usage_error(bench, tmp_path):
    res = bench("capacity", "--scheduler", "memory", "--slo", "p99<1", "--out", str(tmp_path), timeout=60)
    assert res.returncode == 2 and "give lag_p99 a unit" in res.stderr and "Traceback" not in res.stderr
    assert not any(tmp_path.iterdir())
