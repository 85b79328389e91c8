"""The replication table's rows from synthetic run directories with known figures: each row's
verdict follows from the figures written, and a row whose experiment failed, was not run or
lacks its figure says so instead of passing."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from metrics import rundir
from reports import replication as t

START, END = 1000.0, 1090.0  # the measured window: 90 s
RATE = 556.0
TRIGGERS = 12_000


def samples(rows: list[tuple[float, str, str, float]]) -> pa.Table:
    t_, scope, metric, value = zip(*rows, strict=True) if rows else ((), (), (), ())
    return pa.table(
        {
            "t": pa.array(t_, pa.float64()),
            "elapsed_s": pa.array([x - START for x in t_], pa.float64()),
            "scope": pa.array(scope, pa.string()),
            "metric": pa.array(metric, pa.string()),
            "value": pa.array(value, pa.float64()),
        },
        schema=rundir.SAMPLES_SCHEMA,
    )


def fires(due: np.ndarray, lag: np.ndarray, tenants: list[str] | None = None) -> pa.Table:
    n = len(due)
    fired = due + lag
    cols = {
        "timer_id": [f"t{i}" for i in range(n)],
        "tenant_id": tenants or ["a"] * n,
        "type": ["poll"] * n,
        "due_at": due,
        "armed_at": due - 20.0,
        "fired_at": fired,
        "lag_s": lag,
        "attempt": [1] * n,
        "worker": ["w"] * n,
        "batch": [0] * n,
        "effect_delivered": [True] * n,
        "warmup": [False] * n,
        "external_effect": [True] * n,
        "held_at_end": [None] * n,
    }
    return pa.table(cols, schema=rundir.FIRES_SCHEMA)


def summary(scheduler: str, **per_fire: float) -> dict:
    return {
        "scheduler": scheduler,
        "target_rate": RATE,
        "achieved_rate": RATE,
        "fires": int(RATE * 90),
        "on_time_s": 10.0,
        "outcomes": {"due": int(RATE * 90), "lost": 0, "pending": 0},
        "lost_in_warmup": 0,
        "duplicate_fires": 0,
        "duplicate_effects": 0,
        "duplicate_external_effects": 0,
        "hot_ratio": per_fire.pop("hot", None),
        "dead_tuples": {"table_peak": per_fire.pop("dead_peak", None)},
        "per_fire": per_fire,
    }


def run_dir(root: Path, name: str, scheduler: str, summ: dict, smp: pa.Table, fr: pa.Table) -> Path:
    d = root / name
    d.mkdir()
    config = {
        "scheduler": scheduler,
        "window": {"arm_start": START - 30, "measure_start": START, "measure_end": END},
        "workload": {"rate_per_s": RATE, "triggers": TRIGGERS},
        "load": {"periodic_triggers": TRIGGERS},
    }
    (d / rundir.CONFIG).write_text(json.dumps(config))
    (d / rundir.SUMMARY).write_text(json.dumps(summ))
    pq.write_table(smp, d / rundir.SAMPLES)
    pq.write_table(fr, d / rundir.FIRES)
    return d


def statements(calls: float) -> pa.Table:
    cols = {f.name: [] for f in rundir.STATEMENTS_SCHEMA}
    for name in cols:
        cols[name] = [0.0]
    cols.update(queryid=[1], query=["select claim"], source=["design"], calls=[calls])
    return pa.table(cols, schema=rundir.STATEMENTS_SCHEMA)


@pytest.fixture
def manifest(tmp_path: Path) -> t.Manifest:
    """The five experiments with the figures the issue measured (heap x0.77, TOAST x1.03) and the
    articles' own figures elsewhere."""
    rng = np.random.default_rng(1)
    due = np.sort(rng.uniform(START, END - 1, 2000))
    m = t.Manifest("quick", "2 shared cores, loaded", directory=tmp_path)

    before = run_dir(
        tmp_path,
        "before",
        "pg_queue",
        summary(
            "pg_queue",
            inserts=1.0,
            updates=2.0,
            deletes=1.0,
            heap_writes=4.0,
            toast_writes=6.0,
            toast_inserts=3.0,
            row_writes=10.0,
            hot=0.2,
        ),
        samples([]),
        fires(due, rng.uniform(0, 1, len(due))),
    )
    (before / t.INDEXES).write_text(json.dumps({"triggers": 6, "tenants": 1}))

    run = "run"
    g = rundir.BACKEND_GAUGE
    after_samples = [
        (START, run, f"{g}batches", 0.0),
        (END, run, f"{g}batches", 225.0),  # 2.5 starts/s
        (START, run, f"{g}batched_timers", 0.0),
        (END, run, f"{g}batched_timers", 225.0 * 225),  # 225 per batch
        *((x, run, f"{g}shards", 22.0) for x in (START, END)),
        *((x, run, f"{g}utilisation", 0.6) for x in (START, END)),
        *((x, run, f"{g}max_shard_utilisation", 0.7) for x in (START, END)),
        # claim and commit on the trigger row, the state in its own table
        (START, "s.trigger", "n_tup_upd", 0.0),
        (END, "s.trigger", "n_tup_upd", 2.0 * RATE * 90),
        (START, "s.trigger_state", "n_tup_upd", 0.0),
        (END, "s.trigger_state", "n_tup_upd", 1.08 * RATE * 90),
    ]
    after_summary = summary(
        "temporal_shards",
        updates=3.1,
        heap_writes=3.08,
        toast_writes=6.18,
        toast_inserts=3.09,
        row_writes=9.26,
        hot=1.0,
        dead_peak=11_000,
    )
    after = run_dir(
        tmp_path,
        "after",
        "temporal_shards",
        after_summary,
        samples(after_samples),
        fires(due, rng.uniform(0, 9.9, len(due))),
    )

    shards25 = run_dir(
        tmp_path, "shards25", "temporal_shards", after_summary, samples(after_samples), fires(due, due * 0)
    )
    lag = rng.uniform(0.005, 0.095, len(due))
    leased = run_dir(tmp_path, "leased", "pg_leased", summary("pg_leased"), samples([]), fires(due, lag))
    pq.write_table(statements(calls=0.3 * RATE * 90), leased / rundir.STATEMENTS)

    # the held snapshot from START+20 to START+60: dead tuples only grow, 3 a fire
    hold = (START + 20, START + 60)
    dead = [
        (x, "s.triggers", "n_dead_tup", 1000 + max(0.0, min(x, hold[1]) - hold[0]) * RATE * 3)
        for x in range(int(START), int(END), 5)
    ]
    lag_doom = np.where(due + 0.5 > hold[0] + 20, 2.0, 0.5)
    doom = run_dir(tmp_path, "doom", "pg_queue", summary("pg_queue"), samples(dead), fires(due, lag_doom))
    (doom / rundir.FAULTS).write_text(
        json.dumps(
            {"faults": [{"kind": "hold-snapshot", "text": "hold-snapshot@50s:40s", "start": hold[0], "end": hold[1]}]}
        )
    )

    tenants = [f"t{i % 5}" for i in range(len(due))]
    fair = run_dir(tmp_path, "fair", "pg_leased", summary("pg_leased"), samples([]), fires(due, lag, tenants))

    for name, d in (
        (t.BEFORE, before),
        (t.AFTER, after),
        (t.LEASED, leased),
        (t.DOOM, doom),
        (t.FAIR, fair),
        (t.SHARDS25, shards25),
    ):
        m.experiments[name] = t.Experiment(name, ["bench", "run", name], ["bench", "run", name, "--full"], 0, str(d))
    return m


