"""Buffers per claim of a running ``bench run`` of pg_leased or pg_partitioned, from
pg_stat_statements.

    .venv/bin/python scripts/measure_claim_buffers.py --for 200s --csv claims.csv &
    .venv/bin/bench run --scheduler pg_partitioned --rate 556/s --duration 60s --warmup 20s

The run's metrics sampler records dead tuples per partition, not what a claim reads. This script
waits for the newest ``run_*`` schema that holds a ``schedule`` table, then every ``--every``
seconds reads ``pg_stat_statements`` (preloaded by the embedded stack, ``track = top``) and
prints one line: the claims made since the last read, shared buffers they touched per claim
(hit + read), rows per claim, the buffers per second that every statement of the run (claims,
commits, heartbeats, sweeps, gauges) touched on the schedule table(s) and their indexes
(``pg_statio_user_tables``), and the dead tuples of the schedule table(s) together. These are
the run's own claims, every one of them, with nothing added. Each line starts with the epoch
time, to place it against the run's fault window.

Claims are recognised by their text (``claim_due`` starts ``WITH RECURSIVE tenants``). Postgres
18 identifies a statement by the aliases of its tables, not their names, so the claims of every
partition (all ``... s``) share one entry, and so would another run's: only deltas over this
run's intervals are used, and the server must have no other claims meanwhile.
"""

from __future__ import annotations

import argparse
import csv
import sys
import time

import psycopg

from harness import stack as stack_mod

NEWEST_RUN_SCHEMA = """
SELECT n.nspname
  FROM pg_namespace n
  JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = 'schedule'
 WHERE n.nspname LIKE 'run\\_%'
   AND (c.relkind = 'r' OR EXISTS (SELECT 1 FROM pg_inherits i WHERE i.inhparent = c.oid))
 ORDER BY n.nspname DESC
 LIMIT 1
"""

CLAIMS = """
SELECT query, calls, shared_blks_hit + shared_blks_read AS buffers, rows
  FROM pg_stat_statements
 WHERE query LIKE 'WITH RECURSIVE tenants%%'
"""

DEAD_TUPLES = """
SELECT count(*), coalesce(sum(n_dead_tup), 0) FROM pg_stat_user_tables
 WHERE schemaname = %s AND relname LIKE 'schedule%%'
"""

SCHEDULE_BUFFERS = """
SELECT coalesce(sum(heap_blks_hit + heap_blks_read + coalesce(idx_blks_hit, 0) + coalesce(idx_blks_read, 0)), 0)
  FROM pg_statio_user_tables
 WHERE schemaname = %s AND relname LIKE 'schedule%%'
"""


def seconds(text: str) -> float:
    return float(text.removesuffix("s"))


def claim_totals(conn: psycopg.Connection) -> tuple[int, int, int]:
    """Cumulative (claims, buffers, rows) of the claim statements."""
    rows = conn.execute(CLAIMS).fetchall()
    return sum(r[1] for r in rows), sum(int(r[2]) for r in rows), sum(r[3] for r in rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dsn", default=None, help="default: the embedded Postgres")
    ap.add_argument("--every", default="5s")
    ap.add_argument("--for", dest="for_", default="200s", help="stop after this long")
    ap.add_argument("--csv", default=None, help="also write the lines to this CSV file")
    args = ap.parse_args()
    dsn = args.dsn or stack_mod.postgres().dsn()
    every_s, until = seconds(args.every), time.time() + seconds(args.for_)
    with psycopg.connect(dsn, autocommit=True) as conn:
        before = conn.execute(NEWEST_RUN_SCHEMA).fetchone()
        schema = None
        while time.time() < until:  # a run schema newer than any that existed
            row = conn.execute(NEWEST_RUN_SCHEMA).fetchone()
            if row and row != before:
                schema = row[0]
                break
            time.sleep(0.2)
        if schema is None:
            print("no new run schema appeared", file=sys.stderr)
            return 1
        print(f"watching {schema}", flush=True)
        out = open(args.csv, "w", newline="") if args.csv else None
        writer = csv.writer(out) if out else None
        header = [
            "epoch_s",
            "claims",
            "buffers_per_claim",
            "rows_per_claim",
            "schedule_buffers_per_s",
            "schedule_dead_tuples",
        ]
        print(*header, sep="\t", flush=True)
        if writer:
            writer.writerow(header)
        last_claims, last_total, last_t = claim_totals(conn), None, time.time()
        try:
            while time.time() < until:
                time.sleep(max(0.0, every_s - (time.time() - last_t)))
                t = time.time()
                try:
                    claims = claim_totals(conn)
                    tables, dead = conn.execute(DEAD_TUPLES, (schema,)).fetchone()
                    total = float(conn.execute(SCHEDULE_BUFFERS, (schema,)).fetchone()[0])
                except psycopg.Error as exc:
                    print(f"read failed: {exc}".splitlines()[0], file=sys.stderr)
                    continue
                if not tables:
                    break  # the run dropped its schema
                if claims[0] < last_claims[0]:
                    # a bench run resets this database's pg_stat_statements entries when its
                    # measured window opens: what is there now was counted since then
                    last_claims = (0, 0, 0)
                n = claims[0] - last_claims[0]
                line = [
                    round(t, 1),
                    n,
                    round((claims[1] - last_claims[1]) / n) if n else "",
                    round((claims[2] - last_claims[2]) / n, 1) if n else "",
                    round((total - last_total) / (t - last_t)) if last_total is not None else "",
                    int(dead),
                ]
                last_claims, last_total, last_t = claims, total, t
                print(*line, sep="\t", flush=True)
                if writer:
                    writer.writerow(line)
                    out.flush()
        finally:
            if out:
                out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
