"""The bill end to end: a user's own database without the measurement extensions gets its figures
marked "not available" with the reason, and `bench compare --tuned-control` adds pg_queue with
pg_leased's autovacuum settings so the report tells tuning from design."""

from __future__ import annotations

import re
import uuid

import psycopg
from psycopg import sql

from metrics import rundir
from metrics.extensions import extensions

SHORT = ["--workload", "smoke", "--duration", "5s", "--warmup", "2s"]


def test_a_database_without_the_extensions_gets_not_available_and_why(bench, pg_dsn, tmp_path):
    bare = f"tb_bare_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(bare)))
    try:
        dsn = psycopg.conninfo.make_conninfo(pg_dsn, dbname=bare)
        why = {name: e.missing for name, e in extensions(dsn).items()}
        proc = bench(
            "run", "--scheduler", "pg_queue", *SHORT, "--dsn", dsn, "--out", str(tmp_path / "runs"), timeout=300
        )
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        run_dir = next((tmp_path / "runs").iterdir())
        s = rundir.read_summary(run_dir)
        assert s["unavailable"]["statements"] == why["pg_stat_statements"]
        assert s["unavailable"]["bloat"] == why["pgstattuple"]
        assert s["statements"] is None and s["bloat"] is None
        assert not (run_dir / rundir.STATEMENTS).exists() and not (run_dir / rundir.BLOAT).exists()
        # what needs no extension is still measured: writes, WAL, the server's processes
        assert s["per_fire"]["row_writes"] > 0 and s["per_fire"]["wal_records"] > 0
        assert s["bill"]["bytes_written"] is not None
        html = tmp_path / "r.html"
        proc = bench("report", str(run_dir), "-o", str(html))
        assert proc.returncode == 0, proc.stderr
        text = html.read_text()
        for row in ("dead_exact", "statement_ms_per_fire"):
            assert re.search(f'data-row="{row}" data-run="pg_queue" data-value="" title="[^"]+">not available', text), (
                row
            )
        assert f"is not created in database {bare}" in text  # the reason, under the table and in Table 3
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(bare)))


def test_compare_tuned_control_separates_tuning_from_design(bench, tmp_path):
    html = tmp_path / "r.html"
    proc = bench(
        "compare",
        "--schedulers",
        "pg_queue,pg_leased",
        "--tuned-control",
        *SHORT,
        "--no-calibrate",
        "--out",
        str(tmp_path / "runs"),
        "-o",
        str(html),
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = sorted((tmp_path / "runs").iterdir())
    configs = {
        (rundir.read_config(d).get("label") or rundir.read_config(d)["scheduler"]): rundir.read_config(d)
        for d in runs
        if d.is_dir()
    }
    assert set(configs) == {"pg_queue", "pg_queue, tuned", "pg_leased"}
    tuned, leased, plain = configs["pg_queue, tuned"], configs["pg_leased"], configs["pg_queue"]
    assert tuned["scheduler"] == "pg_queue" and tuned["options"]["autovacuum_tuned"] is True
    for key in ("autovacuum_scale_factor", "autovacuum_threshold_rows", "autovacuum_cost_delay_ms"):
        assert tuned["options"][key] == leased["options"][key]
    assert plain["options"]["autovacuum_tuned"] is False
    assert tuned["options"]["fillfactor_pct"] == plain["options"]["fillfactor_pct"]  # only vacuum changes
    text = html.read_text()
    assert 'data-run="pg_queue, tuned"' in text
    assert "Tuning alone (pg_queue → pg_queue, tuned" in text and "then the design (pg_queue, tuned → pg_leased" in text


def test_tuned_control_needs_both_designs(bench):
    proc = bench("compare", "--schedulers", "pg_leased", "--tuned-control", *SHORT)
    assert proc.returncode == 2
    assert "--tuned-control" in proc.stderr and "Traceback" not in proc.stderr
