"""The unit tests are the fast tier (``make test-fast``): pure logic, no servers. A test that
needs Postgres or Temporal belongs in a folder of tests that start them, so the server fixtures
fail here instead of starting one."""

from __future__ import annotations

import pytest

NO_SERVER = "a unit test starts no server (make test-fast): move this test beside the tests that use {}"


@pytest.fixture(scope="session")
def pg_dsn() -> str:
    pytest.fail(NO_SERVER.format("Postgres"))


@pytest.fixture(scope="session")
def temporal_address() -> str:
    pytest.fail(NO_SERVER.format("Temporal"))
