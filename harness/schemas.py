"""The schemas runs leave on a server: a live run's lease, the leftovers of killed ones, and gc.

A run sets its scheduler up in a fresh schema ``run_<YYYYmmdd>_<HHMMSS>_<hex>`` (a migration
rehearsal uses that name plus ``_p`` and ``_s``, a run's ``--neighbour`` plus ``_n``) and drops it
at the end. A run killed with SIGKILL (or a machine that went down) cannot: its schema stays, with
every table, dead tuple and index it had, on the server the next run measures, where autovacuum may still be working
through it. ``bench env status`` lists them, ``bench env gc`` drops them, and a run refuses to
start while they hold more than :data:`LEFTOVER_LIMIT_BYTES` (unless ``--allow-leftovers``).

**How a live run is told from a leftover: a session advisory lock.** Before it creates its
schema, a run opens one connection of its own and takes ``pg_advisory_lock(LOCK_CLASS,
key(schema))`` (:class:`SchemaLease`), holding it until its schema is dropped. Postgres releases
a session lock when the session ends, whichever way it ends: a killed process's socket closes,
its backend exits, the lock goes. So "held" means a run is alive right now, with no pid file,
heartbeat or clock to trust, and it works across machines (a run on another host, on the same
server, holds its lock the same way). ``application_name`` was the other candidate; it would
have to be set on every connection the schedulers open (their pools, Temporal's activities), and
a name says who connected, not whether the run still owns the schema. gc does not trust a
snapshot of ``pg_locks`` either: it drops a schema only inside a transaction in which it took
that same lock itself (``pg_try_advisory_xact_lock``), so a live run's schema is never dropped.
Keys are CRC-32s of the schema name (a collision only keeps a leftover, never drops a live one).

A schema kept on purpose (``bench run --keep``) carries the comment ``timerbench: kept``: it is
listed apart and gc leaves it unless given ``--include-kept``.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg import sql

from schedulers.sqlfile import load_blocks

SQL = load_blocks(Path(__file__).with_name("schemas.sql"))

RUN_SCHEMA = r"^run_[0-9]{8}_[0-9]{6}_[0-9a-f]{6}(_[psn])?$"  # what runs and rehearsals name their schemas
_RUN_SCHEMA = re.compile(RUN_SCHEMA)
LOCK_CLASS = 0x74696D72  # "timr": the advisory-lock class of run leases (the first of the two int4 keys)
# A run refuses to start while leftovers hold more than this: the embedded server's shared_buffers
# (harness/stack.py), so a leftover's pages and its pending autovacuum can compete with the run's own
# for the cache and the disk. One killed production-rate pg_queue run leaves ~0.5 GiB.
LEFTOVER_LIMIT_BYTES = 1 << 30
KEPT_COMMENT = "timerbench: kept"


def is_run_schema(name: str) -> bool:
    return bool(_RUN_SCHEMA.match(name))


def run_of(schema: str) -> str:
    """The run a schema belongs to (a rehearsal's ``_p`` / ``_s`` and a neighbour's ``_n`` belong to
    its base name)."""
    return schema[:-2] if schema.endswith(("_p", "_s", "_n")) else schema


def lease_key(schema: str) -> int:
    """The second advisory-lock key of a run's lease, as ``pg_locks.objid`` shows it (unsigned)."""
    return zlib.crc32(run_of(schema).encode())


def _int4(key: int) -> int:
    return key - (1 << 32) if key >= 1 << 31 else key


class SchemaLease:
    """A live run's claim on its schema: one connection holding the run's advisory lock.

    Taken before the schema exists and released after it is dropped (or kept); a process that
    dies releases it with its connection."""

    def __init__(self, conn: psycopg.AsyncConnection | None) -> None:
        self._conn = conn

    @classmethod
    async def take(cls, dsn: str, schema: str) -> SchemaLease:
        conn = await psycopg.AsyncConnection.connect(
            dsn, autocommit=True, connect_timeout=10, application_name=f"timerbench-lease {schema}"
        )
        await conn.execute(SQL["take_lease"], {"lock_class": LOCK_CLASS, "key": _int4(lease_key(schema))})
        return cls(conn)

    async def release(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            await conn.close()  # the session ends: the lock goes with it


async def mark_kept(dsn: str, schema: str) -> None:
    """Mark a run's schema (a rehearsal's two) as kept on purpose."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True, connect_timeout=10) as conn:
        for name in (schema, f"{schema}_p", f"{schema}_s", f"{schema}_n"):
            if await (await conn.execute(SQL["schema_exists"], {"name": name})).fetchone():
                await conn.execute(sql.SQL(SQL["mark_kept"]).format(schema=sql.Identifier(name)))


@dataclass
class RunSchema:
    name: str
    bytes: int
    live: bool  # a live run holds its lease
    kept: bool  # kept on purpose (--keep)

    @property
    def leftover(self) -> bool:
        return not self.live and not self.kept


def run_schemas(dsn: str) -> list[RunSchema]:
    """Every run schema on the server (the DSN's database), with its size and whether it is live."""
    with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
        rows = conn.execute(SQL["run_schemas"], {"pattern": RUN_SCHEMA}).fetchall()
        held = {int(k) for (k,) in conn.execute(SQL["held_leases"], {"lock_class": LOCK_CLASS}).fetchall()}
    return [
        RunSchema(name, int(size), lease_key(name) in held, (comment or "").startswith(KEPT_COMMENT))
        for name, size, comment in rows
    ]


def leftovers(dsn: str) -> list[RunSchema]:
    return [s for s in run_schemas(dsn) if s.leftover]


def drop(dsn: str, schemas: list[str]) -> tuple[list[str], list[str]]:
    """Drop each schema that no live run holds; returns (dropped, skipped because live). Each
    drop runs in its own transaction holding the run's lease, so a run cannot be live meanwhile."""
    dropped, live = [], []
    with psycopg.connect(dsn, connect_timeout=10) as conn:
        for name in schemas:
            if not is_run_schema(name):
                raise ValueError(f"{name!r} is not a run schema; gc drops only {RUN_SCHEMA}")
            with conn.transaction():
                free = conn.execute(
                    SQL["try_lease_for_drop"], {"lock_class": LOCK_CLASS, "key": _int4(lease_key(name))}
                ).fetchone()[0]
                if not free:
                    live.append(name)
                    continue
                conn.execute(sql.SQL(SQL["drop_schema"]).format(schema=sql.Identifier(name)))
                dropped.append(name)
    return dropped, live


def check_leftovers(dsn: str, allow: bool, say) -> None:
    """Refuse to start a run on a server whose leftover run schemas exceed
    :data:`LEFTOVER_LIMIT_BYTES` (a one-line usage error), unless ``allow``; below it, a note."""
    from harness.errors import UsageError
    from reports.fmt import human_bytes

    found = leftovers(dsn)
    if not found:
        return
    total = sum(s.bytes for s in found)
    what = f"{len(found)} schema(s) left by interrupted runs hold {human_bytes(total)} on this server"
    if total > LEFTOVER_LIMIT_BYTES and not allow:
        raise UsageError(
            f"{what} (more than {human_bytes(LEFTOVER_LIMIT_BYTES)}, which would weigh on this "
            f"run's measurements); drop them with `bench env gc`, or pass --allow-leftovers"
        )
    say(f"{what}; `bench env gc` drops them")
