"""The embedded Postgres' credentials as files and strings: pure logic, no server."""

from __future__ import annotations

import base64
import hashlib
import hmac
import stat

from psycopg.conninfo import conninfo_to_dict

from harness import stack
from loadgen.pgbench import _conn_args


def test_the_scram_verifier_is_the_one_a_client_proves_against():
    v = stack.scram_verifier("correct horse")
    algo, rest = v.split("$", 1)
    iter_salt, keys = rest.split("$")
    iterations, salt = iter_salt.split(":")
    stored, server = (base64.b64decode(k) for k in keys.split(":"))
    assert algo == "SCRAM-SHA-256" and iterations == "4096"
    salted = hashlib.pbkdf2_hmac("sha256", b"correct horse", base64.b64decode(salt), 4096)
    assert stored == hashlib.sha256(hmac.new(salted, b"Client Key", hashlib.sha256).digest()).digest()
    assert server == hmac.new(salted, b"Server Key", hashlib.sha256).digest()
    assert "correct horse" not in v and stack.scram_verifier("correct horse") != v  # a fresh salt each time


def test_a_trust_rule_anywhere_means_the_data_directory_needs_securing(tmp_path):
    hba = tmp_path / "pg_hba.conf"
    hba.write_text(stack.HBA)
    assert not stack._hba_trusts(hba)
    hba.write_text(stack.HBA + "host all all 127.0.0.1/32 trust  # initdb --auth=trust\n")
    assert stack._hba_trusts(hba)
    hba.write_text("# local all all trust\nlocal all all peer\n")
    assert stack._hba_trusts(hba)
    assert not stack._hba_trusts(tmp_path / "missing")


def test_the_embedded_dsn_names_the_password_file_and_env_dsn_holds_the_password(tmp_path):
    pg = stack.Postgres(tmp_path / "a home: with a colon")
    pg.home.mkdir()
    pg._write_passfile("s3cret-pw", 5999)
    assert stat.S_IMODE(pg.passfile.stat().st_mode) == 0o600
    info = conninfo_to_dict(pg.dsn(5999))
    assert info["passfile"] == str(pg.passfile) and "password" not in info
    assert info["host"] == "127.0.0.1" and info["port"] == "5999" and info["user"] == "postgres"
    assert "s3cret-pw" not in pg.dsn()
    assert pg.password() == "s3cret-pw"
    lines = pg.passfile.read_text().splitlines()
    assert "127.0.0.1:5999:*:postgres:s3cret-pw" in lines
    assert any(line.startswith(str(pg.socket_dir).replace(":", "\\:") + ":5999:") for line in lines)
    (tmp_path / "a home: with a colon" / "postgres.port").write_text("5999")
    assert conninfo_to_dict(pg.full_dsn())["password"] == "s3cret-pw"
    assert stack.redact_dsn(pg.full_dsn()) == "postgresql://postgres@127.0.0.1:5999/timerbench"


def test_pgbench_gets_the_password_file_in_its_environment_not_its_argv(tmp_path):
    pg = stack.Postgres(tmp_path)
    args, env = _conn_args(pg.dsn(5999))
    assert env == {"PGPASSFILE": str(pg.passfile)}
    assert args == ["-h", "127.0.0.1", "-p", "5999", "-U", "postgres", "timerbench"]
    args, env = _conn_args("host=h port=1 dbname=d user=u password=pw")
    assert env == {"PGPASSWORD": "pw"} and "pw" not in args
