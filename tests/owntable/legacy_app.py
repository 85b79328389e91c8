"""A "legacy" application beside its own timer table: the Composio article's poll cycle (claim update, poll
update, delete, re-insert) on a table with its own column names and seven indexes, in a thread.

It counts every row it writes (from each statement's row count), so a test can check that the
table's counters moved by exactly the application's writes and nothing else, and it timestamps
every fire, so a test can take its fire rate over any window.

Run by hand to have something to inspect::

    python -m tests.owntable.legacy_app --dsn DSN --schema legacy_demo --triggers 2000 --seconds 600
"""

from __future__ import annotations

import argparse
import os
import random
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
from psycopg import sql

from schedulers.sqlfile import Queries

SQL_PATH = Path(__file__).with_name("legacy_app.sql")
TABLE = "poll_jobs"
TICK_S = 0.1  # the tick when nothing more is due
BLOB_BYTES = 4096  # incompressible: stored out of line (the Composio article's encrypted poll state)
SEED_CHUNK = 5000  # rows per seeding statement


@dataclass
class Counts:
    inserts: int = 0
    updates: int = 0
    deletes: int = 0
    fires: list[tuple[float, int]] = field(default_factory=list)  # (when, rows fired) per batch

    def fires_between(self, start: float, end: float) -> int:
        return sum(n for t, n in self.fires if start <= t < end)


class LegacyApp:
    def __init__(
        self,
        dsn: str,
        schema: str,
        triggers: int = 400,
        every_s: tuple[int, int] = (2, 6),
        tenants: int = 12,
        seed: int = 7,
    ) -> None:
        self.dsn, self.schema = dsn, schema
        self.triggers, self.every_s, self.tenants = triggers, every_s, tenants
        self.rng = random.Random(seed)
        self.q = Queries(SQL_PATH, schema)
        self.counts = Counts()
        self.every: list[int] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None

    @property
    def table(self) -> str:
        return f"{self.schema}.{TABLE}"

    def offered_rate_per_s(self) -> float:
        return sum(1.0 / e for e in self.every)

    def create(self) -> None:
        """The schema, the table, its indexes and the triggers (due spread over one period each)."""
        keys = [f"job-{i:05d}" for i in range(self.triggers)]
        accounts = [f"acct-{min(int(self.rng.paretovariate(1.2)), self.tenants):03d}" for _ in keys]
        self.every = [self.rng.randint(*self.every_s) for _ in keys]
        first = [self.rng.uniform(0, e) for e in self.every]
        blobs = [os.urandom(BLOB_BYTES) for _ in keys]
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(self.schema)))
            conn.execute(self.q["create_table"])
            conn.execute(self.q["create_indexes"])
            for i in range(0, len(keys), SEED_CHUNK):
                part = slice(i, i + SEED_CHUNK)
                conn.execute(
                    self.q["seed_rows"],
                    {
                        "keys": keys[part],
                        "accounts": accounts[part],
                        "first_s": first[part],
                        "every": self.every[part],
                        "blobs": blobs[part],
                    },
                )
            conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(self.schema, TABLE)))

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="legacy-app", daemon=True)
        self._thread.start()

    def stop(self) -> Counts:
        """Stop, close the connection (which flushes its statistics) and return the counts."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)
        if self.error is not None:
            raise self.error
        return self.counts

    def _loop(self) -> None:
        try:
            with psycopg.connect(self.dsn, autocommit=True, application_name="legacy app") as conn:
                while not self._stop.is_set():
                    with conn.transaction():
                        pks = [r[0] for r in conn.execute(self.q["claim"], {"worker": "legacy-1"}).fetchall()]
                    self.counts.updates += len(pks)
                    if pks:
                        with conn.transaction():
                            self.counts.updates += conn.execute(self.q["polled"], {"pks": pks}).rowcount
                            cur = conn.execute(self.q["rearm"], {"pks": pks})
                            self.counts.inserts += cur.rowcount
                            self.counts.deletes += cur.rowcount  # one row deleted for each inserted
                        self.counts.fires.append((time.time(), len(pks)))
                    if len(pks) < 800:
                        self._stop.wait(TICK_S)
        except BaseException as exc:  # surfaced by stop()
            self.error = exc


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dsn", required=True)
    p.add_argument("--schema", default="legacy_demo")
    p.add_argument("--triggers", type=int, default=2000)
    p.add_argument("--every", default="2..6", help="period range in whole seconds, LOW..HIGH")
    p.add_argument("--seconds", type=float, default=600.0)
    p.add_argument("--attach", action="store_true", help="run the loop on the table a previous run created")
    a = p.parse_args()
    lo, _, hi = a.every.partition("..")
    app = LegacyApp(a.dsn, a.schema, a.triggers, (int(lo), int(hi or lo)))
    if not a.attach:
        app.create()
        print(f"{app.table}: {a.triggers} triggers, offered {app.offered_rate_per_s():.1f} fires/s", flush=True)
    print(f"{app.table}: running the loop for {a.seconds:g} s", flush=True)
    app.start()
    try:
        time.sleep(a.seconds)
    except KeyboardInterrupt:
        pass
    c = app.stop()
    print(f"fires {sum(n for _, n in c.fires)}, inserts {c.inserts}, updates {c.updates}, deletes {c.deletes}")


if __name__ == "__main__":
    main()
