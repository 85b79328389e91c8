"""Exact bloat, cross-checked: pgstattuple at the end of a run on a deliberately bloated table,
against the dead tuples the test made and their bytes computed from the rows themselves; and the
warning when the statistics' n_dead_tup disagrees."""

from __future__ import annotations

import asyncio

import psycopg
import pytest
from psycopg import sql

from metrics import accounting, rundir
from metrics.extensions import extensions
from metrics.recorder import FireRecorder
from metrics.sampler import Sampler
from tests.cost.conftest import settle, write_run_dir
from tests.unit.test_sampler import OneTable  # a scheduler of one table, {schema}.triggers

ROWS, DELETED = 2000, 500


async def test_pgstattuple_counts_a_deliberately_bloated_tables_dead_tuples(pg_dsn, schema, tmp_path):
    usable = {n: e.schema for n, e in (await asyncio.to_thread(extensions, pg_dsn)).items() if e.usable}
    if "pgstattuple" not in usable:
        pytest.skip(f"pgstattuple is not usable on this server: {extensions(pg_dsn)['pgstattuple'].missing}")
    table = sql.Identifier(schema, "triggers")
    with psycopg.connect(pg_dsn) as holder:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
            # fixed-width rows, no autovacuum: nothing but this test touches the dead tuples
            conn.execute(
                sql.SQL(
                    "CREATE TABLE {} (id int PRIMARY KEY, pad char(200) NOT NULL) WITH (autovacuum_enabled = off)"
                ).format(table)
            )
            conn.execute(sql.SQL("INSERT INTO {} SELECT g, 'x' FROM generate_series(1, %s) g").format(table), (ROWS,))
            row_bytes = conn.execute(sql.SQL("SELECT pg_column_size(t.*) FROM {} t LIMIT 1").format(table)).fetchone()[
                0
            ]
            # an old snapshot held open (the Composio article's doom-loop ingredient): page pruning cannot
            # remove the deleted versions, so every one is still a dead tuple taking space
            holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            holder.execute(sql.SQL("SELECT count(*) FROM {}").format(table))
            conn.execute(sql.SQL("DELETE FROM {} WHERE mod(id, 4) = 0").format(table))
            pages = conn.execute(
                "SELECT pg_relation_size(%s::regclass) / 8192", (f'"{schema}"."triggers"',)
            ).fetchone()[0]
        await settle()  # the closed connection's counters reach the statistics
        sampler = Sampler(
            OneTable(schema), FireRecorder(tmp_path / "segments", 0, 0), pg_dsn, tmp_path, extensions=usable, every_s=0
        )
        await sampler.open()
        await sampler.bloat()
        await sampler.close()
        holder.rollback()
    relations = {r["scope"]: r for r in rundir.read_bloat(tmp_path)}
    r = relations[f"{schema}.triggers"]
    assert r["dead_tuple_count"] == DELETED
    assert r["tuple_count"] == ROWS - DELETED
    assert r["table_len"] == pages * 8192
    # pgstattuple's percent is dead tuple bytes over the table's bytes, two decimals
    assert r["dead_tuple_percent"] == pytest.approx(100.0 * DELETED * row_bytes / (pages * 8192), abs=0.01)
    assert r["n_dead_tup"] == DELETED  # the statistics agree here: nothing pruned, nothing vacuumed


async def test_a_disagreeing_n_dead_tup_is_warned_about(pg_dsn, schema, tmp_path):
    usable = {n: e.schema for n, e in (await asyncio.to_thread(extensions, pg_dsn)).items() if e.usable}
    if "pgstattuple" not in usable:
        pytest.skip("pgstattuple is not usable on this server")
    table = sql.Identifier(schema, "triggers")
    # a connection that closes: a backend flushes its table counters at exit (an idle one may
    # keep them for up to 10 s), so they are in the statistics before the reset below
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        conn.execute(
            sql.SQL(
                "CREATE TABLE {} (id int PRIMARY KEY, pad char(200) NOT NULL) WITH (autovacuum_enabled = off)"
            ).format(table)
        )
        conn.execute(sql.SQL("INSERT INTO {} SELECT g, 'x' FROM generate_series(1, %s) g").format(table), (ROWS,))
        conn.execute(sql.SQL("DELETE FROM {} WHERE id <= %s").format(table), (DELETED,))
    await settle()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        # the statistics forget the table's counters; its pages still hold the dead tuples
        conn.execute("SELECT pg_stat_reset_single_table_counters(%s::regclass)", (f'"{schema}"."triggers"',))
    sampler = Sampler(
        OneTable(schema), FireRecorder(tmp_path / "segments", 0, 0), pg_dsn, tmp_path, extensions=usable, every_s=0
    )
    await sampler.open()
    await sampler.bloat()
    await sampler.close()
    write_run_dir(tmp_path, 0.0, 1.0, [])
    s = accounting.compute_summary(tmp_path)
    assert s["bloat"]["disagree"] == [f"{schema}.triggers"]
    assert s["bloat"]["dead_tuples_exact"] == DELETED and s["bloat"]["n_dead_tup"] == 0
    assert any(
        w.startswith(f"dead tuples of {schema}.triggers at the end: pgstattuple counts 500")
        for w in s["measurement_notes"]
    )
