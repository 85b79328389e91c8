"""The embedded servers let in only the account that started them.

Postgres: a generated password (``scram-sha-256`` on loopback TCP and on the socket in the state
directory), kept in a 0600 password file in a 0700 state directory; a data directory an older
version made with ``trust`` is secured in place. No process the toolkit starts carries the password
in its argv, and no run directory holds it. The Temporal dev server (no authentication of its own)
listens on loopback only.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
import threading
from pathlib import Path

import psutil
import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from harness import stack


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _refused(conninfo: str, empty_passfile: Path) -> str:
    """The one-line reason a connection without the password is refused (fails the test if it is let in)."""
    try:
        psycopg.connect(f"{conninfo} passfile={empty_passfile}", connect_timeout=5).close()
    except psycopg.OperationalError as exc:
        return str(exc)
    pytest.fail(f"connected without a password: {conninfo}")


@pytest.fixture
def short_home():
    """A state directory with a short path, so the server gets its Unix socket (sun_path is 107 bytes)."""
    home = Path(tempfile.mkdtemp(prefix="tb-auth-"))
    yield home
    stack.Postgres(home).stop()
    shutil.rmtree(home, ignore_errors=True)


def test_the_password_file_and_the_state_directory_are_private(pg_dsn, tmp_path):
    pg = stack.postgres()
    if pg_dsn != pg.dsn():
        pg = stack.Postgres(tmp_path / "home")  # TIMERBENCH_DSN given: check a private embedded server
        pg.start(stack.free_port())
    try:
        assert _mode(pg.home) == 0o700
        assert _mode(pg.passfile) == 0o600 and pg.passfile.stat().st_uid == os.geteuid()
        password = pg.password()
        assert password and len(password) >= 24
        # the DSN every command uses names the file, never the password
        assert password not in pg.dsn() and conninfo_to_dict(pg.dsn())["passfile"] == str(pg.passfile)
        if pg.socket_usable():
            assert _mode(pg.socket_dir) == 0o700
        empty = tmp_path / "empty-pgpass"
        empty.write_text("")
        empty.chmod(0o600)
        why = _refused(f"host=127.0.0.1 port={pg.port()} user=postgres dbname=postgres", empty)
        assert "no password supplied" in why
        with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
            psycopg.connect(f"host=127.0.0.1 port={pg.port()} user=postgres dbname=postgres password=guess").close()
        with psycopg.connect(pg.dsn()) as conn:
            assert conn.execute("SELECT current_user").fetchone()[0] == "postgres"
            hba = conn.execute("SELECT DISTINCT auth_method FROM pg_hba_file_rules").fetchall()
            listen = conn.execute("SHOW listen_addresses").fetchone()[0]
        assert hba == [("scram-sha-256",)] and listen == "127.0.0.1"
    finally:
        if pg.home != stack.state_dir():
            pg.stop()


def test_an_old_trust_data_directory_is_secured_in_place_and_refuses_passwordless_logins(short_home, tmp_path):
    pg = stack.Postgres(short_home)
    port = stack.free_port()
    # what an older timerbench made: initdb --auth=trust, no password file
    pg._secure_home(stack._run_as_user())
    res = pg._cmd([str(stack.pg_bin_dir() / "initdb"), "-D", str(pg.data), "-U", "postgres", "--auth=trust"])
    assert res.returncode == 0, res.stderr
    with open(pg.data / "postgresql.conf", "a") as f:
        f.write("\ninclude_if_exists = 'timerbench.conf'\n")
    pg._write_conf(port)
    started = pg._cmd([str(stack.pg_bin_dir() / "pg_ctl"), "-D", str(pg.data), "-l", str(pg.log), "-w", "start"])
    assert started.returncode == 0, started.stderr
    try:
        with psycopg.connect(f"host=127.0.0.1 port={port} user=postgres dbname=postgres", autocommit=True) as conn:
            conn.execute("CREATE TABLE kept (x int)")  # open to anyone, as before
        assert not pg.passfile.exists()
        dsn, note = pg.start(port)  # stops it, sets a password, scram-sha-256 everywhere
        assert note is not None and note.count("\n") == 0
        assert "trust" in note and "upgraded in place" in note and str(pg.passfile) in note
        assert pg.password() not in note
        assert _mode(pg.passfile) == 0o600 and _mode(pg.home) == 0o700
        with psycopg.connect(stack.Postgres(short_home).dsn(database="postgres")) as conn:
            assert conn.execute("SELECT count(*) FROM kept").fetchone()[0] == 0  # its data kept
        empty = tmp_path / "empty-pgpass"
        empty.write_text("")
        empty.chmod(0o600)
        assert pg.socket_usable(port)
        assert "no password supplied" in _refused(f"host=127.0.0.1 port={port} user=postgres dbname=postgres", empty)
        why = _refused(f"host={pg.socket_dir} port={port} user=postgres dbname=postgres", empty)
        assert "no password supplied" in why and str(pg.socket_dir) in why  # over the socket, not TCP
        with psycopg.connect(
            f"host={pg.socket_dir} port={port} user=postgres dbname=timerbench passfile={pg.passfile}"
        ):
            pass
        assert not list(Path("/tmp").glob(f".s.PGSQL.{port}*"))  # no socket in the shared /tmp
        # a second start finds nothing to upgrade
        pg.stop()
        assert pg.start(port)[1] is None
    finally:
        pg.stop()


def test_the_temporal_dev_server_listens_on_loopback_only(tmp_path):
    t = stack.TemporalDev(tmp_path)
    try:
        t.start(stack.free_port())
        assert t.metrics_url().startswith("http://127.0.0.1:")
        proc = psutil.Process(t.pid())
        bound = [
            c.laddr
            for p in [proc, *proc.children(recursive=True)]
            for c in p.net_connections(kind="inet")
            if c.status == psutil.CONN_LISTEN or not c.raddr
        ]
        metrics_port = int(t.metrics_url().rsplit(":", 1)[1].split("/")[0])
        assert {a.port for a in bound} >= {t.port(), metrics_port}
        assert all(a.ip in ("127.0.0.1", "::1") for a in bound), bound
    finally:
        t.stop()


class ArgvWatch:
    """Every command line on the machine, read from /proc/*/cmdline until stopped."""

    def __init__(self) -> None:
        self.seen: dict[int, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            for p in Path("/proc").glob("[0-9]*/cmdline"):
                try:
                    args = p.read_bytes()
                except OSError:
                    continue
                if args:
                    self.seen[int(p.parent.name)] = args.replace(b"\0", b" ").decode(errors="replace")
            self._stop.wait(0.05)

    def stop(self) -> dict[int, str]:
        self._stop.set()
        self._thread.join()
        return self.seen


