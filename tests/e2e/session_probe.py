"""Run by test_stack.py as its own pytest session (not collected by ``make test``: the name does
not start with ``test_``): it uses both embedded servers, the way any test session does. With
``TIMERBENCH_PROBE_HOLD=<path>`` it then waits (up to 2 minutes) until that file exists, a
session still under way while another one comes and goes."""


def test_uses_both_embedded_servers(pg_dsn, temporal_address):
    import os
    import time
    from pathlib import Path

    import psycopg

    with psycopg.connect(pg_dsn) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
    assert temporal_address.startswith("127.0.0.1:")
    hold = os.environ.get("TIMERBENCH_PROBE_HOLD")
    deadline = time.time() + 120
    while hold and not Path(hold).exists() and time.time() < deadline:
        time.sleep(0.1)
    with psycopg.connect(pg_dsn) as conn:  # the servers are still there for this session
        assert conn.execute("SELECT 1").fetchone() == (1,)
