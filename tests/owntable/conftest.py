"""Fixtures of the owntable tests: a database of the test's own for a job library's tables."""

from __future__ import annotations

import pytest

from tests.owntable.libraries import create_database, drop_database


@pytest.fixture
def library_db(pg_dsn):
    dsn = create_database(pg_dsn, "tb_lib")
    yield dsn
    drop_database(pg_dsn, dsn)