def test_no_argv_run_directory_or_report_holds_the_password(bench, pg_dsn, tmp_path):
    pg = stack.postgres()
    assert pg_dsn == pg.dsn(), "this test is about the embedded server's password"
    password = pg.password()
    watch = ArgvWatch()
    try:
        # a sweep (pgbench ceiling first), its child run with two serve nodes and locust arming
        res = bench(
            "sweep",
            "--scheduler",
            "pg_leased",
            "--rates",
            "20",
            "--duration",
            "3s",
            "--warmup",
            "1s",
            "--pgbench-duration",
            "1s",
            "--out",
            str(tmp_path),
            "--nodes",
            "2",
            "--arm-load",
            "20/s",
            timeout=300,
        )
    finally:
        seen = watch.stop()
    assert res.returncode == 0, (res.stdout[-3000:], res.stderr[-3000:])
    assert password not in res.stdout + res.stderr
    leaked = [args for args in seen.values() if password in args]
    assert leaked == []
    # the watch did see the processes that connect: pgbench, the serve nodes, locust
    assert any("/pgbench " in a and " -f " in a for a in seen.values())
    assert sum(" serve " in a and "--worker-id" in a for a in seen.values()) >= 2
    assert any("locust" in a for a in seen.values())
    (sweep_dir,) = [p for p in tmp_path.iterdir() if p.name.startswith("sweep-")]
    data = json.loads((sweep_dir / "sweep.json").read_text())
    assert data["pgbench"]["rows_per_s"], data["pgbench"]  # pgbench got in (the password file in its environment)
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.name == "report.html" for p in files) and any(p.name == "config.json" for p in files)
    for p in [*files, pg.log]:  # and the server's own log
        assert password.encode() not in p.read_bytes(), p


def test_env_dsn_prints_the_password_to_stdout_only_and_status_never(bench, pg_dsn):
    pg = stack.postgres()
    assert pg_dsn == pg.dsn(), "this test is about the embedded server's password"
    password = pg.password()
    res = bench("env", "dsn")
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == pg.full_dsn() and password in res.stdout
    assert password not in res.stderr and "stdout only" in res.stderr
    with psycopg.connect(res.stdout.strip()) as conn:  # the full DSN works without the password file
        assert conn.execute("SELECT 1").fetchone() == (1,)
    status = bench("env", "status")
    assert status.returncode == 0, status.stderr
    assert password not in status.stdout + status.stderr
    assert f"passfile={pg.passfile}" in status.stdout
