"""Shared fixtures: the real stack, started once per test session, and a schema per test.

Set ``TIMERBENCH_DSN`` / ``TIMERBENCH_TEMPORAL`` to test against existing servers; otherwise
the embedded Postgres and Temporal dev server are started on first use. At the end of the
session the embedded servers it started are stopped (whether a fixture or a ``bench`` subprocess
started them); the ones already running when it began stay up, so a stack brought up by
``bench env up`` or ``make run`` survives ``make test``.
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


_RUNNING_AT_START: dict[str, bool] = {}


def _embedded() -> dict[str, object]:
    return {"postgres": stack_mod.postgres(), "temporal": stack_mod.temporal()}


def pytest_sessionstart(session: pytest.Session) -> None:
    for name, server in _embedded().items():
        _RUNNING_AT_START[name] = server.running()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # Temporal first: its workers may still hold Postgres connections (stack.down's order).
    for name, server in reversed(list(_embedded().items())):
        if not _RUNNING_AT_START.get(name, True):
            server.stop()  # a no-op when nothing runs; also ends a server that never got ready


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