def verdicts(rows: list[t.Row]) -> dict[str, str]:
    return {f"{r.claim.name}:{r.claim.claim}": r.verdict for r in rows}


def by_name(rows: list[t.Row], name: str) -> t.Row:
    return next(r for r in rows if r.claim.name == name)


def test_known_figures_give_the_known_verdicts(manifest: t.Manifest) -> None:
    rows = t.build_rows(manifest)
    assert 20 <= len(rows) <= 30
    expect = {
        "four-writes": t.REPRODUCED,
        "six-indexes": t.REPRODUCED,
        "hot-18pct": t.REPRODUCED,
        "rate-556": t.REPRODUCED,
        "starts-0.7": t.REPRODUCED,
        "maxlag-10s": t.REPRODUCED,
        "lag-0-10s": t.REPRODUCED,
        "heap-halved": t.DEPARTS,  # x0.77
        "toast-third": t.DEPARTS,  # x1.03
        "hot-100pct": t.REPRODUCED,
        "row-writes": t.WITHIN,  # x0.93: fell slightly where the article's rose
        "dead-live": t.REPRODUCED,
        "dead-872m": t.CANNOT,
        "held-horizon": t.REPRODUCED,
        "slow-ticks": t.REPRODUCED,
        "can-2mb": t.CANNOT,
        "shard-cap-5000": t.REPRODUCED,
        "controller-80-60": t.REPRODUCED,
        "at-least-once": t.REPRODUCED,
        "tick-100ms": t.REPRODUCED,
        "batch-200": t.REPRODUCED,
        "overselect": t.REPRODUCED,
        "claim-ceiling": t.CANNOT,
        "not-fifo": t.REPRODUCED,  # random lags up to 95 ms put fires due a few ms apart out of order
        "claim-not-effect": t.REPRODUCED,
    }
    got = {r.claim.name: r.verdict for r in rows}
    # batch-200-250 holds three rows: the batch size at the design's shard count and at 25, the start rate
    assert [r.verdict for r in rows if r.claim.name == "batch-200-250"] == [t.REPRODUCED] * 3
    assert {k: got[k] for k in expect} == expect
    heap = by_name(rows, "heap-halved")
    assert "x0.77" in heap.figure and "trigger 2.00, trigger_state 1.08" in heap.note
    assert "trigger table alone x0.50" in heap.note
    assert "x1.03" in by_name(rows, "toast-third").figure
    assert not t.unanswered(rows)
    assert all(r.commands and r.full_commands and r.run_dirs for r in rows if r.claim.experiments)


