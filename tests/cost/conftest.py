"""Helpers for the cost tests: a design's relations read straight from the catalogue (not from
the design's own ``relations()``), their statistics, and a run directory made from a window."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import psycopg
import pyarrow as pa
import pyarrow.parquet as pq

from metrics import rundir

STATS_FLUSH_S = 1.6  # backends flush table counters about once a second when idle


def schema_relations(conn: psycopg.Connection, schema: str) -> dict[int, tuple[str, bool]]:
    """oid -> (name, is_toast) of every table in ``schema`` and of its TOAST table."""
    rows = conn.execute(
        "SELECT c.oid, c.relname, c.reltoastrelid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relkind = 'r'",
        (schema,),
    ).fetchall()
    out: dict[int, tuple[str, bool]] = {}
    for oid, name, toast in rows:
        out[int(oid)] = (name, False)
        if toast:
            out[int(toast)] = (name + "#toast", True)
    return out


def stat_counters(conn: psycopg.Connection, relids: list[int], columns: tuple[str, ...]) -> dict[int, dict[str, int]]:
    rows = conn.execute(
        f"SELECT relid, {', '.join(columns)} FROM pg_stat_all_tables WHERE relid = ANY(%s::oid[])", (relids,)
    ).fetchall()
    return {int(r[0]): {c: int(v or 0) for c, v in zip(columns, r[1:])} for r in rows}


async def settled_counters(
    conn: psycopg.Connection,
    relids: list[int],
    columns: tuple[str, ...],
    until=lambda counters: True,
    quiet_s: float = 0.5,
    timeout_s: float = 15.0,
) -> dict[int, dict[str, int]]:
    """The counters once ``until(counters)`` holds and two reads ``quiet_s`` apart agree: every
    backend that wrote them has flushed (on a loaded machine an idle backend's flush can take
    seconds), or the last read when ``timeout_s`` passes first."""
    deadline = time.time() + timeout_s
    last = stat_counters(conn, relids, columns)
    while time.time() < deadline:
        await asyncio.sleep(quiet_s)
        now = stat_counters(conn, relids, columns)
        if now == last and until(now):
            return now
        last = now
    return last


def write_run_dir(run_dir: Path, measure_start: float, measure_end: float, fired_at: list[float]) -> None:
    """config.json with the window and fires.parquet with one measured fire per ``fired_at``."""
    rundir.write_json(
        run_dir / rundir.CONFIG,
        {
            "scheduler": "test",
            "workload": {"name": "test"},
            "window": {
                "arm_start": measure_start - 1.0,
                "measure_start": measure_start,
                "measure_end": measure_end,
                "drain_limit_s": 1.0,
                "drained_s": 0.0,
                "undelivered_before": measure_end,
            },
        },
    )
    n = len(fired_at)
    table = pa.table(
        {
            "timer_id": [f"t{i}" for i in range(n)],
            "tenant_id": ["a"] * n,
            "type": ["poll"] * n,
            "due_at": fired_at,
            "armed_at": [measure_start - 1.0] * n,
            "fired_at": fired_at,
            "lag_s": [0.0] * n,
            "attempt": pa.array([1] * n, pa.int32()),
            "worker": ["w"] * n,
            "batch": pa.array([0] * n, pa.int64()),
            "effect_delivered": [False] * n,
            "warmup": [False] * n,
            "external_effect": [False] * n,
            "held_at_end": pa.array([None] * n, pa.bool_()),
        },
        schema=rundir.FIRES_SCHEMA,
    )
    pq.write_table(table, run_dir / rundir.FIRES)


async def settle() -> None:
    await asyncio.sleep(STATS_FLUSH_S)
