"""pg_partitioned: the Composio article's rejected alternative (docs/sources.md, shared-horizon),
pg_leased's design over a table split into N partitions of one database.

The article, "Why we batched timers instead of sharding Postgres": "Smaller tables would scan
faster, but splitting them within one database would still leave them sharing a vacuum horizon."
This backend lets a team measure both halves of that sentence on its own workload: the claim
scans one small partition at a time, and a single old snapshot anywhere in the database still
keeps every partition's dead versions (tests/pg_partitioned, MEASUREMENTS.md).

Everything is pg_leased's (claims, leases, heartbeats, sweeper, commit, HOT knobs, options), by
subclassing; only three things change:

* **Layout** (``schema.sql``): ``schedule`` and ``state`` are hash-partitioned on the trigger id
  into ``partitions`` partitions (``schedule_p0`` ... ``state_p{N-1}``), each with its own copy of
  pg_leased's partial indexes and pg_leased's per-table storage parameters and autovacuum
  settings. ``effects`` is insert-only and stays one table. Because the split is declarative,
  every statement except the claim runs unchanged against the parents.
* **Claims, round-robin**: each claim runs pg_leased's ``claim_due`` against one partition; the
  claim loops of a run take the partitions in turn, one claim each, at pg_leased's pace (a loop
  naps a tick after a claim that left nothing more due, and claims are held back by the same
  in-flight batch slots). So the claim rate is pg_leased's and each claim reads one partition;
  rows wait longer for their partition's turn. Round-robin rather than all partitions in
  parallel, because only a claim of one small table scans less: N parallel claims of batch/N
  rows each walk every partition's due range, and under a held snapshot every partition's dead
  index entries, on every batch, which adds up to what one table costs, plus N times the
  per-tenant probes of the fairness branch. The price: lag (``max_lag_s`` is N ticks + 1 s
  instead of one tick + 1 s) and per-tenant fairness only within a partition (below).
* **Fairness is not declared.** Within a claim pg_leased's per-tenant ranking holds, but a claim
  sees one partition: a small tenant whose rows hash elsewhere waits for the claims to reach their
  partition, up to N claims. So the first batch behind a huge tenant does not hold every small
  tenant, which is what the conformance suite asks; tests/pg_partitioned checks what does hold,
  that they are all in the first round of N claims.

Options: pg_leased's, plus ``partitions`` (see ``default_options``). A schema already split
another number of ways is refused at setup (its rows would sit in partitions no claim visits).
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from schedulers.base import Range, StoreContext
from schedulers.pg import qualified
from schedulers.pg_leased import QUERIES_SQL as PG_LEASED_QUERIES_SQL
from schedulers.pg_leased import PgLeasedScheduler
from schedulers.sqlfile import Queries, load_blocks

HERE = Path(__file__).parent
SCHEMA_SQL = HERE / "schema.sql"
QUERIES_SQL = HERE / "queries.sql"

SPLIT_TABLES = ("schedule", "state")  # the tables that churn; effects is insert-only
_TABLE_PLACEHOLDER = re.compile(r"\{(schedule|state)\}")


def partition_name(table: str, remainder: int) -> str:
    return f"{table}_p{remainder}"


class PgPartitionedScheduler(PgLeasedScheduler):
    name = "pg_partitioned"
    description = (
        "pg_leased over N hash partitions of one database, claimed round-robin (the Composio article's rejected split)"
    )
    default_options: dict[str, Any] = {
        **PgLeasedScheduler.default_options,
        # Hash partitions of schedule and state. 8: at the production population (~48,000
        # triggers, 556 fires/s) a partition holds ~6,000 rows, about one of the Composio
        # article's timer shards (shard-cap-5000). The claims reach each partition 1/N as often as pg_leased
        # reaches its table, so lag grows with it (MEASUREMENTS.md).
        "partitions": 8,
        # every claim loop claims, full claims or not: a claim reaches one partition, so one loop
        # alone would visit each partition a third as often and triple the lag bound above
        "idle_claimers": PgLeasedScheduler.default_options["claimers"],
    }
    option_ranges: dict[str, Range] = {**PgLeasedScheduler.option_ranges, "partitions": Range(lo=1)}

    def __init__(self, ctx: StoreContext, **options: Any) -> None:
        super().__init__(ctx, **options)
        self.partitions = self.options["partitions"]
        # A due row waits for the claims to come round to its partition, up to N claims, where
        # pg_leased's next claim serves it. In normal operation a claim comes at least once a
        # tick: idle, `claimers` a tick; busy, as fast as batches free their slots (~16 a second
        # at 556 fires/s, MEASUREMENTS.md). So N ticks instead of one, plus pg_leased's second of
        # headroom. Fairness holds per claim, i.e. per partition (module docstring).
        self.capabilities = replace(
            self.capabilities,
            max_lag_s=self.partitions * self.tick_s + 1.0,
            per_tenant_fairness=False,
        )
        self.partition_claims = [
            Queries(PG_LEASED_QUERIES_SQL, ctx.schema, schedule=partition_name("schedule", k))["claim_due"]
            for k in range(self.partitions)
        ]
        self.q_layout = Queries(QUERIES_SQL, ctx.schema)

    def relations(self) -> list[str]:
        split = [qualified(self.ctx.schema, partition_name(t, k)) for t in SPLIT_TABLES for k in range(self.partitions)]
        return split + [qualified(self.ctx.schema, "effects")]

    def _claim_statements(self) -> list[sql.Composed]:
        return self.partition_claims

    async def setup(self) -> None:
        """pg_leased's schema.sql into pg_temp (the template), this folder's schema.sql (parents
        LIKE the template, then each partition), and pg_leased's per-table storage blocks (those
        naming {schedule} or {state}) and storage knobs on every partition. One transaction,
        idempotent."""
        schema = self.ctx.schema
        leased = self._schema_blocks()
        per_table = [body for body in leased.values() if _TABLE_PLACEHOLDER.search(body)]
        own = load_blocks(SCHEMA_SQL)
        once = [body for name, body in own.items() if not name.endswith("_partition")]
        each = [body for name, body in own.items() if name.endswith("_partition")]
        pool = await self._pool_()
        async with pool.connection() as conn:
            async with conn.transaction():
                await conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
                await self._check_layout(conn)
                for body in leased.values():
                    await conn.execute(self._render(body, "pg_temp", schedule="schedule", state="state"))
                for body in once:
                    await conn.execute(self._render(body, schema))
                for k in range(self.partitions):
                    for body in each:
                        await conn.execute(self._render_partition(body, k))
                    tables = {t: partition_name(t, k) for t in SPLIT_TABLES}
                    for body in per_table:
                        await conn.execute(self._render(body, schema, **tables))
                    await self._apply_storage(conn, schema, **tables)  # fillfactor, autovacuum per partition

    def _render_partition(self, body: str, remainder: int) -> sql.Composed:
        schema = self.ctx.schema
        return sql.SQL(body).format(
            schema=sql.Identifier(schema),
            partitions=sql.Literal(self.partitions),
            remainder=sql.Literal(remainder),
            **{t: sql.Identifier(schema, partition_name(t, remainder)) for t in SPLIT_TABLES},
        )

    async def _check_layout(self, conn: psycopg.AsyncConnection) -> None:
        rows = await (await conn.execute(self.q_layout["existing_layout"], {"schema": self.ctx.schema})).fetchall()
        want = {
            (t, partition_name(t, k)): f"FOR VALUES WITH (modulus {self.partitions}, remainder {k})"
            for t in SPLIT_TABLES
            for k in range(self.partitions)
        }
        found = {(parent, part): bound for parent, kind, part, bound in rows if part is not None}
        plain = sorted(parent for parent, kind, _, _ in rows if kind != "p")
        if plain:
            raise ValueError(
                f"{self.name}: schema {self.ctx.schema!r} already has an unpartitioned {plain[0]!r} table "
                f"(another scheduler's); use a fresh schema"
            )
        if found and found != want:
            moduli = sorted({m for b in found.values() for m in re.findall(r"modulus (\d+)", b or "")})
            raise ValueError(
                f"{self.name}: schema {self.ctx.schema!r} is split {'/'.join(moduli) or 'differently'} ways, "
                f"not partitions={self.partitions}; use a fresh schema or partitions={moduli[0] if moduli else '?'}"
            )
