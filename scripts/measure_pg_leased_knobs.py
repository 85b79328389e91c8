"""Writes per fire and HOT ratio of pg_leased, per HOT knob setting.

    .venv/bin/python scripts/measure_pg_leased_knobs.py [--triggers 2000] [--cycles 5] [--change 0.3]

For each setting: a fresh database of its own (so no other session's snapshot holds back
pruning, see ``tests/pg_leased/conftest.py``), ``--triggers`` timers with a 4 kB incompressible
poll state (toasted-state: TOASTed encrypted state), one run loop, a processor that re-arms every fire
0-0.5 s later (so fires come in shuffled order, as with 60-120 s intervals) and finds news with
probability ``--change`` (a new state and an effect). After ``--cycles`` fires per trigger the
pool closes, statistics are flushed, and the tuple counters of every table *and its TOAST
table* give writes per fire (inserts + updates + deletes, all tables) and the HOT share of
updates; row bytes per fire is (inserts + updates) x the average live row size of each table
(new row versions only: no index entries, no WAL overhead). Arming is excluded: counters are
reset after the population is armed. WAL is not reported: without pg_walinspect or
pg_stat_statements, WAL is only known cluster-wide, where other sessions' writes land too.

Not a benchmark of speed: one machine, shared with other work. Counts of writes are exact.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from schedulers.base import Fire, Outcome, StoreContext, Timer
from schedulers.pg_leased import PgLeasedScheduler

# Each setting is the defaults plus the options shown.
SETTINGS: list[tuple[str, dict[str, Any]]] = [
    ("defaults", {}),
    ("inline_state=off (TOAST)", {"inline_state": False}),
    ("inline_state=off split_state=off", {"inline_state": False, "split_state": False}),
    ("split_state=off (state in the schedule row)", {"split_state": False}),
    ("skip_unchanged_state=off", {"skip_unchanged_state": False}),
    ("inline_state=off skip_unchanged_state=off", {"inline_state": False, "skip_unchanged_state": False}),
    ("state_fillfactor_pct=80", {"state_fillfactor_pct": 80}),
    ("state_fillfactor_pct=100", {"state_fillfactor_pct": 100}),
    ("inline_state=off state_fillfactor_pct=100", {"inline_state": False, "state_fillfactor_pct": 100}),
    ("fillfactor_pct=100", {"fillfactor_pct": 100}),
    ("fillfactor_pct=70", {"fillfactor_pct": 70}),
    ("autovacuum_tuned=off", {"autovacuum_tuned": False}),
]

TABLES = ("schedule", "state", "effects")


@dataclass
class Poller:
    state_bytes: int
    change: float
    rng: random.Random
    fires: int = 0
    changed: int = 0

    async def process(self, fires: Sequence[Fire]) -> list[Outcome]:
        out = []
        now = time.time()
        for _ in fires:
            news = self.rng.random() < self.change
            self.changed += news
            out.append(
                Outcome(
                    next_fire_at=now + self.rng.uniform(0.0, 0.5),
                    new_state=os.urandom(self.state_bytes) if news else None,
                    effect=news,
                )
            )
        self.fires += len(fires)
        return out

    def committed(self, fires: Sequence[Fire], delivered: Sequence[bool]) -> None:
        pass


def counters(conn: psycopg.Connection, schema: str) -> dict[str, dict[str, int]]:
    """Tuple counters of each table and of its TOAST table (``<table>.toast``)."""
    conn.execute("SELECT pg_stat_force_next_flush()")
    conn.execute("SELECT pg_stat_clear_snapshot()")
    rows = conn.execute(
        """
        SELECT c.relname, s.n_tup_ins, s.n_tup_upd, s.n_tup_hot_upd, s.n_tup_del, s.n_dead_tup,
               t.n_tup_ins, t.n_tup_upd, t.n_tup_del, t.n_dead_tup
          FROM pg_class c
          JOIN pg_namespace n ON n.oid = c.relnamespace
          JOIN pg_stat_all_tables s ON s.relid = c.oid
          LEFT JOIN pg_stat_all_tables t ON t.relid = c.reltoastrelid
         WHERE n.nspname = %s AND c.relkind = 'r'
        """,
        (schema,),
    ).fetchall()
    out = {}
    for name, ins, upd, hot, dele, dead, tins, tupd, tdel, tdead in rows:
        out[name] = {"ins": ins, "upd": upd, "hot": hot, "del": dele, "dead": dead}
        out[f"{name}.toast"] = {"ins": tins or 0, "upd": tupd or 0, "hot": 0, "del": tdel or 0, "dead": tdead or 0}
    return out


def row_bytes(conn: psycopg.Connection, schema: str) -> dict[str, float]:
    """Average on-disk size of a live row of each table and TOAST table.

    ``pg_column_size(t.*)`` flattens TOASTed values into the row, so an out-of-line poll state
    is counted as the 18-byte TOAST pointer the heap row really holds.
    """
    out: dict[str, float] = {}
    for table in TABLES:
        rel = sql.Identifier(schema, table)
        toast = conn.execute(
            "SELECT t.relname FROM pg_class c JOIN pg_class t ON t.oid = c.reltoastrelid WHERE c.oid = %s::regclass",
            (f"{schema}.{table}",),
        ).fetchone()
        chunks = 0.0
        if toast is not None:
            # A TOAST table has no row type; add the 24-byte tuple header to its three columns.
            n, chunks = conn.execute(
                sql.SQL(
                    "SELECT count(*), coalesce(avg(24 + pg_column_size(chunk_id) + pg_column_size(chunk_seq)"
                    " + pg_column_size(chunk_data)), 0) FROM {}"
                ).format(sql.Identifier("pg_toast", toast[0]))
            ).fetchone()
            chunks = float(chunks) if n else 0.0
        out[f"{table}.toast"] = chunks
        if table == "effects":
            out[table] = float(
                conn.execute(sql.SQL("SELECT coalesce(avg(pg_column_size(t.*)), 0) FROM {} t").format(rel)).fetchone()[
                    0
                ]
            )
            continue
        rest, state = conn.execute(
            sql.SQL(
                "SELECT coalesce(avg(pg_column_size(t.*) - coalesce(pg_column_size(t.poll_state), 0)), 0),"
                " coalesce(avg(coalesce(pg_column_size(t.poll_state), 0)), 0) FROM {} t"
            ).format(rel)
        ).fetchone()
        toast_pointer_bytes = 18
        out[table] = float(rest) + (toast_pointer_bytes if chunks and state else float(state))
    return out


async def measure(
    dsn: str, label: str, options: dict[str, Any], triggers: int, cycles: int, change: float, state_bytes: int
) -> dict:
    schema = "knobs"
    ctx = StoreContext(dsn=dsn, schema=schema, state_bytes=state_bytes)
    s = PgLeasedScheduler(ctx, **options)
    await s.setup()
    rng = random.Random(7)
    await s.arm([Timer(f"k-{i}", time.time() + rng.uniform(0, 0.5), tenant_id=f"t{i % 20}") for i in range(triggers)])
    await s.teardown(drop=False)  # close the pool: its backends flush the arming's statistics
    with psycopg.connect(dsn, autocommit=True) as conn:
        time.sleep(0.5)
        conn.execute("SELECT pg_stat_reset()")  # this database only: exclude arming
    proc = Poller(state_bytes, change, rng)
    stop = asyncio.Event()
    task = asyncio.create_task(s.run({"poll": proc}, stop, worker_id="measure"))
    t0 = time.time()
    while proc.fires < triggers * cycles and time.time() - t0 < 300:
        await asyncio.sleep(0.05)
    stop.set()
    await task
    fires = s.fires
    await s.teardown(drop=False)
    with psycopg.connect(dsn, autocommit=True) as conn:
        deadline = time.time() + 15
        while True:  # wait until the closed backends' statistics have landed
            c = counters(conn, schema)
            if c["schedule"]["upd"] >= 2 * fires or time.time() > deadline:
                break
            time.sleep(0.2)
        sizes = row_bytes(conn, schema)
    writes = sum(v["ins"] + v["upd"] + v["del"] for v in c.values())
    # Bytes of new row versions (inserts and updates; a delete only stamps xmax), not counting
    # index entries or WAL overhead: the copy volume each knob saves or costs.
    tuple_bytes = sum((v["ins"] + v["upd"]) * sizes.get(k, 0.0) for k, v in c.items())
    return {
        "label": label,
        "fires": fires,
        "changed": proc.changed,
        "writes_per_fire": writes / fires,
        "bytes_per_fire": tuple_bytes / fires,
        "tables": c,
    }


def hot_pct(t: dict[str, int]) -> str:
    return f"{100 * t['hot'] / t['upd']:.1f}%" if t["upd"] else "-"


def isolated_database(admin_dsn: str) -> tuple[str, str]:
    name = f"timerbench_pgl_knobs_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    params = conninfo_to_dict(admin_dsn)
    params["dbname"] = name
    return name, make_conninfo(**params)


def drop_database(admin_dsn: str, name: str) -> None:
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dsn", default=os.environ.get("TIMERBENCH_DSN"))
    ap.add_argument("--triggers", type=int, default=2000)
    ap.add_argument("--cycles", type=int, default=5, help="fires per trigger")
    ap.add_argument("--change", type=float, default=0.3, help="share of polls that find news (new state + effect)")
    ap.add_argument(
        "--state-bytes", type=int, default=4096, help="poll state size (the Composio article's TOASTed state: 4096)"
    )
    ap.add_argument("--only", default=None, help="run only settings whose label contains this")
    args = ap.parse_args()
    dsn = args.dsn
    if not dsn:
        from harness import stack

        dsn, _ = stack.postgres().start()
    print(
        f"{args.triggers} triggers x {args.cycles} fires, {args.state_bytes}-byte state,"
        f" {args.change:.0%} of polls change state;"
        " writes = inserts + updates + deletes over schedule, state, effects and their TOAST tables\n"
    )
    print(
        "| setting | fires | writes/fire | row bytes/fire | schedule upd/fire | schedule HOT | state upd/fire"
        " | state HOT | TOAST writes/fire | effects ins/fire | dead tuples at end |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for label, options in SETTINGS:
        if args.only and args.only not in label:
            continue
        name, db = isolated_database(dsn)
        try:
            r = await measure(db, label, options, args.triggers, args.cycles, args.change, args.state_bytes)
        finally:
            drop_database(dsn, name)
        t, f = r["tables"], r["fires"]
        toast = sum(t[k]["ins"] + t[k]["upd"] + t[k]["del"] for k in t if k.endswith(".toast"))
        dead = sum(v["dead"] for v in t.values())
        print(
            f"| {label} | {f} | {r['writes_per_fire']:.2f} | {r['bytes_per_fire']:.0f}"
            f" | {t['schedule']['upd'] / f:.2f} | {hot_pct(t['schedule'])}"
            f" | {t['state']['upd'] / f:.2f} | {hot_pct(t['state'])} | {toast / f:.2f}"
            f" | {t['effects']['ins'] / f:.2f} | {dead} |",
            flush=True,
        )


if __name__ == "__main__":
    asyncio.run(main())
