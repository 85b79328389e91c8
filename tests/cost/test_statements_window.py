"""Runs that share a database each count their own statements: a window's start resets this
database's pg_stat_statements entries only while no other run's window is open, so no run's
reset drops the calls another run counted since its start."""

from __future__ import annotations

import asyncio
import time

import psycopg
from psycopg import sql

from metrics import rundir
from metrics.extensions import extensions
from metrics.recorder import FireRecorder
from metrics.sampler import Sampler
from tests.unit.test_sampler import OneTable


def probe(dsn: str, table: sql.Composed, times: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for _ in range(times):
            conn.execute(sql.SQL("SELECT count(*) FROM {}").format(table))


def probe_calls(run_dir, name: str) -> float:
    """The window's calls of the probe statement, from the run directory's statements."""
    df = rundir.read_statements(run_dir).to_pandas()
    return float(df.loc[df["query"].str.contains(name, regex=False), "calls"].sum())


async def test_a_window_opened_inside_another_does_not_reset_its_statements(pg_dsn, schema, tmp_path):
    # a table name of its own: Postgres 18 files same-shaped statements by the names they carry
    name = f"probe_{schema[-8:]}"
    table = sql.Identifier(schema, name)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        conn.execute(sql.SQL("CREATE TABLE {} (id int)").format(table))
    usable = {n: e.schema for n, e in (await asyncio.to_thread(extensions, pg_dsn)).items() if e.usable}
    assert "pg_stat_statements" in usable, "the embedded server loads pg_stat_statements"

    def sampler(sub: str) -> Sampler:
        d = tmp_path / sub
        d.mkdir()
        now = time.time()
        return Sampler(
            OneTable(schema),
            FireRecorder(d / "segments", now, now + 60),
            pg_dsn,
            d,
            extensions=usable,
            every_s=0,
            reset_statements=True,
        )

    outer, inner, after = sampler("outer"), sampler("inner"), sampler("after")
    await outer.open()
    await outer.window_start()
    await asyncio.to_thread(probe, pg_dsn, table, 5)
    await inner.open()
    await inner.window_start()
    assert inner.statements_reset is False  # the outer window is open: no reset inside it
    await asyncio.to_thread(probe, pg_dsn, table, 7)
    await inner.window_end()
    await asyncio.to_thread(probe, pg_dsn, table, 3)
    await outer.window_end()
    for s in (outer, inner):
        await s.close()
    assert probe_calls(tmp_path / "inner", name) == 7
    assert probe_calls(tmp_path / "outer", name) == 5 + 7 + 3  # every call in its window, none lost

    # both windows closed (another test's window may be open meanwhile, so whether this one
    # reset is not asserted): a window's own calls count exactly either way
    await after.open()
    await after.window_start()
    await asyncio.to_thread(probe, pg_dsn, table, 4)
    await after.window_end()
    await after.close()
    assert probe_calls(tmp_path / "after", name) == 4
    # each window let its lock go with its connection at its end
    assert all(s._window_conn is None for s in (outer, inner, after))
