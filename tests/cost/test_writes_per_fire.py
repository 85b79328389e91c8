"""Writes per fire, complete: the summary's heap and TOAST inserts, updates and deletes per fire
equal the deltas this test reads from pg_stat_all_tables itself, for a real design."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Sequence

import psycopg
import pytest

from metrics import accounting
from metrics.extensions import extensions
from metrics.recorder import FireRecorder
from metrics.sampler import Sampler
from schedulers.base import Fire, Outcome, StoreContext, create, scheduler_class
from tests.conformance.promises import wait_until
from tests.cost.conftest import schema_relations, settle, stat_counters, write_run_dir

COUNTERS = ("n_tup_ins", "n_tup_upd", "n_tup_del")
FIRES = 120
STATE_BYTES = 4096  # incompressible: TOASTed (the Composio article)


class Rearming:
    """Re-arms every timer an hour later with fresh state; an effect for every other fire."""

    def __init__(self) -> None:
        self.received: list[float] = []
        self.n_committed = 0
        self.effects = 0

    async def process(self, fires: Sequence[Fire]) -> list[Outcome]:
        now = time.time()
        self.received.extend([now] * len(fires))
        return [
            Outcome(next_fire_at=now + 3600, new_state=os.urandom(STATE_BYTES), effect=i % 2 == 0)
            for i, _ in enumerate(fires)
        ]

    def committed(self, fires: Sequence[Fire], delivered: Sequence[bool]) -> None:
        self.n_committed += len(fires)
        self.effects += sum(delivered)


async def test_writes_per_fire_equal_the_tests_own_pg_stat_deltas(pg_dsn, schema, tmp_path):
    # pg_queue: four heap writes and TOAST chunk writes per fire (the Composio article), the design whose
    # TOAST writes the old figure left out
    cls = scheduler_class("pg_queue")
    scheduler = create(
        "pg_queue", StoreContext(dsn=pg_dsn, schema=schema, state_bytes=STATE_BYTES), **cls.conformance_options
    )
    await scheduler.setup()
    proc = Rearming()
    stop = asyncio.Event()
    task = asyncio.create_task(scheduler.run({"poll": proc}, stop, worker_id="w"))
    usable = {n: e.schema for n, e in (await asyncio.to_thread(extensions, pg_dsn)).items() if e.usable}
    sampler = Sampler(
        scheduler, FireRecorder(tmp_path / "segments", 0, 0), pg_dsn, tmp_path, extensions=usable, every_s=0
    )
    try:
        await sampler.open()
        due = time.time() + 3.0
        from schedulers.base import Timer

        await scheduler.arm([Timer(f"w-{i}", due + 0.002 * i, "poll", f"t{i % 3}") for i in range(FIRES)])
        await settle()  # the arming's inserts are counted before the window, not in it
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            rels = schema_relations(conn, schema)
            before = stat_counters(conn, list(rels), COUNTERS)
        measure_start = time.time()
        await sampler.window_start()
        assert await wait_until(lambda: proc.n_committed >= FIRES, 30), f"{proc.n_committed} of {FIRES} committed"
        await settle()
        measure_end = time.time()
        await sampler.window_end()
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            after = stat_counters(conn, list(rels), COUNTERS)
        sampler.save()
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
        await sampler.close()
        await scheduler.teardown(drop=True)

    write_run_dir(tmp_path, measure_start, measure_end, proc.received)
    s = accounting.compute_summary(tmp_path)
    assert s["fires"] == FIRES
    # the test's own deltas, summed over every table of the schema, then over their TOAST tables
    want: dict[str, float] = {}
    for name, col in (("inserts", "n_tup_ins"), ("updates", "n_tup_upd"), ("deletes", "n_tup_del")):
        for prefix, toast in (("", False), ("toast_", True)):
            delta = sum(after[oid][col] - before[oid][col] for oid, (_, is_toast) in rels.items() if is_toast == toast)
            want[prefix + name] = delta / FIRES
    pf = s["per_fire"]
    for key, value in want.items():
        assert pf[key] == pytest.approx(value, abs=1e-9), (key, pf[key], value)
    # the article's four heap writes (claim update, poll update, delete, insert) and one effect
    # per other fire, and the TOAST chunks of each new state: inserted and deleted
    assert pf["updates"] == pytest.approx(2.0) and pf["deletes"] == pytest.approx(1.0)
    assert pf["inserts"] == pytest.approx((FIRES + proc.effects) / FIRES)
    assert pf["toast_inserts"] >= 2 and pf["toast_deletes"] >= 2
    assert pf["heap_writes"] == pytest.approx(want["inserts"] + want["updates"] + want["deletes"])
    assert pf["toast_writes"] == pytest.approx(want["toast_inserts"] + want["toast_updates"] + want["toast_deletes"])
    assert pf["row_writes"] == pytest.approx(pf["heap_writes"] + pf["toast_writes"])
    assert s["bill"]["durable_writes"] == pytest.approx(pf["row_writes"])  # no Temporal in this design
    # WAL from pg_stat_wal over the same window: records and bytes for every fire
    assert pf["wal_records"] > pf["row_writes"] and pf["wal_bytes"] > 0
