"""Shared fixtures: the real stack, started once per test session, and a schema per test.

Set ``TIMERBENCH_DSN`` / ``TIMERBENCH_TEMPORAL`` to test against existing servers; otherwise
the embedded Postgres and Temporal dev server are started on first use. At the end of the
session the embedded servers it started are stopped (whether a fixture or a ``bench`` subprocess
started them); the ones already running when it began stay up, so a stack brought up by
``bench env up`` or ``make run`` survives ``make test``. Sessions running at once in one checkout
share the servers: each signs in under ``<state dir>/test-sessions/``, and only the last one out
stops them (the first one in noted which were running before).
"""

from __future__ import annotations

import json
import os
import re
import uuid
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from harness import stack as stack_mod
from schedulers.base import REGISTRY, StoreContext

_RUNNING_AT_START: dict[str, bool] = {}


def _embedded() -> dict[str, object]:
    return {"postgres": stack_mod.postgres(), "temporal": stack_mod.temporal()}


def _sessions() -> Path:
    """Where the test sessions using this checkout's servers sign in (one file per pid)."""
    return stack_mod.state_dir() / stack_mod.TEST_SESSIONS


def _others() -> list[int]:
    own = os.getpid()
    if not _sessions().is_dir():
        return []
    pids = [int(p.name) for p in _sessions().iterdir() if p.name.isdigit()]
    return [pid for pid in pids if pid != own and stack_mod.pid_alive(pid)]


def pytest_sessionstart(session: pytest.Session) -> None:
    # A session that stopped "its" servers while another one in the same checkout was still
    # using them failed every test of the other from then on (seen running two suites at once).
    for name, server in _embedded().items():
        _RUNNING_AT_START[name] = server.running()
    _sessions().mkdir(parents=True, exist_ok=True)
    before = _sessions() / stack_mod.RUNNING_BEFORE
    if not _others():  # the first one in: what was up before any test session
        before.write_text(json.dumps(_RUNNING_AT_START))
    (_sessions() / str(os.getpid())).touch()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    (_sessions() / str(os.getpid())).unlink(missing_ok=True)
    if _others():
        return  # the last session out stops the servers
    before = _sessions() / stack_mod.RUNNING_BEFORE
    try:
        running_before = json.loads(before.read_text())
    except (OSError, ValueError):
        running_before = _RUNNING_AT_START
    before.unlink(missing_ok=True)
    # Temporal first: its workers may still hold Postgres connections (stack.down's order).
    for name, server in reversed(list(_embedded().items())):
        if not running_before.get(name, True):
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


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Groups for ``--dist loadgroup`` (the Makefile's): a test file is one group, as under
    ``loadfile``, except that a test parametrized over schedulers (the conformance suite) is one
    group per scheduler, so the designs' suites run on different workers at once."""
    for item in items:
        if any(True for _ in item.iter_markers("xdist_group")):
            continue
        group = item.nodeid.split("::", 1)[0]
        params = getattr(getattr(item, "callspec", None), "params", {})
        if isinstance(params.get("name"), str) and params["name"] in REGISTRY:
            group = f"{group}[{params['name']}]"
        item.add_marker(pytest.mark.xdist_group(group))


@pytest.fixture
def schema(request: pytest.FixtureRequest) -> str:
    """A fresh schema name for this test; dropped afterwards if anything created it."""
    name = _schema_name(request)
    yield name
    dsn = os.environ.get("TIMERBENCH_DSN") or (stack_mod.postgres().dsn() if stack_mod.postgres().running() else None)
    if not dsn:
        return
    try:
        conn = psycopg.connect(dsn, autocommit=True)
    except psycopg.OperationalError:
        # Another test worker is starting the server (up, its database not made yet) or
        # restarting it: this test cannot have written to a database it could not reach.
        return
    with conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


@pytest.fixture
def make_ctx(request: pytest.FixtureRequest, schema: str):
    """Builds a StoreContext for a scheduler class, starting only the servers it needs."""

    def build(cls, state_bytes: int = 256) -> StoreContext:
        dsn = request.getfixturevalue("pg_dsn") if getattr(cls, "needs_postgres", False) else None
        address = request.getfixturevalue("temporal_address") if getattr(cls, "needs_temporal", False) else None
        return StoreContext(dsn=dsn, schema=schema, temporal_address=address, state_bytes=state_bytes)

    return build
