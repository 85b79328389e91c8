"""Fixtures of the end-to-end tests.

``private_stack``: restarting a server disturbs every test that shares it, so the tests that
restart one (``--fault restart-postgres`` / ``restart-temporal``) run on their **own** Postgres
and Temporal dev server under a temporary home (``harness.stack.Postgres(home)`` /
``TemporalDev(home)``), started once per session, never the shared one. The CLI is pointed at
them with ``TIMERBENCH_HOME`` (so the harness knows them as its embedded servers, the only ones
it will restart), ``TIMERBENCH_DSN`` and ``TIMERBENCH_TEMPORAL``. The private Postgres runs
autovacuum every second (``autovacuum_naptime = 1s``, default 1 min) so that a short test can see
vacuum catch up after a held snapshot is released.
"""

from __future__ import annotations

import os

import pytest

from harness import stack


@pytest.fixture(scope="session")
def private_stack(tmp_path_factory):
    home = tmp_path_factory.mktemp("fault-stack")
    pg = stack.Postgres(home)
    pg.init()
    with open(pg.data / "postgresql.conf", "a") as f:
        f.write("autovacuum_naptime = 1s\n")  # see the module docstring
    dsn, _ = pg.start()  # a free port: the shared server holds the default one
    temporal = stack.TemporalDev(home)
    address, _ = temporal.start()
    env = {**os.environ, "TIMERBENCH_HOME": str(home), "TIMERBENCH_DSN": dsn, "TIMERBENCH_TEMPORAL": address}
    try:
        yield env
    finally:
        temporal.stop()  # the pid file names the server a restart-temporal fault started
        pg.stop()
