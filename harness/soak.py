"""``bench soak`` (``bench run --soak``): a long run whose report shows trends (:mod:`metrics.soak`).

What a soak adds to a run:

* **phases** for ``--readers``: the readers hold the horizon over the middle third of the
  measured window (:data:`READERS_FROM`, :data:`READERS_UNTIL`), so the first third is the level
  before, the middle one the load, and the last third shows the recovery;
* **claim statement reads**: ``pg_stat_statements`` at every bin edge (``--soak-bin``, a minute by
  default, shorter for a soak under 20 minutes), the counters of the design's claim statement
  appended to ``soak_statements.jsonl`` (a killed soak keeps every edge it read). The claim
  statement is found by its text: the ``claim_due`` block of the design's ``queries.sql``, matched
  to the statements' normalised text by the words they share (:func:`similarity`); pg_stat_statements
  files same-shaped statements per table name, so a design's claims over several tables are
  several entries, all counted.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import re
import time
from pathlib import Path
from typing import Any

from metrics.soak import SOAK_STATEMENTS

READERS_FROM = 1 / 3  # of the measured window: the readers start holding here ...
READERS_UNTIL = 2 / 3  # ... and let go here
MAX_BIN_S = 60.0
MIN_BINS = 20  # a soak shorter than 20 minutes gets shorter bins, so its trends have points
MATCH = 0.6  # a statement is the claim when it shares this share of its words with claim_due
_WORD = re.compile(r"[a-z_][a-z0-9_]*")
_COMMENT = re.compile(r"--[^\n]*|/\*.*?\*/", re.S)


def default_bin_s(duration_s: float) -> float:
    return max(1.0, min(MAX_BIN_S, duration_s / MIN_BINS))


def words(text: str) -> set[str]:
    return set(_WORD.findall(_COMMENT.sub(" ", text).lower()))


def similarity(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b) if a or b else 0.0


def claim_words(cls) -> set[str] | None:
    """The words of the design's ``claim_due`` statement (its module's ``*QUERIES_SQL`` files),
    or None for a design without one (Temporal's)."""
    from schedulers.sqlfile import load_blocks

    module = importlib.import_module(cls.__module__)
    paths = [v for k, v in vars(module).items() if k.endswith("QUERIES_SQL") and isinstance(v, Path)]
    for path in paths:
        block = load_blocks(path).get("claim_due")
        if block:
            return words(block)
    return None


class ClaimStatements:
    """Reads the claim statement's counters at every bin edge of the window."""

    def __init__(self, cls, dsn: str | None, run_dir: Path, bin_s: float) -> None:
        self.words = claim_words(cls) if dsn else None
        self.dsn = dsn
        self.path = Path(run_dir) / SOAK_STATEMENTS
        self.bin_s = bin_s
        self.matched: dict[str, str] = {}  # queryid -> the start of its text
        self.error: str | None = None

    def describe(self) -> dict[str, Any]:
        return {"matched": [{"queryid": k, "query": v} for k, v in self.matched.items()], "error": self.error}

    async def run(self, ext_schema: str | None, window: dict, opened, stop: asyncio.Event) -> None:
        """From the window's start (once ``opened()`` says the sampler reset the statements) to its
        end, one read per bin edge."""
        if self.words is None or not ext_schema:
            self.error = "no claim statement to read" if self.words is None else "pg_stat_statements not usable"
            return
        import psycopg

        while not opened() and not stop.is_set():
            await asyncio.sleep(0.2)
        k = 0
        async with await psycopg.AsyncConnection.connect(
            self.dsn, autocommit=True, connect_timeout=10, application_name="timerbench-sampler-soak"
        ) as conn:
            while not stop.is_set():
                await self._read(conn, ext_schema)
                k += 1
                edge = window["measure_start"] + k * self.bin_s
                if edge > window["measure_end"] + 1e-6:
                    edge = window["measure_end"]
                    if time.time() >= edge:
                        return
                try:
                    await asyncio.wait_for(stop.wait(), max(0.0, edge - time.time()))
                except TimeoutError:
                    pass
            await self._read(conn, ext_schema)  # the state where the run stopped

    async def _read(self, conn, ext_schema: str) -> None:
        from metrics.pgcost import SAMPLER_MARK, read_statements

        try:
            rows = await asyncio.wait_for(read_statements(conn, ext_schema), 30)
        except Exception as exc:
            self.error = f"{type(exc).__name__}: {exc}".splitlines()[0]
            return
        line = {"t": time.time(), "calls": 0.0, "total_exec_ms": 0.0, "blocks": 0.0, "statements": 0}
        for r in rows.values():
            q = r.get("query") or ""
            if SAMPLER_MARK in q or "pgbench_" in q or not r.get("toplevel", True):
                continue
            if similarity(self.words, words(q)) < MATCH:
                continue
            self.matched.setdefault(str(r["queryid"]), " ".join(q.split())[:160])
            line["calls"] += float(r["calls"] or 0)
            line["total_exec_ms"] += float(r["total_exec_ms"] or 0)
            line["blocks"] += float(r["shared_blks_hit"] or 0) + float(r["shared_blks_read"] or 0)
            line["statements"] += 1
        with open(self.path, "a") as fh:
            fh.write(json.dumps(line) + "\n")
