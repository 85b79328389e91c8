"""`bench scale` end to end: tiny real scales on the memory scheduler and on pg_leased, and one
killed after its first step (the rules themselves are tested on synthetic points in
tests/unit/test_scale.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from metrics import rundir

WORKLOAD = """\
interval: 2s..4s
tenants: 5
state_size: 512
provider_latency: {median: 5ms, p99: 20ms}
rate: 5/s
"""
SHORT = ["--rate", "5/s", "--duration", "3s", "--warmup", "2s", "--move-share", "0.05"]


@pytest.fixture()
def workload(tmp_path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(WORKLOAD)
    return path


def _scale_dir(out: Path) -> Path:
    (d,) = [p for p in out.iterdir() if p.name.startswith("scale-")]
    return d


def _check_steps(d: Path, name: str, populations: list[int]) -> list[dict]:
    data = json.loads((d / rundir.SCALE).read_text())
    assert data["complete"] is True and data["axis"] == "population"
    steps = data["designs"][name]["steps"]
    assert [s["population"] for s in steps] == populations
    for st in steps:
        assert st["status"] == "ok", st
        run = Path(st["run_dir"])
        assert run.parent == d
        s = rundir.read_summary(run)
        cfg = json.loads((run / rundir.CONFIG).read_text())
        assert cfg["workload"]["triggers"] == st["population"]
        assert s["arming"]["timers"] == st["population"] and s["arming"]["timers_per_s"] > 0
        f = st["figures"]
        assert f["arming"] == s["arming"] and f["rss_bytes"] > 0
        # the moved long-horizon timers: some came due in the window and fired there, none at an old time
        m = s["moves"]
        assert m["moves"] >= 20 and m["by_kind"]["near"] >= 2 and m["fires_at_old_time"] == 0
        assert m["delivered"] == m["due_in_window"] >= 1 and f["moved_lag_p99_ms"] is not None
        assert (run / rundir.MOVES).exists()
    return steps


def test_a_tiny_scale_on_memory_records_every_step_and_reports_it(bench, tmp_path, workload):
    out = tmp_path / "out"
    res = bench(
        "scale", "--scheduler", "memory", "--population", "200,1k", "--workload", str(workload), *SHORT, "--out",
        str(out), timeout=240,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    d = _scale_dir(out)
    _check_steps(d, "memory", [200, 1_000])
    data = json.loads((d / rundir.SCALE).read_text())
    fits = data["designs"]["memory"]["fits"]
    assert fits["rss_bytes"]["points"] == 2 and fits["rss_bytes"]["predicted"] > 0
    assert "scale of memory: 2 of 2 steps measured" in res.stdout
    page = (d / "report.html").read_text()
    assert 'id="scale"' in page and "figure-scale-memory" in page
    assert "## Scale: cost against the armed population" in (d / "report.md").read_text()


def test_a_tiny_scale_on_pg_leased_measures_storage_and_claim_cost(bench, tmp_path, workload):
    out = tmp_path / "out"
    res = bench(
        "scale", "--scheduler", "pg_leased", "--population", "200,1k", "--workload", str(workload), *SHORT, "--out",
        str(out), timeout=300,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    steps = _check_steps(_scale_dir(out), "pg_leased", [200, 1_000])
    small, large = (s["figures"] for s in steps)
    assert small["storage_bytes"] > 0 and large["storage_bytes"] >= small["storage_bytes"]
    assert small["claim_calls"] > 0 and small["claim_buffers_per_call"] > 0
    assert small["pg_cpu_ms_per_fire"] is not None
    assert steps[0]["fit"]["ok"] and steps[0]["fit"]["disk_free"] > 0  # checked against the data directory


def test_a_killed_scale_keeps_its_finished_steps(bench, tmp_path, workload):
    out = tmp_path / "out"
    proc = bench.popen(
        "scale", "--scheduler", "memory", "--population", "200,1k,2k", "--workload", str(workload), *SHORT,
        "--out", str(out), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.time() + 180
        data = None
        while time.time() < deadline:
            path = out.is_dir() and [p for p in out.iterdir() if p.name.startswith("scale-")]
            if path and (path[0] / rundir.SCALE).exists():
                data = json.loads((path[0] / rundir.SCALE).read_text())  # never half a file
                if any(s.get("status") == "ok" for s in data["designs"]["memory"]["steps"]):
                    break
            time.sleep(0.2)
        assert data is not None, "the scale wrote no finished step"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the scale and the step run under way
        proc.wait(30)
    d = _scale_dir(out)
    data = json.loads((d / rundir.SCALE).read_text())
    assert data["complete"] is False
    first = data["designs"]["memory"]["steps"][0]
    assert first["status"] == "ok" and first["population"] == 200
    assert (Path(first["run_dir"]) / rundir.SUMMARY).exists() and first["figures"]["arming"]["timers"] == 200
