"""The sweep section of the report: present only beside a sweep.json, showing each backend's
maximum sustainable rate against the pgbench ceiling (or why there is none), and the pgbench
script is pg_leased's own claim SQL turned into pgbench variables."""

import json
from pathlib import Path

import pandas as pd

from loadgen.pgbench import OWNER_EXPR, claim_sql, parse_output, script_text
from reports.html import render_html
from reports.load import Run
from reports.markdown import render_markdown
from reports.report import build_report


def run_in(directory: Path, scheduler: str) -> Run:
    summary = {
        "complete": True,
        "scheduler": scheduler,
        "target_rate": 10.0,
        "achieved_rate": 10.0,
        "lag_ms": {"p50": 1.0, "p90": 2.0, "p99": 3.0, "p999": 4.0, "max": 5.0},
        "outcomes": {"due": 10, "on_time": 10, "late": 0, "pending": 0, "lost": 0},
        "lost_in_warmup": 0,
        "correct": True,
        "failures": [],
        "duplicate_fires": 0,
        "duplicate_effects": 0,
        "warnings": [],
    }
    return Run(
        path=directory / f"20261130-000000-{scheduler}",
        config={"scheduler": scheduler},
        summary=summary,
        fires=pd.DataFrame(),
        samples=pd.DataFrame(),
        label=scheduler,
    )


def entry(rate, held, p99, writes, reason=None):
    return {
        "rate": rate,
        "run_dir": f"runs/x-{rate}",
        "exit_code": 0,
        "achieved": rate * (1 if held else 0.5),
        "p50_ms": 1.0,
        "p99_ms": p99,
        "max_ms": p99,
        "late": 0,
        "pending": 0,
        "lost": 0,
        "writes_per_fire": writes,
        "wal_bytes_per_fire": None,
        "held": held,
        "reason": reason,
    }


SWEEP = {
    "complete": True,
    "rates": [500.0, 1000.0],
    "slo_p99_ms": 1000.0,
    "duration": "5s",
    "warmup": "2s",
    "workload": {"note": "preset ceiling"},
    "rule": "stop at the first rate not held",
    "pgbench": {
        "skipped": None,
        "rows_per_s": 20000.0,
        "best_batch": 800,
        "clients": 4,
        "threads": 2,
        "duration_s": 2,
        "version": "pgbench (PostgreSQL) 16.2",
        "results": [
            {"batch": 1, "rows": 2000, "tps": 300.0, "tps_x_batch": 300.0, "rearmed_per_s": 290.0, "error": None},
            {"batch": 800, "rows": 9600, "tps": 25.0, "tps_x_batch": 20000.0, "rearmed_per_s": 20000.0, "error": None},
        ],
    },
    "backends": {
        "pg_leased": {
            "rates": {
                "500": entry(500.0, True, 80.0, 2.6),
                "1000": entry(1000.0, False, 4000.0, 2.7, "p99 lag 4,000.0 ms over the SLO of 1,000 ms"),
            },
            "max_sustainable_rate": 500.0,
            "stopped_at": 1000.0,
            "stop_reason": "p99 lag over the SLO",
            "fraction_of_ceiling": 0.025,
        },
        "memory": {
            "rates": {"500": entry(500.0, True, 2.0, None), "1000": entry(1000.0, True, 3.0, None)},
            "max_sustainable_rate": 1000.0,
            "stopped_at": None,
            "stop_reason": "held every rate",
            "fraction_of_ceiling": 0.05,
        },
    },
}


def test_sweep_section_only_beside_a_sweep_json(tmp_path):
    runs = [run_in(tmp_path, "pg_leased"), run_in(tmp_path, "memory")]
    assert 'id="sweep"' not in render_html(build_report(runs, with_figures=False))
    (tmp_path / "sweep.json").write_text(json.dumps(SWEEP))
    page = render_html(build_report(runs, with_figures=False))
    assert 'id="sweep"' in page and 'id="sweep-max"' in page and 'id="sweep-pgbench"' in page
    assert "500/s" in page and "2.5%" in page and "20,000 rows re-armed/s" in page
    assert page.count('data-figure="sweep-') == 2  # rate vs p99 lag, rate vs writes per fire
    md = render_markdown(build_report(runs, with_figures=False), full=True)
    assert "## Saturation sweep" in md and "| pg_leased | 500/s | 2.5% |" in md
    assert md.index("## Saturation sweep") < md.index("## Table 1")


def test_a_skipped_ceiling_is_said(tmp_path):
    data = dict(SWEEP, pgbench={"skipped": "pgbench not found", "rows_per_s": None, "results": []})
    (tmp_path / "sweep.json").write_text(json.dumps(data))
    rep = build_report([run_in(tmp_path, "memory")], with_figures=False)
    assert "pgbench ceiling skipped: pgbench not found" in render_html(rep)
    assert "pgbench ceiling skipped: pgbench not found" in render_markdown(rep, full=True)
    assert 'id="sweep-pgbench"' not in render_html(rep)


def test_pgbench_script_is_pg_leased_claim_with_pgbench_variables():
    sql = claim_sql()
    assert "%(" not in sql and "{schema}" not in sql and "{{" not in sql
    assert (
        "FOR UPDATE SKIP LOCKED" in sql and "row_number()" in sql
    )  # the timer-wheel article's two-step claim, unchanged
    for var in (":limit", ":max_per_tenant", ":tenant_scan", ":overselect", ":lease_s"):
        assert var in sql
    assert OWNER_EXPR in sql
    text = script_text()
    assert text.count(";") >= 2 and "version = s.version + 1" in text  # claim, then commit_batch's re-arm


def test_pgbench_output_is_parsed():
    out = (
        "number of transactions actually processed: 582\nnumber of failed transactions: 0 (0.000%)\n"
        "latency average = 20.6 ms\ninitial connection time = 9.1 ms\ntps = 193.169821 (without initial connection "
        "time)\n"
    )
    assert parse_output(out) == (193.169821, 582, 0)
    assert parse_output("connection refused") == (None, None, None)
