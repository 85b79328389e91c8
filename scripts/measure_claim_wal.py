"""WAL and time per pg_leased claim under a fixed backlog, by claim setting.

    .venv/bin/bench env up
    .venv/bin/python scripts/measure_claim_wal.py             # rows, ms and WAL per claim, by setting
    .venv/bin/python scripts/measure_claim_wal.py --explain   # the plan of one claim (rolled back)

Arms ``--backlog`` due timers (default 60,000) and ``--future`` not-yet-due ones (default 0) over
100 tenants (4 KB state) in a schema of its own. Then it either runs 15 claims one after another
and prints rows, milliseconds and WAL per claim (``pg_current_wal_lsn`` deltas: server-wide, so
run it on a quiet server), or prints ``EXPLAIN (ANALYZE, BUFFERS)`` of one claim with the default
settings and rolls it back. ``overselect=60`` is the timer-wheel article's over-select at the default
max_per_tenant (batch x max_per_tenant rows locked per claim); the default locks batch x 1
(overselect 1; it was 2 when MEASUREMENTS.md's claim table was measured).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time

import psycopg
from psycopg import sql

from harness import stack
from schedulers.base import StoreContext, Timer
from schedulers.pg_leased import PgLeasedScheduler

SETTINGS = [("default", {}), ("seed_overselect_60", {"overselect": 60}), ("max_per_tenant_3", {"max_per_tenant": 3})]


async def armed(dsn: str, label: str, opts: dict, backlog: int, future: int, tenants: int = 100) -> PgLeasedScheduler:
    """A scheduler on a fresh schema holding ``backlog`` due and ``future`` later timers, vacuumed."""
    schema = f"claim_wal_{label}"
    s = PgLeasedScheduler(StoreContext(dsn=dsn, schema=schema, state_bytes=4096), **opts)
    await s.teardown(drop=True)
    await s.setup()
    now = time.time()
    rnd = random.Random(1)
    timers = [Timer(f"t{i}", now - 60 + rnd.random() * 50, tenant_id=f"ten{i % tenants:03d}") for i in range(backlog)]
    timers += [Timer(f"f{i}", now + 600 + rnd.random() * 600, tenant_id=f"ten{i % tenants:03d}") for i in range(future)]
    for i in range(0, len(timers), 5000):
        await s.arm(timers[i : i + 5000])
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as c:
        await c.execute(sql.SQL("VACUUM ANALYZE {}").format(sql.Identifier(schema, "schedule")))
    return s


async def measure(dsn: str, label: str, opts: dict, backlog: int, future: int, claims: int = 15) -> None:
    s = await armed(dsn, label, opts, backlog, future)
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as c:
        (statement,) = s._claim_statements()
        lsn0 = (await (await c.execute("SELECT pg_current_wal_lsn()")).fetchone())[0]
        t0 = time.perf_counter()
        got = 0
        for k in range(claims):
            got += len(await s._claim(statement, "probe", k, s.batch))
        elapsed = time.perf_counter() - t0
        wal = float((await (await c.execute("SELECT pg_current_wal_lsn() - %s::pg_lsn", (lsn0,))).fetchone())[0])
    print(
        f"{label:22s} rows/claim {got / claims:6.0f}  ms/claim {1000 * elapsed / claims:7.1f}  "
        f"WAL KB/claim {wal / claims / 1024:8.1f}  WAL B/row {wal / max(got, 1):7.0f}",
        flush=True,
    )
    await s.teardown(drop=True)


async def explain(dsn: str, backlog: int, future: int) -> None:
    s = await armed(dsn, "explain", {}, backlog, future)
    (statement,) = s._claim_statements()
    params = s.claim_params("probe", s.batch)
    async with await psycopg.AsyncConnection.connect(dsn) as c:
        cur = await c.execute(sql.SQL("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) ") + statement, params)
        for (line,) in await cur.fetchall():
            print(line)
        await c.rollback()
    await s.teardown(drop=True)


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backlog", type=int, default=60_000, help="due timers (default 60,000)")
    ap.add_argument("--future", type=int, default=0, help="timers due in 10-20 minutes (default 0)")
    ap.add_argument("--explain", action="store_true", help="print the plan of one claim instead")
    args = ap.parse_args()
    dsn = stack.resolve(None, None, False, say=print).dsn
    if args.explain:
        await explain(dsn, args.backlog, args.future)
        return
    for label, opts in SETTINGS:
        await measure(dsn, label, opts, args.backlog, args.future)


if __name__ == "__main__":
    asyncio.run(main())
