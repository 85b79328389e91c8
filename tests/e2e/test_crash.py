"""A run killed with SIGKILL keeps what it recorded, leaves no process behind, and the schema it
leaves is found and dropped by ``bench env gc`` (and a live run's never is).

The real CLI in a subprocess (its own session, so the kill reaches only it), on the embedded
Postgres. A kill comes once the run has closed a few fire segments; everything those segments
hold is checked against what the run directory reads back afterwards.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import subprocess
import time
from pathlib import Path

import psutil
import psycopg
import pyarrow.parquet as pq
import pytest

from harness import schemas
from metrics import accounting, rundir

LONG = ["--workload", "smoke", "--duration", "60s", "--warmup", "1s"]  # killed long before its end


def start(bench, out: Path, *args: str) -> subprocess.Popen:
    log = open(out.parent / f"{out.name}.log", "w")
    return bench.popen(
        "run",
        "--scheduler",
        "pg_leased",
        "--out",
        str(out),
        *args,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def wait_until(what: str, check, proc: subprocess.Popen | None = None, timeout_s: float = 120.0):
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        value = check()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the run exited ({proc.returncode}) before {what}")
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def the_run_dir(out: Path) -> Path | None:
    """The run's directory once it has written its config.json (the directory comes a moment before)."""
    dirs = [p for p in out.iterdir() if p.is_dir()] if out.exists() else []
    return dirs[0] if len(dirs) == 1 and (dirs[0] / rundir.CONFIG).exists() else None


def run_schema_name() -> str:
    """A name gc takes for a run's (unique per test, so that concurrent test sessions never meet)."""
    return time.strftime("run_%Y%m%d_%H%M%S_", time.gmtime()) + secrets.token_hex(3)


def closed_segments(directory: Path) -> list[Path]:
    return [p for parts in rundir.fire_segments(directory).values() for p in parts] if directory.is_dir() else []


def fire_keys(table) -> set[tuple]:
    cols = [table.column(c).to_pylist() for c in ("timer_id", "due_at", "fired_at", "worker")]
    return set(zip(*cols))


