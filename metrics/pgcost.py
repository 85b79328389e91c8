"""What a run costs Postgres, from the server's own statistics: WAL and bytes written
(server-wide), per-statement cost (``pg_stat_statements``) and exact dead tuples
(``pgstattuple``). The SQL is in ``pgcost.sql``; the sampler (:mod:`metrics.sampler`) calls these.

Server-wide means every database and every client: on a shared server, other work counts too.

Statements: the window's cost of each statement is the difference of two reads of
``pg_stat_statements`` (start and end of the window), restricted to this database. On the
embedded server the entries of this database are reset at the start, so the first read is
(nearly) empty, unless another run's window is open on the same database: every open window
holds an advisory lock shared, and a reset needs it alone. Postgres 18 files same-shaped
statements under one entry when their tables carry the same names or aliases, whatever their
schema (it jumbles names, not oids): only the window's difference is this run's, and a run
sharing the server with another run of the same design would be counted in it too. Statements
whose text carries ``timerbench-sampler`` are the sampler's own (``source`` = ``sampler``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import psycopg

from schedulers.sqlfile import Queries, load_blocks

SQL_PATH = Path(__file__).with_name("pgcost.sql")
SQL = load_blocks(SQL_PATH)
SAMPLER_MARK = "timerbench-sampler"  # in the text of every statement the sampler sends
SERVER_COUNTERS = ("wal_records", "wal_fpi", "wal_bytes", "io_write_bytes", "checkpoints")
STATEMENT_COUNTERS = (
    "calls",
    "rows",
    "total_exec_ms",
    "total_plan_ms",
    "shared_blks_hit",
    "shared_blks_read",
    "shared_blks_dirtied",
    "shared_blks_written",
    "wal_records",
    "wal_fpi",
    "wal_bytes",
)
PG_STAT_IO_FROM = 180000  # pg_stat_io has write_bytes / extend_bytes from Postgres 18
PG_STAT_WAL_FROM = 140000


async def server_info(conn: psycopg.AsyncConnection) -> tuple[int, int]:
    """(server_version_num, this connection's backend pid)."""
    row = await (await conn.execute(SQL["server_version_num"])).fetchone()
    return int(row[0]), int(row[1])


def counters_query(version_num: int) -> str | None:
    if version_num >= PG_STAT_IO_FROM:
        return SQL["server_counters"]
    if version_num >= PG_STAT_WAL_FROM:
        return SQL["server_counters_wal"]
    return None


async def server_counters(conn: psycopg.AsyncConnection, query: str) -> dict[str, float]:
    cur = await conn.execute(query)
    row = await cur.fetchone()
    return {d.name: float(v or 0.0) for d, v in zip(cur.description, row)}


async def checkpoint(conn: psycopg.AsyncConnection) -> None:
    await conn.execute(SQL["checkpoint"])


WINDOW_LOCK_KEY = 0x74696D6572  # the advisory lock every open window holds shared ("timer")


async def open_statements_window(conn: psycopg.AsyncConnection, ext_schema: str, reset: bool) -> bool:
    """Hold the window lock (shared) on ``conn`` until it closes, resetting this database's
    statements first when asked and no other run's window is open; whether it reset. Runs that
    share a database then never reset inside each other's windows: each window's figures are the
    difference of its own two reads."""
    key = {"key": WINDOW_LOCK_KEY}
    if reset and (await (await conn.execute(SQL["window_try_reset_lock"], key)).fetchone())[0]:
        try:
            await conn.execute(Queries(SQL_PATH, ext_schema)["statements_reset"])
            await conn.execute(SQL["window_hold_lock"], key)  # taken before the exclusive goes: no gap
        finally:
            await conn.execute(SQL["window_drop_reset_lock"], key)
        return True
    await conn.execute(SQL["window_hold_lock"], key)  # waits only for a reset under way
    return False


async def read_statements(conn: psycopg.AsyncConnection, ext_schema: str) -> dict[tuple, dict[str, Any]]:
    """This database's statements, keyed (userid, toplevel, queryid)."""
    cur = await conn.execute(Queries(SQL_PATH, ext_schema)["statements"])
    names = [d.name for d in cur.description]
    out: dict[tuple, dict[str, Any]] = {}
    for row in await cur.fetchall():
        r = dict(zip(names, row))
        out[(r["userid"], r["toplevel"], r["queryid"])] = r
    return out


def statement_deltas(start: dict[tuple, dict[str, Any]], end: dict[tuple, dict[str, Any]]) -> dict[str, list]:
    """Columns of :data:`metrics.rundir.STATEMENTS_SCHEMA`: each statement's cost between the two
    reads (an entry with fewer calls at the end than at the start was evicted and made again:
    its end values are all in the window). Statements not called in between are left out."""
    cols: dict[str, list] = {k: [] for k in ("queryid", "query", "source", *STATEMENT_COUNTERS, "mean_exec_ms")}
    for key, e in end.items():
        s = start.get(key)
        if s is not None and float(e["calls"]) < float(s["calls"]):
            s = None
        delta = {k: float(e[k] or 0.0) - (float(s[k] or 0.0) if s else 0.0) for k in STATEMENT_COUNTERS}
        if delta["calls"] <= 0:
            continue
        text = str(e["query"] or "")
        cols["queryid"].append(int(e["queryid"] or 0))
        cols["query"].append(text)
        cols["source"].append("sampler" if SAMPLER_MARK in text else "design")
        for k in STATEMENT_COUNTERS:
            cols[k].append(delta[k])
        cols["mean_exec_ms"].append(delta["total_exec_ms"] / delta["calls"])
    return cols


async def tuple_stats(conn: psycopg.AsyncConnection, ext_schema: str, relid: int) -> dict[str, float]:
    """``pgstattuple`` of one relation and ``n_dead_tup`` / ``n_live_tup`` read beside it."""
    cur = await conn.execute(Queries(SQL_PATH, ext_schema)["pgstattuple"], {"relid": relid})
    row = await cur.fetchone()
    return {d.name: (math.nan if v is None else float(v)) for d, v in zip(cur.description, row)}
