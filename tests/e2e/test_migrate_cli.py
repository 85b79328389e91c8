"""`bench migrate dry-run` end to end: the CLI in a subprocess, its verdict and migration.json."""

from __future__ import annotations

import json
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

SHORT = ["--workload", "smoke", "--duration", "12s", "--warmup", "3s"]


def dry_run(tmp_path: Path, *args: str, register: str | None = None) -> tuple[subprocess.CompletedProcess, dict]:
    prefix = [sys.executable, "-m", "bench.cli"]
    if register:
        prefix = [sys.executable, "-c", register + "; from bench.cli import main; main()"]
    proc = subprocess.run(
        [*prefix, "migrate", "dry-run", *args, "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=300,
    )
    dirs = sorted(tmp_path.glob("*-migrate-*"))
    assert dirs, f"no run directory; exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    migration = json.loads((dirs[-1] / "migration.json").read_text())
    return proc, migration


def test_pg_queue_to_temporal_shards_is_go(tmp_path, pg_dsn, temporal_address):
    proc, m = dry_run(tmp_path, "--from", "pg_queue", "--to", "temporal_shards", *SHORT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert m["verdict"] == "GO", m["reasons"]
    c = m["counts"]
    assert c["matched"] > 500 and c["missing_in_shadow"] == 0 and c["lost"] == 0 and c["duplicate_effects"] == 0
    assert c["backfilled"] > 0
    assert "GO: pg_queue -> temporal_shards" in proc.stdout
    # the resource side, before vs after, from each side's own tables
    assert m["resources"]["primary"]["writes_per_fire"] > m["resources"]["shadow"]["writes_per_fire"]


def test_switch_to_pg_leased_loses_nothing_and_duplicates_no_effect(tmp_path, pg_dsn):
    proc, m = dry_run(tmp_path, "--from", "pg_queue", "--to", "pg_leased", "--switch-at", "9s", *SHORT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    c = m["counts"]
    assert c["executed_by_primary"] > 0 and c["executed_by_shadow"] > 0, c
    assert c["lost"] == 0 and c["duplicate_effects"] == 0, m["samples"]
    assert m["verdict"] == "GO", m["reasons"]
    summary = json.loads((sorted(tmp_path.glob("*-migrate-*"))[-1] / "summary.json").read_text())
    assert summary["missed"] == 0 and summary["duplicate_effects"] == 0


def test_shadow_dropping_arms_is_no_go_naming_the_missing_timers(tmp_path):
    register = (
        "import schedulers.base as b; "
        "b.REGISTRY['drops_one_percent'] = 'tests.e2e.dropping:DropsOnePercent'"
    )
    proc, m = dry_run(tmp_path, "--from", "memory", "--to", "drops_one_percent", *SHORT, register=register)
    assert proc.returncode == 3, "NO-GO exits 3"
    assert m["verdict"] == "NO-GO"
    assert m["counts"]["missing_in_shadow"] > 0
    named = {s.split("@")[0] for s in m["samples"]["missing_in_shadow"]}
    assert named and all(zlib.crc32(t.encode()) % 100 == 0 for t in named), named
    assert "NO-GO" in proc.stdout and "missing in the shadow" in proc.stdout


@pytest.mark.parametrize("args, needle", [
    (["--from", "nope", "--to", "memory"], "unknown scheduler"),
    (["--from", "memory", "--to", "memory", "--switch-at", "10h"], "--switch-at"),
    (["--from", "memory", "--to", "memory", "--tolerance", "soon"], "invalid duration"),
])
def test_bad_input_is_one_line_exit_2(tmp_path, args, needle):
    proc = subprocess.run([sys.executable, "-m", "bench.cli", "migrate", "dry-run", *args, "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in proc.stderr