def kill_and_check(bench, proc: subprocess.Popen, run_dir: Path, segment_dir: Path) -> None:
    """SIGKILL the run; then every row of every segment closed before the kill is read back, the
    reader drops no segment, and no process of the run is left."""
    children = psutil.Process(proc.pid).children(recursive=True)
    before = closed_segments(segment_dir)
    recorded = set().union(*(fire_keys(pq.read_table(p)) for p in before))
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait(timeout=30) == -signal.SIGKILL

    # no leftover process: the nodes (if any) notice the run is gone and stop by themselves
    _, alive = psutil.wait_procs(children, timeout=60)
    assert not alive, [(p.pid, p.cmdline()[:4]) for p in alive]

    assert rundir.run_state(run_dir) == "interrupted"
    assert not (run_dir / rundir.SUMMARY).exists() and not (run_dir / rundir.FIRES).exists()
    fires = rundir.read_fires(run_dir)
    assert recorded and recorded <= fire_keys(fires)  # every fire of every segment closed before the kill
    after = closed_segments(segment_dir)
    assert set(before) <= set(after)
    assert fires.num_rows == sum(pq.read_metadata(p).num_rows for p in after)  # and every segment there is

    summary = accounting.interrupted_summary(run_dir)
    assert summary["complete"] is False and re.match(r"interrupted at T\+\d+ s", summary["incomplete_reason"])
    assert summary["fires"] > 0 and summary["achieved_rate"] > 0 and summary["lag_ms"]["p99"] is not None
    # not judged: the run never compared its arms with its fires, nor asked the backend what it holds
    assert summary["outcomes"]["lost"] is None and summary["outcomes"]["pending"] is None

    res = bench(
        "report",
        str(run_dir),
        "-o",
        str(run_dir.parent / "r.html"),
        "--markdown",
        str(run_dir.parent / "r.md"),
        "--markdown-full",
        timeout=120,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    md = (run_dir.parent / "r.md").read_text()
    assert "interrupted at T+" in md and "corrupt" not in md.lower() and "unreadable" not in md
    assert f"| Fires delivered in the window (first deliveries) | {summary['fires']:,} |" in md
    assert "pending and lost fires not judged" in md


def test_sigkill_in_process_keeps_every_closed_segment(bench, tmp_path, pg_dsn):
    out = tmp_path / "runs"
    proc = start(bench, out, *LONG)
    try:
        run_dir = wait_until("a run directory", lambda: the_run_dir(out), proc)
        seg = run_dir / rundir.SEGMENTS_DIR
        wait_until("three closed fire segments", lambda: len(closed_segments(seg)) >= 3, proc)
        kill_and_check(bench, proc, run_dir, seg)
    finally:
        if proc.poll() is None:
            proc.kill()
    _drop(pg_dsn, rundir.read_config(run_dir)["schema"])


def test_sigkill_with_nodes_keeps_every_closed_segment_and_stops_the_nodes(bench, tmp_path, pg_dsn):
    out = tmp_path / "runs"
    proc = start(bench, out, "--nodes", "2", *LONG)
    try:
        run_dir = wait_until("a run directory", lambda: the_run_dir(out), proc)
        nodes = run_dir / rundir.NODES_DIR
        wait_until(
            "two closed segments per node",
            lambda: (
                all(len(v) >= 2 for v in rundir.fire_segments(nodes).values()) and len(rundir.fire_segments(nodes)) == 2
            ),
            proc,
        )
        wait_until("a closed samples segment", lambda: rundir.samples_segments(run_dir / rundir.SEGMENTS_DIR), proc)
        kill_and_check(bench, proc, run_dir, nodes)
        assert rundir.read_samples(run_dir).num_rows > 0  # the run process's own records survive too
        for meta in nodes.glob("node-*.json"):  # the nodes stopped gracefully once the run was gone
            assert json.loads(meta.read_text())["graceful"] is True
    finally:
        if proc.poll() is None:
            proc.kill()
    _drop(pg_dsn, rundir.read_config(run_dir)["schema"])


def test_gc_drops_what_an_interrupted_run_left_and_nothing_else(bench, tmp_path, pg_dsn, schema):
    # an interrupted run: killed mid-window, its schema left behind
    killed = start(bench, tmp_path / "a", *LONG)
    try:
        a_dir = wait_until("a run directory", lambda: the_run_dir(tmp_path / "a"), killed)
        wait_until("a closed fire segment", lambda: closed_segments(a_dir / rundir.SEGMENTS_DIR), killed)
    finally:
        os.kill(killed.pid, signal.SIGKILL)
        killed.wait(timeout=30)
    left = rundir.read_config(a_dir)["schema"]
    assert _exists(pg_dsn, left)

    # what must survive: a schema kept on purpose, one that is not a run's, and a live run's
    kept = run_schema_name()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{kept}"')
        conn.execute(f'CREATE SCHEMA "{schema}"')
    import asyncio

    asyncio.run(schemas.mark_kept(pg_dsn, kept))
    live = start(
        bench, tmp_path / "b", "--workload", "smoke", "--duration", "25s", "--warmup", "1s", "--allow-leftovers"
    )
    try:
        b_dir = wait_until("the live run's directory", lambda: the_run_dir(tmp_path / "b"), live)
        b_schema = wait_until(
            "the live run's schema",
            lambda: (lambda s: s if s and _exists(pg_dsn, s) else None)(rundir.read_config(b_dir).get("schema")),
            live,
        )
        wait_until("the live run measuring", lambda: "measure]" in (tmp_path / "b.log").read_text(), live)

        status = bench("env", "status", "--dsn", pg_dsn, timeout=60)
        assert status.returncode == 0, status.stderr
        rows = {line.split()[0]: line for line in status.stdout.splitlines() if line.startswith("  run_")}
        assert rows[left].endswith("leftover") and rows[b_schema].endswith("live run"), status.stdout
        assert rows[kept].endswith("kept (--keep)"), status.stdout

        gc = bench("env", "gc", "--yes", "--dsn", pg_dsn, timeout=120)
        assert gc.returncode == 0, gc.stdout + gc.stderr
        assert left in gc.stdout and b_schema not in gc.stdout and kept not in gc.stdout
        assert not _exists(pg_dsn, left)
        assert _exists(pg_dsn, b_schema) and _exists(pg_dsn, kept) and _exists(pg_dsn, schema)
        assert live.wait(timeout=120) == 0, (tmp_path / "b.log").read_text()[-3000:]
    finally:
        if live.poll() is None:
            live.kill()
    assert json.loads((b_dir / rundir.SUMMARY).read_text())["complete"] is True  # gc never touched it
    assert not _exists(pg_dsn, b_schema)  # and it dropped its own schema at the end
    _drop(pg_dsn, kept)


def test_a_run_refuses_to_start_over_too_many_leftovers(pg_dsn, monkeypatch):
    from harness.errors import UsageError

    name = run_schema_name()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{name}"')
        conn.execute(f'CREATE TABLE "{name}".t AS SELECT g FROM generate_series(1, 1000) g')
    try:
        said: list[str] = []
        schemas.check_leftovers(pg_dsn, allow=False, say=said.append)  # under the limit: a note
        assert said and "bench env gc" in said[0]
        monkeypatch.setattr(schemas, "LEFTOVER_LIMIT_BYTES", 1)
        with pytest.raises(UsageError, match="--allow-leftovers"):
            schemas.check_leftovers(pg_dsn, allow=False, say=said.append)
        schemas.check_leftovers(pg_dsn, allow=True, say=said.append)  # told to go on
    finally:
        _drop(pg_dsn, name)


def _exists(dsn: str, name: str) -> bool:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (name,)).fetchone() is not None


def _drop(dsn: str, name: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
