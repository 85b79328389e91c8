"""Run by test_stack.py as its own pytest session (not collected by ``make test``: the name does
not start with ``test_``): it uses both embedded servers, the way any test session does."""


def test_uses_both_embedded_servers(pg_dsn, temporal_address):
    import psycopg

    with psycopg.connect(pg_dsn) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
    assert temporal_address.startswith("127.0.0.1:")
