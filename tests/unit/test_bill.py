"""The bill from samples: each server's window deltas per fire, durable writes across stores and
bytes written by every server, computed from a hand-made run directory."""

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from metrics import accounting, rundir
from tests.cost.conftest import write_run_dir

START, END = 1000.0, 1010.0
FIRES = 100


def write_samples(run_dir: Path, rows: list[tuple[float, str, str, float]]) -> None:
    t, scope, metric, value = zip(*rows)
    pq.write_table(
        pa.table(
            {
                "t": list(t),
                "elapsed_s": [x - START for x in t],
                "scope": list(scope),
                "metric": list(metric),
                "value": list(value),
            },
            schema=rundir.SAMPLES_SCHEMA,
        ),
        run_dir / rundir.SAMPLES,
    )


def cumulative(scope: str, metric: str, at_start: float, at_end: float) -> list[tuple[float, str, str, float]]:
    # a sample before the window, one at each edge, one after: the edges' difference is the window's
    return [
        (START - 3, scope, metric, 0.0),
        (START + 0.01, scope, metric, at_start),
        (END + 0.01, scope, metric, at_end),
        (END + 2, scope, metric, at_end * 9),
    ]


def run_dir_with(tmp_path: Path, rows) -> dict:
    write_run_dir(tmp_path, START, END, [START + 0.05 * i for i in range(FIRES)])
    write_samples(tmp_path, rows)
    return accounting.compute_summary(tmp_path)


def test_heap_and_toast_writes_and_the_bill_of_two_stores(tmp_path):
    rows = []
    for metric, start, end in (("n_tup_ins", 10, 110), ("n_tup_upd", 0, 200), ("n_tup_del", 5, 105)):
        rows += cumulative("s.queue", metric, start, end)
    for metric, start, end in (("n_tup_ins", 0, 300), ("n_tup_upd", 0, 0), ("n_tup_del", 0, 300)):
        rows += cumulative("s.queue#toast", metric, start, end)
    rows += cumulative("server:postgres", "wal_records", 50, 4050)
    rows += cumulative("server:postgres", "bytes_written", 0, 819_200)
    rows += cumulative("server:temporal", "persistence_writes", 7, 57)
    rows += cumulative("server:temporal", "persistence_requests", 7, 157)
    rows += cumulative("server:temporal", "bytes_written", 1000, 205_800)
    s = run_dir_with(tmp_path, rows)
    pf = s["per_fire"]
    assert (pf["inserts"], pf["updates"], pf["deletes"]) == (1.0, 2.0, 1.0)
    assert (pf["toast_inserts"], pf["toast_updates"], pf["toast_deletes"]) == (3.0, 0.0, 3.0)
    assert (pf["heap_writes"], pf["toast_writes"], pf["row_writes"]) == (4.0, 6.0, 10.0)
    assert pf["wal_records"] == 40.0
    temporal = s["servers"]["temporal"]["per_fire"]
    assert temporal["persistence_writes"] == 0.5 and temporal["persistence_requests"] == 1.5
    assert s["bill"]["durable_writes"] == pytest.approx(10.5)  # 10 row writes + 0.5 persistence writes
    assert s["bill"]["bytes_written"] == pytest.approx(8192 + 2048)
    assert s["bill"]["stores"] == ["postgres", "temporal"]


def test_bytes_written_needs_every_server_the_run_used(tmp_path):
    rows = cumulative("s.queue", "n_tup_upd", 0, 100)
    rows += cumulative("server:postgres", "wal_records", 0, 100)  # no pg_stat_io bytes (before Postgres 18)
    rows += cumulative("server:temporal", "bytes_written", 0, 100)
    rows += cumulative("server:temporal", "persistence_writes", 0, 100)
    s = run_dir_with(tmp_path, rows)
    assert s["bill"]["bytes_written"] is None
    assert s["bill"]["durable_writes"] is not None
