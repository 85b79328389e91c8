"""Shared fixtures: the real stack, started once per test session, and a schema per test.

Set ``TIMERBENCH_DSN`` / ``TIMERBENCH_TEMPORAL`` to test against existing servers; otherwise
the embedded Postgres and Temporal dev server are started (and left running for the next
session; ``bench env down`` stops them).
"""

from __future__ import annotations

import os
import re
import uuid

import psycopg
import pytest
from psycopg import sql

from harness import stack as stack_mod
from schedulers.base import StoreContext


@pytest.fixture(scope="session")
def pg_dsn() -> str:
    dsn = os.environ.get("TIMERBENCH_DSN")
    if dsn:
        stack_mod.check_dsn(dsn)
        return dsn
    dsn, _ = stack_mod.postgres().start()
    return dsn


@pytest.fixture(scope="session")
def temporal_address() -> str:
    address = os.environ.get("TIMERBENCH_TEMPORAL")
    if address:
        return address
    address, _ = stack_mod.temporal().start()
    return address


def _schema_name(request: pytest.FixtureRequest) -> str:
    base = re.sub(r"[^a-z0-9]+", "_", request.node.name.lower())[:30].strip("_")
    return f"t_{base}_{uuid.uuid4().hex[:8]}"


@pytest.fixture
def schema(request: pytest.FixtureRequest) -> str:
    """A fresh schema name for this test; dropped afterwards if anything created it."""
    name = _schema_name(request)
    yield name
    dsn = os.environ.get("TIMERBENCH_DSN") or (stack_mod.postgres().dsn() if stack_mod.postgres().running() else None)
    if dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


@pytest.fixture
def make_ctx(request: pytest.FixtureRequest, schema: str):
    """Builds a StoreContext for a scheduler class, starting only the servers it needs."""

    def build(cls, state_bytes: int = 256) -> StoreContext:
        dsn = request.getfixturevalue("pg_dsn") if getattr(cls, "needs_postgres", False) else None
        address = request.getfixturevalue("temporal_address") if getattr(cls, "needs_temporal", False) else None
        return StoreContext(dsn=dsn, schema=schema, temporal_address=address, state_bytes=state_bytes)

    return build