def test_a_failed_experiment_says_so_and_does_not_pass(manifest: t.Manifest) -> None:
    manifest.experiments[t.FAIR].exit_code = 1
    del manifest.experiments[t.DOOM]
    rows = t.build_rows(manifest)
    fair = by_name(rows, "overselect")
    assert fair.verdict == t.FAILED and "failed (exit 1)" in fair.note and fair.figure == "—"
    assert by_name(rows, "held-horizon").verdict == t.NOT_RUN
    missing = {r.claim.name for r in t.unanswered(rows)}
    assert missing == {"overselect", "held-horizon", "slow-ticks", "dead-872m"}
    md = t.render_markdown(rows, manifest)
    assert "**experiment failed**" in md and "**not run**" in md


def test_a_run_without_the_figure_has_no_verdict(manifest: t.Manifest) -> None:
    (Path(manifest.experiments[t.BEFORE].run_dir) / t.INDEXES).unlink()
    s = Path(manifest.experiments[t.AFTER].run_dir) / rundir.SUMMARY
    data = json.loads(s.read_text())
    data["hot_ratio"] = None
    s.write_text(json.dumps(data))
    rows = t.build_rows(manifest)
    assert by_name(rows, "six-indexes").verdict == t.NO_FIGURE
    hot = by_name(rows, "hot-100pct")
    assert hot.verdict == t.NO_FIGURE and "HOT ratio" in hot.note


def test_the_table_is_written_from_the_manifest(manifest: t.Manifest, tmp_path: Path) -> None:
    t.write_manifest(manifest, tmp_path)
    rows, md, html = t.write(tmp_path)
    text = md.read_text()
    assert "`heap-halved`" in text and "**departs**" in text and "full length: `bench run" in text
    page = html.read_text()
    assert 'id="replication"' in page and 'data-figure="toast-third" data-verdict="departs"' in page
    assert len(rows) == len(t.CLAIMS)


