"""``bench replicate``: the experiments the replication table (:mod:`reports.replication`) needs,
each a child ``bench run`` (:func:`harness.child.bench_run`, as ``bench compare`` runs them), then
the table.

``--quick`` compresses every experiment (production-compressed intervals, 45-60 s windows) so the
whole set fits in about 10 minutes on 2 shared cores; the full-length command of each is recorded
beside the one that ran, and the table prints both.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psycopg

from harness.child import bench_run
from harness.errors import UsageError
from reports import replication as table


@dataclass(frozen=True)
class Plan:
    name: str
    scheduler: str
    quick: tuple[str, ...]
    full: tuple[str, ...]
    count_indexes: bool = False  # keep the schema, count each table's indexes into indexes.json, drop it


COMPRESSED = ("--workload", "production-compressed")
PLANS: tuple[Plan, ...] = (
    # The Composio article's before and after and the timer-wheel article's design, one sitting.
    *(
        Plan(f"steady-{s}", s, (*COMPRESSED, "--duration", "45s"), ("--workload", "production"), count_indexes=True)
        for s in ("pg_queue", "temporal_shards", "pg_leased")
    ),
    # batch-200-250: the article's batch size follows from its shard count (rate x MaxLag / shards);
    # 25 shards is what 200-250 timers a batch at 556/s and MaxLag 10 s implies
    Plan(
        "shards25-temporal_shards",
        "temporal_shards",
        (*COMPRESSED, "--duration", "45s", "--opt", "shards=25"),
        ("--workload", "production", "--opt", "shards=25"),
    ),
    # held-horizon: an idle REPEATABLE READ session pins vacuum's horizon from 15 s into the window
    Plan(
        "doom-pg_queue",
        "pg_queue",
        (*COMPRESSED, "--duration", "60s", "--fault", "hold-snapshot@45s:40s"),
        ("--workload", "production", "--duration", "10m", "--fault", "hold-snapshot@4m:6m"),
    ),
    # overselect: one tenant owns ~83% of the triggers (intervals compressed 4x in --quick)
    Plan(
        "fair-pg_leased",
        "pg_leased",
        ("--workload", "noisy-tenant", "--interval", "15s..30s", "--warmup", "30s", "--duration", "45s"),
        ("--workload", "noisy-tenant", "--warmup", "2m"),
    ),
)

MACHINE = f"{os.cpu_count()} cores, shared with other jobs (loaded): timings are noisy"


def full_command(plan: Plan, out_dir: Path) -> list[str]:
    return ["bench", "run", "--scheduler", plan.scheduler, "--out", str(out_dir), *plan.full]


def replicate(
    out_dir: Path,
    quick: bool,
    dsn: str | None,
    echo: Callable[[str], None],
    machine: str = MACHINE,
    only: list[str] | None = None,
) -> tuple[list[table.Row], Path, Path]:
    """Run every experiment (``only``: those named, into the manifest already in ``out_dir``) in
    sequence (a failure is recorded and the others go on), write the manifest after each, then
    the table."""
    mode = "quick" if quick else "full"
    if only:
        manifest = table.read_manifest(out_dir)
        if manifest.mode != mode:
            raise UsageError(f"--only: {out_dir} holds a {manifest.mode} replication; rerun it as one")
    else:
        manifest = table.Manifest(mode, machine)
    for p in PLANS:
        if p.name not in manifest.experiments or (only and p.name in only):
            manifest.experiments[p.name] = table.Experiment(p.name, [], full_command(p, out_dir))
    out_dir.mkdir(parents=True, exist_ok=True)
    table.write_manifest(manifest, out_dir)
    plans = [p for p in PLANS if not only or p.name in only]
    for i, p in enumerate(plans, 1):
        args = list(p.quick if quick else p.full) + (["--keep"] if p.count_indexes else [])
        if dsn:
            args += ["--dsn", dsn]
        child = bench_run(p.scheduler, out_dir, args, echo, label=f"[{i}/{len(plans)} {p.name}] ")
        e = manifest.experiments[p.name]
        e.command, e.exit_code, e.tail = child.command, child.exit_code, "\n".join(child.tail[-15:])
        e.run_dir = str(child.run_dir) if child.run_dir else None
        if p.count_indexes and child.run_dir is not None:
            try:
                count_indexes(child.run_dir, dsn)
            except (psycopg.Error, OSError, KeyError) as exc:
                echo(f"== {p.name}: could not count its indexes ({exc}); that row says so\n")
        table.write_manifest(manifest, out_dir)
        if child.interrupted:
            raise KeyboardInterrupt
    return table.write(out_dir, manifest)


def count_indexes(run_dir: Path, dsn: str | None = None) -> dict[str, int]:
    """Each table of the kept run schema with its index count, into the run directory's
    ``indexes.json``; then the schema is dropped (it was kept only for this)."""
    from harness.schemas import drop
    from metrics.rundir import read_config

    cfg = read_config(run_dir)
    dsn, schema = dsn or cfg["dsn"], cfg["schema"]
    with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
        rows = conn.execute(
            "SELECT tablename, count(*) FROM pg_indexes WHERE schemaname = %s GROUP BY tablename", (schema,)
        ).fetchall()
    counts = {str(t): int(n) for t, n in rows}
    (run_dir / table.INDEXES).write_text(json.dumps(counts, indent=2) + "\n")
    drop(dsn, [schema])
    return counts
