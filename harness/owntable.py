"""What ``bench inspect`` and ``bench capture`` share: the server (the user's ``--dsn``, or the
embedded one), a guarded read-only connection (:mod:`metrics.owntable`), the table the user named,
and the one-line errors when any of that is wrong."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from harness.errors import BenchError, UsageError
from metrics import owntable

# Categories of pg_type.typcategory a due column may have: date/time, or numbers of epoch seconds.
DUE_CATEGORIES = {"D": "a timestamp", "N": "epoch seconds"}


@dataclass
class OpenTable:
    reader: owntable.Reader
    ref: owntable.TableRef
    session: dict[str, Any]  # the guarded session's settings as read back (owntable.connect)
    dsn: str

    def close(self) -> None:
        self.reader.conn.close()


def resolve_dsn(dsn: str | None, say: Callable[[str], None]) -> str:
    """The user's DSN (``--dsn`` or ``TIMERBENCH_DSN``), or the embedded server's, started on
    demand. A user's DSN is not probed here: the first connection to it is the guarded one."""
    import os

    from harness import stack

    dsn = dsn or os.environ.get("TIMERBENCH_DSN") or None
    if dsn:
        return dsn
    return stack.resolve(None, None, False, say=say).dsn


def guards_from(statement_timeout_s: float, lock_timeout_s: float) -> owntable.Safeguards:
    if statement_timeout_s <= 0 or lock_timeout_s <= 0:
        raise UsageError(
            f"bad timeouts (--statement-timeout {statement_timeout_s:g}s, --lock-timeout "
            f"{lock_timeout_s:g}s); both must be positive, e.g. 5s and 1s"
        )
    return owntable.Safeguards(
        statement_timeout_ms=int(round(statement_timeout_s * 1000)), lock_timeout_ms=int(round(lock_timeout_s * 1000))
    )


def open_table(
    dsn: str,
    table: str | None,
    guards: owntable.Safeguards,
    application_name: str,
    partitioned_ok: bool = False,
    partition_of: Callable[[str], None] | None = None,
) -> OpenTable:
    """A guarded connection and the table ``table`` names; one-line errors otherwise. A
    partitioned table is read through its parent when ``partitioned_ok``; with ``partition_of``
    its largest partition is opened instead (counters and bloat live there), and said."""
    import psycopg

    from harness.stack import dsn_host_port

    if not table:
        raise UsageError("give --table SCHEMA.TABLE, or --preset NAME for a job library's table")

    try:
        conn, session = owntable.connect(dsn, guards, application_name)
    except owntable.SafeguardError as exc:
        raise BenchError(str(exc)) from None
    except psycopg.Error as exc:
        host, port = dsn_host_port(dsn)
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise UsageError(f"cannot connect to Postgres at {host}:{port} ({first}); check --dsn") from None
    reader = owntable.Reader(conn, guards, server_version_num=int(session["server_version_num"]))
    ref = reader.resolve(table)
    if ref is None:
        conn.close()
        raise UsageError(
            f"table {table!r} not found in database {session['database']} (or not visible to role "
            f"{session['role']}); give --table SCHEMA.TABLE, quoting mixed-case names like "
            f'\'"Schema"."Table"\''
        )
    if ref.relkind == "p" and partition_of is not None:
        leaves = reader.partitions(ref)
        if leaves:
            partition_of(
                f"{ref.qualified} is partitioned; inspecting its largest partition {leaves[0]['name']} "
                f"(of {len(leaves)})"
            )
            ref = reader.resolve(leaves[0]["name"]) or ref
    if ref.relkind != "r" and not (ref.relkind == "p" and partitioned_ok):
        conn.close()
        kind = {
            "p": "a partitioned table (inspect one of its partitions)",
            "v": "a view",
            "m": "a materialized view",
            "f": "a foreign table",
        }.get(ref.relkind, f"of relkind {ref.relkind!r}")
        raise UsageError(f"{ref.qualified} is {kind}; give an ordinary table")
    return OpenTable(reader, ref, session, dsn)


def column(
    shape_columns: list[dict[str, Any]], name: str, option: str, categories: dict[str, str], table: str
) -> dict[str, Any]:
    """The column ``name`` of the table, checked against the type categories it may have."""
    found = next((c for c in shape_columns if c["name"] == name), None)
    if found is None:
        names = ", ".join(c["name"] for c in shape_columns)
        raise UsageError(f"{option}: {table} has no column {name!r}; its columns: {names}")
    if categories and found["category"] not in categories:
        accepted = " or ".join(categories.values())
        raise UsageError(f"{option}: column {name} of {table} is {found['type']}; it must hold {accepted}")
    return found


@contextmanager
def timeouts_as_errors(guards: owntable.Safeguards, table: str) -> Iterator[None]:
    """A statement outside :meth:`metrics.owntable.Reader.attempt` that hits a safeguard ends the
    command with one line saying which, and that nothing was changed."""
    from psycopg import errors

    try:
        yield
    except errors.LockNotAvailable:
        raise BenchError(
            f"{table}: waited lock_timeout ({guards.lock_timeout_ms} ms) for a lock another session "
            f"holds (DDL on the table?) and gave up; nothing was changed; retry later or raise "
            f"--lock-timeout"
        ) from None
    except errors.QueryCanceled:
        raise BenchError(
            f"{table}: a read took longer than statement_timeout ({guards.statement_timeout_ms} ms) and "
            f"was cancelled; nothing was changed; raise --statement-timeout if the server can "
            f"afford it"
        ) from None