def test_a_missing_or_broken_manifest_is_one_line(tmp_path: Path) -> None:
    from reports.errors import ReportError

    with pytest.raises(ReportError, match="not found"):
        t.read_manifest(tmp_path)
    (tmp_path / t.MANIFEST).write_text("{}")
    with pytest.raises(ReportError, match="not a replication manifest"):
        t.read_manifest(tmp_path)


def bench(argv: list[str], capsys) -> tuple[int, str, str]:
    from bench.cli import main

    with pytest.raises(SystemExit) as exc:
        main(argv)
        raise SystemExit(0)
    out = capsys.readouterr()
    return int(exc.value.code or 0), out.out, out.err


def test_the_command_rebuilds_the_table_and_exits_0_when_every_row_has_a_verdict(
    manifest: t.Manifest, tmp_path: Path, capsys
) -> None:
    t.write_manifest(manifest, tmp_path)
    code, out, err = bench(["replicate", "--table-only", "--out", str(tmp_path)], capsys)
    assert code == 0, err
    assert "heap-halved" in out and (tmp_path / "replication.md").exists()
    manifest.experiments[t.DOOM].exit_code = 4
    t.write_manifest(manifest, tmp_path)
    code, out, err = bench(["replicate", "--table-only", "--out", str(tmp_path)], capsys)
    assert code == 1 and err.count("\n") == 1 and "rows have no verdict" in err


def test_bad_input_is_one_line(tmp_path: Path, capsys) -> None:
    code, _, err = bench(["replicate", "--table-only", "--out", str(tmp_path / "none")], capsys)
    assert code == 2 and err.count("\n") == 1 and "replication.json" in err
    f = tmp_path / "file"
    f.write_text("")
    code, _, err = bench(["replicate", "--quick", "--out", str(f)], capsys)
    assert code == 2 and err.count("\n") == 1 and "a file is in the way" in err


def test_a_run_that_did_not_hold_its_rate_cannot_reproduce_a_figure(manifest: t.Manifest) -> None:
    s = Path(manifest.experiments[t.AFTER].run_dir) / rundir.SUMMARY
    data = json.loads(s.read_text())
    data.update(rate_held=False, achieved_rate=212.0)
    s.write_text(json.dumps(data))
    rows = t.build_rows(manifest)
    lag = by_name(rows, "lag-0-10s")
    assert (
        lag.verdict == t.CANNOT and "held 212/s of 556/s" in lag.note and lag.figure.startswith("temporal_shards mean")
    )
    # a per-fire count of the design's statements keeps its verdict, and says the rate was not held
    heap = by_name(rows, "heap-halved")
    assert heap.verdict == t.DEPARTS and "held 212/s of 556/s (a per-fire count" in heap.note
    assert by_name(rows, "hot-100pct").verdict == t.CANNOT  # page pruning depends on the load


def test_only_names_known_experiments_of_an_existing_replication(tmp_path: Path, capsys) -> None:
    code, _, err = bench(["replicate", "--quick", "--out", str(tmp_path), "--only", "steady-nothing"], capsys)
    assert code == 2 and err.count("\n") == 1 and "choose from steady-pg_queue" in err
    code, _, err = bench(["replicate", "--quick", "--out", str(tmp_path), "--only", "steady-pg_queue"], capsys)
    assert code == 2 and err.count("\n") == 1 and "run without --only first" in err


def test_a_moved_replication_finds_its_runs_beside_the_manifest(manifest: t.Manifest, tmp_path: Path) -> None:
    for e in manifest.experiments.values():
        e.run_dir = str(Path("/elsewhere") / Path(e.run_dir).name)
    t.write_manifest(manifest, tmp_path)
    rows = t.build_rows(t.read_manifest(tmp_path))
    assert by_name(rows, "four-writes").verdict == t.REPRODUCED
