"""The sampler against a real Postgres table: counters as deltas, and the TOAST table beside it."""

import asyncio
import time

import psycopg
from psycopg import sql

from metrics import rundir
from metrics.recorder import FireRecorder
from metrics.sampler import Sampler


class OneTable:
    """Just enough of a scheduler for the sampler: one table it names, and a gauge."""

    needs_postgres = True

    def __init__(self, schema: str) -> None:
        self.schema = schema

    def relations(self) -> list[str]:
        return [f"{self.schema}.triggers"]

    async def stats(self) -> dict[str, float]:
        return {"depth": 7.0}


async def test_sampler_reads_table_and_toast_stats_as_deltas(pg_dsn, schema, tmp_path):
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        conn.execute(
            sql.SQL("CREATE TABLE {}.triggers (id int PRIMARY KEY, state bytea)").format(sql.Identifier(schema))
        )
        conn.execute(
            sql.SQL("INSERT INTO {}.triggers SELECT g, NULL FROM generate_series(1, 50) g").format(
                sql.Identifier(schema)
            )
        )
    now = time.time()
    sampler = Sampler(OneTable(schema), FireRecorder(tmp_path / "segments", now, now + 60), pg_dsn, tmp_path)
    await sampler.open()  # the baseline: the 50 inserts above are before the run
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        # incompressible 4 KB states go to the TOAST table (the Composio article)
        conn.execute(
            sql.SQL(
                "UPDATE {}.triggers t SET state = (SELECT decode(string_agg(md5(random()::text || g || t.id), ''), "
                "'hex') FROM generate_series(1, 256) g) WHERE id <= 10"
            ).format(sql.Identifier(schema))
        )
        conn.execute(sql.SQL("DELETE FROM {}.triggers WHERE id > 45").format(sql.Identifier(schema)))
    await asyncio.sleep(1.5)  # backends flush table counters about once a second
    await sampler.sample()
    await sampler.close()
    latest = sampler.latest
    table, toast = f"{schema}.triggers", f"{schema}.triggers#toast"
    assert latest[(table, "n_tup_ins")] == 0  # deltas since the baseline
    assert latest[(table, "n_tup_upd")] == 10
    assert latest[(table, "n_tup_del")] == 5
    assert latest[(toast, "n_tup_ins")] > 0  # the states' chunks
    assert latest[(table, "table_bytes")] > 0 and latest[(table, "index_bytes")] > 0
    assert 0.0 <= latest[(table, "hot_ratio")] <= 1.0
    assert latest[("run", "backend.depth")] == 7.0
    assert latest[("run", "wal_bytes")] > 0
    assert ("run", "oldest_xact_age_s") in latest
    sampler.save()
    assert rundir.read_samples(tmp_path).num_rows == sum(1 for _ in latest)  # one segment: this sample


async def test_sampling_goes_on_while_a_segment_is_written(tmp_path, monkeypatch):
    """The segment closed every few samples is written in the background: a slow write (seconds
    on a busy machine) must not hold the next samples back, and the loop ends only after it has
    finished."""
    import metrics.sampler as sampler_mod

    monkeypatch.setattr(sampler_mod, "SAMPLE_EVERY_S", 0.01)
    now = time.time()
    sampler = Sampler(OneTable("s"), FireRecorder(tmp_path / "segments", now, now + 60), None, tmp_path)
    taken, written = [], asyncio.Event()
    release = asyncio.Event()

    async def sample() -> None:
        taken.append(len(taken))

    async def slow_copy() -> None:
        await release.wait()  # a write that takes as long as the test wants
        written.set()

    monkeypatch.setattr(sampler, "sample", sample)
    monkeypatch.setattr(sampler, "save_async", slow_copy)
    stop = asyncio.Event()
    loop = asyncio.create_task(sampler.loop(stop))
    deadline = time.time() + 30
    while len(taken) < 25 and time.time() < deadline:
        await asyncio.sleep(0.01)
    assert len(taken) >= 25, f"sampling stopped at {len(taken)} samples while a segment was being written"
    stop.set()
    await asyncio.sleep(0.05)
    assert not loop.done(), "the loop returned before the segment it started was written"
    release.set()
    await asyncio.wait_for(loop, 5)
    assert written.is_set()
