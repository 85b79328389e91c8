"""``bench soak``: per-bin trends with verdicts, the readers over the middle third, and a soak
killed with SIGKILL still reported, as interrupted, with its trends so far.

Compressed: bins of 2 s instead of a minute, windows of seconds instead of an hour.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from harness import stack
from metrics.accounting import interrupted_summary
from metrics.soak import SOAK_STATEMENTS

SOAK = ["soak", "--scheduler", "pg_queue", "--workload", "smoke", "--warmup", "2s", "--soak-bin", "2s"]


def _only_run(out: Path) -> Path:
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    return run_dir


def test_a_short_soak_has_trends_readers_in_the_middle_third_and_recovery(bench, tmp_path):
    out = tmp_path / "runs"
    res = bench(*SOAK, "--duration", "12s", "--readers", "2x3s", "--out", str(out), timeout=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "soak (complete)" in res.stdout
    run_dir = _only_run(out)
    s = json.loads((run_dir / "summary.json").read_text())["soak"]
    assert s["state"] == "complete" and s["bin_s"] == 2.0 and len(s["t_s"]) == 6
    assert s["readers_start_s"] == pytest.approx(4.0) and s["readers_stop_s"] == pytest.approx(8.0)
    holds = [json.loads(x) for x in (run_dir / "readers.jsonl").read_text().splitlines()]
    w = json.loads((run_dir / "config.json").read_text())["window"]
    assert holds and all(h["start"] >= w["readers_start_at"] - 0.1 for h in holds)
    assert all(h["end"] <= w["readers_stop_at"] + 1.0 for h in holds)
    for name in ("dead_tuples", "bytes", "claim_ms", "claim_buffers", "lag_p99_ms"):
        assert s["trends"][name]["verdict"] in ("steady", "growing", None), name
        assert len(s["series"][name]) == len(s["t_s"])
    # the claim statement was found by its text: pg_queue's claim_due
    assert s["claim_statements"]["matched"] and s["claim_statements"]["matched"][0]["query"].startswith("WITH due AS")
    assert any(v is not None for v in s["series"]["claim_ms"])
    assert set(s["recovery"]) == {"dead_tuples", "claim_ms"}


def _drop_run_schemas(run_dir: Path) -> None:
    schema = json.loads((run_dir / "config.json").read_text()).get("schema")
    dsn = os.environ.get("TIMERBENCH_DSN") or stack.postgres().dsn()
    with psycopg.connect(dsn, autocommit=True) as conn:
        for name in (schema, f"{schema}_n"):
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


def _wait_for(cond, timeout: float, what: str) -> None:
    deadline = time.time() + timeout
    while not cond():
        assert time.time() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_a_killed_soak_reports_interrupted_with_its_trends_so_far(bench, tmp_path):
    out = tmp_path / "runs"
    log = tmp_path / "soak.log"
    with open(log, "w") as fh:
        proc = bench.popen(
            *SOAK, "--duration", "120s", "--readers", "2x4s", "--out", str(out), stdout=fh, stderr=subprocess.STDOUT
        )
    try:
        edges = lambda: list(out.glob(f"*/{SOAK_STATEMENTS}"))  # noqa: E731

        def bins_recorded() -> bool:
            assert proc.poll() is None, log.read_text()[-3000:]
            found = edges()
            return bool(found) and len(found[0].read_text().splitlines()) >= 9

        _wait_for(bins_recorded, 240, "nine bin edges of the soak (a fire segment closes every few seconds)")
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    run_dir = _only_run(out)
    try:
        assert not (run_dir / "summary.json").exists()
        summary = interrupted_summary(run_dir)
        assert not summary["complete"]
        s = summary["soak"]
        assert s["state"] == "interrupted" and len(s["t_s"]) >= 3
        assert s["trends"]["dead_tuples"]["verdict"] in ("steady", "growing")
        assert any(v is not None for v in s["series"]["claim_ms"])
        md = tmp_path / "report.md"
        res = bench("report", str(run_dir), "-o", str(tmp_path / "report.html"), "--markdown", str(md), timeout=120)
        assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
        assert "interrupted: trends so far" in md.read_text()  # the summary's line
        assert "interrupted: trends so far" in (tmp_path / "report.html").read_text()  # the soak table
    finally:
        _drop_run_schemas(run_dir)
