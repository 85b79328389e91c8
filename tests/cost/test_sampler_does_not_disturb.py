"""A sampler that does not disturb: while it samples (every second, and at the window's edges
with the statements read), no design's table is scanned, sequentially or through an index, by it
or by the design's ``stats()``. Every registered design that keeps tables, the same check."""

from __future__ import annotations

import asyncio
import time

import psycopg
import pytest
from psycopg import sql

from metrics.extensions import extensions
from metrics.recorder import FireRecorder
from metrics.sampler import Sampler
from schedulers.base import REGISTRY, Timer, create, scheduler_class
from tests.conformance.helpers import wait_until
from tests.cost.conftest import schema_relations, settle, settled_counters, stat_counters

SCANS = ("seq_scan", "idx_scan")
WAIT_S = 60.0  # how long the test waits for the samples (a condition, not a bound)
SAMPLES = 10  # samples taken between the window's edges
PG_DESIGNS = sorted(n for n in REGISTRY if getattr(scheduler_class(n), "needs_postgres", False))


async def scans_while_sampling(scheduler, ctx, tmp_path) -> dict[str, dict[str, int]]:
    """Arm 300 timers far ahead (no run loop), then take ten samples (every 0.2 s) and one at
    each window edge; the scans of the schema's tables meanwhile, by table."""
    usable = {n: e.schema for n, e in (await asyncio.to_thread(extensions, ctx.dsn)).items() if e.usable}
    sampler = Sampler(
        scheduler, FireRecorder(tmp_path / "segments", 0, 0), ctx.dsn, tmp_path, extensions=usable, every_s=0.2
    )
    await scheduler.arm([Timer(f"d-{i}", time.time() + 3600, "poll", f"t{i % 4}") for i in range(300)])
    with psycopg.connect(ctx.dsn, autocommit=True) as conn:
        rels = schema_relations(conn, ctx.schema)
        # the setup's and the arm's scans are counted before, not in the window: wait until the
        # arm's inserts show and the counters stop moving
        counted = await settled_counters(
            conn, list(rels), (*SCANS, "n_tup_ins"), until=lambda c: sum(x["n_tup_ins"] for x in c.values()) >= 300
        )
        before = {oid: {k: c[k] for k in SCANS} for oid, c in counted.items()}
    stop = asyncio.Event()
    await sampler.open()
    await sampler.window_start()
    taken = 0
    sample = sampler.sample

    async def counted(edge: bool = False) -> None:  # the sampler's own sample, counted
        nonlocal taken
        await sample(edge)
        taken += 1

    sampler.sample = counted
    loop = asyncio.create_task(sampler.loop(stop))
    # ten samples at the 0.2 s period; a slow machine takes longer, never fewer samples
    assert await wait_until(lambda: taken >= SAMPLES, SAMPLES * 0.2 + WAIT_S), f"{taken} of {SAMPLES} samples"
    stop.set()
    await loop
    await sampler.window_end()
    await sampler.close()
    await settle()
    with psycopg.connect(ctx.dsn, autocommit=True) as conn:
        after = stat_counters(conn, list(rels), SCANS)
    assert sum(1 for c in sampler.cols["scope"] if c.startswith(ctx.schema)) > 0  # it did sample the tables
    return {
        rels[oid][0]: {c: after[oid][c] - before[oid][c] for c in SCANS}
        for oid in rels
        if any(after[oid][c] != before[oid][c] for c in SCANS)
    }


@pytest.mark.parametrize("name", PG_DESIGNS)
async def test_the_sampler_never_scans_a_designs_tables(name, make_ctx, tmp_path):
    cls = scheduler_class(name)
    ctx = make_ctx(cls, state_bytes=4096)
    scheduler = create(name, ctx, **cls.conformance_options)
    await scheduler.setup()
    try:
        scanned = await scans_while_sampling(scheduler, ctx, tmp_path)
    finally:
        await scheduler.teardown(drop=True)
    assert not scanned, f"{name}: the sampler or stats() scanned {scanned}"


class CountingStats:
    """A design whose stats() counts its queue the way both Postgres designs once did: a
    count(*) over every table, on its own pool, each time the sampler asks."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.needs_postgres = True

    def __getattr__(self, name):
        return getattr(self.inner, name)

    async def stats(self) -> dict[str, float]:
        out = {}
        with psycopg.connect(self.inner.ctx.dsn, autocommit=True) as conn:
            for table in self.inner.relations():
                schema, name = table.split(".")
                out[name] = float(
                    conn.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(schema, name))).fetchone()[0]
                )
        return out


async def test_the_check_catches_a_stats_that_counts_the_queue(make_ctx, tmp_path):
    name = PG_DESIGNS[0]
    cls = scheduler_class(name)
    ctx = make_ctx(cls, state_bytes=4096)
    scheduler = create(name, ctx, **cls.conformance_options)
    await scheduler.setup()
    try:
        scanned = await scans_while_sampling(CountingStats(scheduler), ctx, tmp_path)
    finally:
        await scheduler.teardown(drop=True)
    assert scanned, "a count(*) in stats() went unnoticed"
