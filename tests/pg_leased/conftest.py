"""A database of its own for measurements that depend on the vacuum horizon.

Pruning (which makes room for HOT versions) removes only row versions older than the oldest
snapshot of any backend *in the same database*. Other suites share the ``timerbench`` database
and some hold old snapshots on purpose (the Composio article's doom loop), so a HOT ratio measured there
says more about them than about this design. A separate database isolates the horizon.
"""

from __future__ import annotations

import uuid

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo


@pytest.fixture
def isolated_dsn(pg_dsn: str):
    name = f"timerbench_pgl_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    params = conninfo_to_dict(pg_dsn)
    params["dbname"] = name
    yield make_conninfo(**params)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
