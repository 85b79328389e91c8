"""Locust arm load: the timers locust says it armed are the timers in the store.

Locust runs in its own subprocess (gevent never enters this process), against a real ``bench
serve`` node on pg_leased; the store is counted through a scheduler instance of its own.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pyarrow.parquet as pq
from psycopg import sql

from schedulers.base import StoreContext, create
from tests.e2e.test_serve import TOKEN, ServeNode

LOCUSTFILE = str(Path(__file__).resolve().parents[2] / "loadgen" / "locustfile.py")


def locust(url: str, out: Path, *args: str, env: dict[str, str] | None = None) -> dict:
    summary = out / "summary.json"
    argv = [
        sys.executable,
        "-m",
        "locust",
        "-f",
        LOCUSTFILE,
        "--headless",
        "-H",
        url,
        "--csv",
        str(out / "l"),
        "--only-summary",
        "--stop-timeout",
        "2",
        "--arm-summary",
        str(summary),
        *args,
    ]
    res = subprocess.run(
        argv, capture_output=True, text=True, timeout=60, env={**os.environ, "TIMERBENCH_TOKEN": TOKEN, **(env or {})}
    )
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(summary.read_text())


def armed_load_ids(dsn: str, schema: str) -> list[str]:
    async def go() -> list[str]:
        s = create("pg_leased", StoreContext(dsn=dsn, schema=schema))
        try:
            return [t.id for t in await s.export_armed() if t.type == "load"]
        finally:
            await s.teardown(drop=False)

    return asyncio.run(go())


def test_a_short_locust_run_arms_what_it_reports_and_rearms_within_its_pool(bench, pg_dsn, schema, tmp_path):
    node = ServeNode(bench, pg_dsn, schema)
    try:
        # a pool larger than the run: every timer is new
        a = locust(
            node.url,
            tmp_path,
            "-u",
            "2",
            "-r",
            "2",
            "-t",
            "3s",
            "--arm-rate",
            "100",
            "--arm-batch",
            "5",
            "--arm-prefix",
            "a-",
        )
        assert a["failures"] == 0 and a["requests"] > 0
        ids = armed_load_ids(pg_dsn, schema)
        assert len(ids) == a["timers_armed"] == 5 * a["requests"]
        assert len(set(ids)) == len(ids)
        # a pool of 7: later requests re-arm (move) the same 7 timers
        # four requests, not a time box: on a busy machine two seconds once made only one
        b = locust(
            node.url,
            tmp_path,
            "-u",
            "1",
            "-r",
            "1",
            "-t",
            "30s",
            "--arm-rate",
            "50",
            "--arm-batch",
            "5",
            "--arm-prefix",
            "b-",
            "--arm-ids",
            "7",
            "--arm-requests",
            "4",
        )
        assert b["failures"] == 0 and b["timers_armed"] > 7
        assert len([i for i in armed_load_ids(pg_dsn, schema) if i.startswith("b-")]) == 7
        assert (tmp_path / "l_stats.csv").exists()
    finally:
        code, out = node.stop()
    assert code == 0, out


def test_a_load_shape_ends_the_test_by_itself(bench, pg_dsn, schema, tmp_path):
    node = ServeNode(bench, pg_dsn, schema)
    try:
        # no -t: the shape's last point ends it
        s = locust(
            node.url, tmp_path, "--arm-rate", "40", "--arm-batch", "2", env={"TIMERBENCH_ARM_SHAPE": "steps:1s=1,2s=2"}
        )
        assert s["failures"] == 0 and s["requests"] > 0
        assert len(armed_load_ids(pg_dsn, schema)) == s["timers_armed"]
    finally:
        node.stop()


def test_run_with_arm_load_folds_locust_stats_into_the_run_dir(bench, pg_dsn, tmp_path):
    res = bench(
        "run",
        "--scheduler",
        "pg_leased",
        "--arm-load",
        "100/s",
        "--workload",
        "smoke",
        "--duration",
        "4s",
        "--warmup",
        "1s",
        "--keep",
        "--out",
        str(tmp_path),
        timeout=180,
    )
    assert res.returncode == 0, (res.stdout, res.stderr)
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    schema = json.loads((run_dir / "config.json").read_text())["schema"]
    try:
        summary = json.loads((run_dir / "summary.json").read_text())
        arm = summary["arm_load"]
        assert arm["failures"] == 0 and arm["timers_armed"] > 0
        assert {"locust_stats.csv", "locust_stats_history.csv", "locust_failures.csv"} <= set(arm["csv_files"])
        assert all((run_dir / f).exists() for f in arm["csv_files"])
        assert summary["correct"] is True and summary["outcomes"]["lost"] == 0 and summary["double_held"] == 0
        # arm load is not part of the measured population
        assert set(pq.read_table(run_dir / "fires.parquet").column("type").to_pylist()) == {"poll"}
        assert len(armed_load_ids(pg_dsn, schema)) == arm["timers_armed"]
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
