"""``bench inspect`` and ``bench capture`` end to end, on a "legacy" table with an application
running beside it (:mod:`tests.owntable.legacy_app`), the real CLI in a subprocess.

What is checked, besides the files they write:

* neither command wrote anything: the table's insert/update/delete counters in
  ``pg_stat_user_tables`` moved by exactly the application's own writes, no other table of the
  schema was written, and every statement the commands' role ran (``pg_stat_statements``,
  filtered by that role) is a read;
* neither held a lock beyond the timeout: every statement of that role finished within
  ``statement_timeout`` (one statement per transaction, so no lock outlived it), and a watcher
  sampling ``pg_locks`` saw that role hold nothing but ``AccessShareLock`` on relations, in
  transactions younger than the timeout;
* with a role lacking the privileges for ``pgstattuple`` and for other roles' ``pg_stat_activity``
  details, inspect still completes and says what it skipped;
* with another session holding an ACCESS EXCLUSIVE lock, inspect gives up after ``lock_timeout``
  with one line instead of queueing behind it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from harness import stack
from loadgen.population import from_trace
from loadgen.workload import load as load_workload
from tests.owntable.legacy_app import TABLE, LegacyApp
from tests.owntable.libraries import create_database, drop_database

BENCH = str(Path(sys.executable).parent / "bench")
STATEMENT_TIMEOUT_MS = 5000
WAIT_S = 60.0  # a wait for the app to churn (a condition, not a bound: a loaded machine is slower)
GUARDS = ["--statement-timeout", "5s", "--lock-timeout", "1s"]
PASSWORD = "pw-" + uuid.uuid4().hex[:12]  # the test roles' password, carried in their DSN, never written
READ_STATEMENTS = ("SELECT", "EXPLAIN", "SET", "SHOW", "BEGIN", "COMMIT", "ROLLBACK")


def bench(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([BENCH, *args], capture_output=True, text=True, timeout=timeout)


def first_keyword(query: str) -> str:
    lines = [ln for ln in query.splitlines() if ln.strip() and not ln.strip().startswith("--")]
    return (" ".join(lines).split() or [""])[0].upper()


def table_counters(conn: psycopg.Connection, schema: str) -> dict[str, tuple[int, int, int]]:
    rows = conn.execute(
        "SELECT relname, n_tup_ins, n_tup_upd, n_tup_del FROM pg_stat_user_tables WHERE schemaname = %s", (schema,)
    ).fetchall()
    return {r[0]: (r[1], r[2], r[3]) for r in rows}


def wait_for_counters(
    conn: psycopg.Connection, schema: str, at_least: tuple[int, int, int], timeout_s: float = 30.0
) -> dict[str, tuple[int, int, int]]:
    """The schema's counters once the table's have caught up with ``at_least`` (backends flush
    their statistics about once a second and at exit), then read again a moment later."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        got = table_counters(conn, schema).get(TABLE, (0, 0, 0))
        if all(g >= a for g, a in zip(got, at_least)):
            break
        time.sleep(0.2)
    # Nothing else may have written: absence shows only over time, a statistics flush and a half
    # after the writes we know of (backends flush about once a second and at exit).
    time.sleep(1.5)
    return table_counters(conn, schema)


class LockWatcher(threading.Thread):
    """Samples the role's sessions every 50 ms: locks held, and the age of their transactions."""

    def __init__(self, dsn: str, role: str) -> None:
        super().__init__(daemon=True)
        self.dsn, self.role = dsn, role
        self.stop = threading.Event()
        self.modes: set[tuple[str, str]] = set()
        self.max_xact_age_s = 0.0
        self.samples_with_locks = 0
        self.waiting = 0

    def run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self.stop.is_set():
                rows = conn.execute(
                    "SELECT l.locktype, l.mode, l.granted, "
                    "       extract(epoch FROM clock_timestamp() - a.xact_start)::float8 "
                    "FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
                    "WHERE a.usename = %s AND l.locktype = 'relation'",
                    (self.role,),
                ).fetchall()
                if rows:
                    self.samples_with_locks += 1
                for locktype, mode, granted, age in rows:
                    self.modes.add((locktype, mode))
                    self.waiting += 0 if granted else 1
                    self.max_xact_age_s = max(self.max_xact_age_s, age or 0.0)
                xacts = conn.execute(
                    "SELECT max(extract(epoch FROM clock_timestamp() - xact_start))::float8 "
                    "FROM pg_stat_activity WHERE usename = %s",
                    (self.role,),
                ).fetchone()[0]
                self.max_xact_age_s = max(self.max_xact_age_s, xacts or 0.0)
                time.sleep(0.05)


@pytest.fixture(scope="module")
def pg_dsn(pg_dsn):
    """A database of this module's own: every `bench run` resets pg_stat_statements for the
    timerbench database at its window's start, and a run in another test worker wiped the
    statements these tests read back (seen under three workers)."""
    dsn = create_database(pg_dsn, "tb_owntable")
    yield dsn
    drop_database(pg_dsn, dsn)


@pytest.fixture
def legacy(pg_dsn, schema):
    app = LegacyApp(pg_dsn, schema)
    app.create()
    yield app
    app.stop()


def make_role(admin: psycopg.Connection, schema: str, monitor: bool) -> str:
    role = f"tb_{'mon' if monitor else 'plain'}_{uuid.uuid4().hex[:8]}"
    # the password as its SCRAM verifier: the password itself is in no statement text
    admin.execute(
        sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
            sql.Identifier(role), sql.Literal(stack.scram_verifier(PASSWORD))
        )
    )
    if monitor:  # a monitoring role as a DBA would hand out: pg_read_all_stats + pg_stat_scan_tables
        admin.execute(sql.SQL("GRANT pg_monitor TO {}").format(sql.Identifier(role)))
    admin.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(sql.Identifier(schema), sql.Identifier(role)))
    admin.execute(sql.SQL("GRANT SELECT ON {} TO {}").format(sql.Identifier(schema, TABLE), sql.Identifier(role)))
    return role


def drop_role(admin: psycopg.Connection, role: str) -> None:
    admin.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
    admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


def test_inspect_and_capture_a_legacy_table_without_writing_or_holding_locks(pg_dsn, schema, legacy, tmp_path):
    admin = psycopg.connect(pg_dsn, autocommit=True)
    role = make_role(admin, schema, monitor=True)
    role_oid = admin.execute("SELECT oid FROM pg_roles WHERE rolname = %s", (role,)).fetchone()[0]
    role_dsn = make_conninfo(pg_dsn, user=role, password=PASSWORD)
    table = f"{schema}.{TABLE}"
    watcher = LockWatcher(pg_dsn, role)
    try:
        before = wait_for_counters(admin, schema, (legacy.triggers, 0, 0))  # the seeding's inserts
        legacy.start()
        watcher.start()
        # the app is churning: it has fired and re-inserted rows (the first are due within its
        # shortest interval)
        deadline = time.time() + min(legacy.every_s) + WAIT_S
        while not (legacy.counts.deletes and legacy.counts.updates) and time.time() < deadline:
            time.sleep(0.05)
        assert legacy.counts.deletes, "the legacy app fired nothing"

        ins = bench(
            "inspect",
            "--dsn",
            role_dsn,
            "--table",
            table,
            "--due-column",
            "run_after",
            "--watch",
            "8s",
            "--analyze",
            *GUARDS,
            "-o",
            str(tmp_path / "inspect"),
        )
        assert ins.returncode == 0, ins.stdout[-3000:] + ins.stderr[-3000:]

        cap_start = time.time()
        cap = bench(
            "capture",
            "--dsn",
            role_dsn,
            "--table",
            table,
            "--map",
            "id=job_key,tenant=account_ref,due=run_after,state=cursor_blob",
            "--watch",
            "12s",
            *GUARDS,
            "-o",
            str(tmp_path / "capture"),
        )
        cap_end = time.time()
        assert cap.returncode == 0, cap.stdout[-3000:] + cap.stderr[-3000:]
        counts = legacy.stop()
        watcher.stop.set()
        watcher.join(timeout=10)
        after = wait_for_counters(
            admin, schema, tuple(b + n for b, n in zip(before[TABLE], (counts.inserts, counts.updates, counts.deletes)))
        )
        statements = admin.execute(
            "SELECT query, calls, max_exec_time, rows FROM pg_stat_statements "
            "WHERE userid = %s AND dbid = (SELECT oid FROM pg_database WHERE datname = current_database())",
            (role_oid,),
        ).fetchall()
    finally:
        watcher.stop.set()
        legacy.stop()
        drop_role(admin, role)
        admin.close()

    # -- inspect: the diagnosis names the churn, the low HOT ratio and the index count ------------
    report = json.loads((tmp_path / "inspect" / "inspect.json").read_text())
    findings = {f["key"]: f for f in report["diagnosis"]}
    assert findings["delete_reinsert_churn"]["shown"] is True, findings["delete_reinsert_churn"]
    hot = findings["low_hot_many_indexes"]
    assert hot["shown"] is True, hot
    assert hot["evidence"]["indexes"] == 7 and "7 indexes" in hot["figure"]
    assert hot["evidence"]["hot_ratio"] < 0.5
    assert {a["design"] for a in hot["addressed_by"]} == {"temporal_shards", "pg_leased"}
    assert report["shape"]["index_count"] == 7
    assert report["churn"]["table"]["deletes_per_s"] > 0 and report["churn"]["table"]["inserts_per_s"] > 0
    assert report["bloat"]["method"] == "exact (pgstattuple)"  # pg_monitor carries pg_stat_scan_tables
    assert report["due_scan"]["analyze"]["rows"] >= 0 and report["due_scan"]["plan"]["node_types"]
    assert report["safeguards"]["default_transaction_read_only"] == "on"
    assert report["safeguards"]["statement_timeout_ms"] == STATEMENT_TIMEOUT_MS
    assert report["skipped"] == []  # the monitoring role may read everything inspect looks at
    md = (tmp_path / "inspect" / "inspect.md").read_text()
    assert "delete+reinsert churn | SHOWN" in md and "low HOT ratio with many indexes | SHOWN" in md
    assert "[SHOWN] delete+reinsert churn" in ins.stdout

    # -- capture: the replayed population's rate is the loop's ------------------------------------
    trace = tmp_path / "capture" / "trace.csv"
    population = from_trace(trace)
    loop_rate = counts.fires_between(cap_start, cap_end) / (cap_end - cap_start)
    assert len(population) == legacy.triggers
    assert population.rate_per_s() == pytest.approx(loop_rate, rel=0.05), (population.rate_per_s(), loop_rate)
    captured = json.loads((tmp_path / "capture" / "capture.json").read_text())
    assert captured["interval_sources"]["rearms"] == legacy.triggers  # every interval seen re-armed
    assert captured["state_bytes"]["p50"] == pytest.approx(4096, rel=0.01)
    assert captured["tenants"] == len(set(population.tenants))
    w = load_workload(str(tmp_path / "capture" / "workload.yaml"))
    assert Path(w.trace) == trace and w.state_bytes == int(round(captured["state_bytes"]["p50"]))
    # nothing identifying left the database: hashes only, no password anywhere
    text = trace.read_text()
    assert "job-" not in text and "acct-" not in text
    for out in [
        ins.stdout + ins.stderr,
        cap.stdout + cap.stderr,
        *(p.read_text() for p in tmp_path.rglob("*") if p.is_file()),
    ]:
        assert PASSWORD not in out

    # -- neither command wrote anything -------------------------------------------------------
    assert set(after) == {TABLE}  # no other table appeared or was written in the schema
    assert after[TABLE] == tuple(b + n for b, n in zip(before[TABLE], (counts.inserts, counts.updates, counts.deletes)))
    assert len(statements) > 5, statements  # the commands ran as this role, and were tracked
    kinds = {first_keyword(q) for q, *_ in statements}
    assert kinds <= set(READ_STATEMENTS), kinds

    # -- and held no lock beyond the timeout ----------------------------------------------------
    slowest_ms = max(t for _, _, t, _ in statements)
    print(
        f"statements by {role}: {len(statements)} ({sorted(kinds)}), slowest {slowest_ms:.1f} ms; lock samples "
        f"{watcher.samples_with_locks}, modes {sorted(watcher.modes)}, oldest transaction {watcher.max_xact_age_s:.3f} "
        f"s; loop {loop_rate:.1f} fires/s, replay {population.rate_per_s():.1f} fires/s"
    )
    assert slowest_ms < STATEMENT_TIMEOUT_MS, slowest_ms
    assert watcher.modes <= {("relation", "AccessShareLock")}, watcher.modes
    assert watcher.max_xact_age_s < STATEMENT_TIMEOUT_MS / 1000.0, watcher.max_xact_age_s
    assert watcher.waiting == 0


def test_inspect_without_privileges_completes_and_says_what_it_skipped(pg_dsn, schema, legacy, tmp_path):
    admin = psycopg.connect(pg_dsn, autocommit=True)
    role = make_role(admin, schema, monitor=False)
    holder = psycopg.connect(pg_dsn)  # another role's session holding a snapshot, idle in transaction
    try:
        holder.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        holder.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(schema, TABLE))).fetchone()
        res = bench(
            "inspect",
            "--dsn",
            make_conninfo(pg_dsn, user=role, password=PASSWORD),
            "--table",
            f"{schema}.{TABLE}",
            "--watch",
            "3s",
            *GUARDS,
            "-o",
            str(tmp_path / "inspect"),
        )
    finally:
        holder.rollback()
        holder.close()
        drop_role(admin, role)
        admin.close()
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    report = json.loads((tmp_path / "inspect" / "inspect.json").read_text())
    skipped = " | ".join(f"{s['what']}: {s['why']} ({s['fix']})" for s in report["skipped"])
    # pgstattuple: EXECUTE belongs to pg_stat_scan_tables, so bloat is estimated, and says so
    assert "pgstattuple" in skipped and "pg_stat_scan_tables" in skipped
    assert report["bloat"]["method"].startswith("estimate")
    assert "permission denied" in report["bloat"]["why_not_exact"]
    # pg_stat_activity: other roles' sessions show no details without pg_read_all_stats
    assert "pg_stat_activity" in skipped and "pg_read_all_stats" in skipped
    assert report["horizon"]["hidden_sessions"] >= 1
    # the holder's snapshot is still seen (backend_xmin is visible to any role), its age is not
    assert any(h["kind"].startswith("session of another role") for h in report["horizon"]["holders"])
    horizon = next(f for f in report["diagnosis"] if f["key"] == "horizon_held")
    assert "session of another role" in horizon["figure"], horizon
    assert "skipped: " in res.stdout
    assert "## Skipped" in (tmp_path / "inspect" / "inspect.md").read_text()
    # the rest was read: the shape and the due query (guessed from the index on run_after)
    assert report["shape"]["index_count"] == 7
    assert report["due_scan"]["due_column"] == "run_after" and report["due_scan"]["guessed"] is True


def test_inspect_gives_up_after_lock_timeout_instead_of_queueing_behind_ddl(pg_dsn, schema, legacy, tmp_path):
    locker = psycopg.connect(pg_dsn)
    try:
        locker.execute(sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(sql.Identifier(schema, TABLE)))
        res = bench(
            "inspect",
            "--dsn",
            pg_dsn,
            "--table",
            f"{schema}.{TABLE}",
            "--watch",
            "0s",
            *GUARDS,
            "-o",
            str(tmp_path / "inspect"),
            timeout=120,
        )
    finally:
        locker.rollback()
        locker.close()
    assert res.returncode == 1, res.stdout + res.stderr
    error = res.stderr.strip().splitlines()[-1]
    assert error.startswith("error: ") and "lock_timeout (1000 ms)" in error and "nothing was changed" in error
    assert "Traceback" not in res.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["--map", "id=job_key,due=run_after"], "--map lacks tenant"),
        (["--map", "id=job_key,tenant=account_ref,due=nope"], "has no column 'nope'"),
        (["--map", "id=job_key,tenant=account_ref,due=account_ref"], "must hold a timestamp or epoch seconds"),
        (["--map", "id=job_key,tenant=account_ref,due=run_after", "--watch", "0s"], "give --watch"),
        (["--map", "id=job_key,colour=x,tenant=account_ref,due=run_after"], "bad --map entry 'colour=x'"),
    ],
)
def test_capture_bad_mapping_is_one_line_and_exit_2(pg_dsn, schema, legacy, tmp_path, args, message):
    res = bench(
        "capture", "--dsn", pg_dsn, "--table", f"{schema}.{TABLE}", *args, "-o", str(tmp_path / "c"), timeout=120
    )
    assert res.returncode == 2, res.stdout + res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], lines


def test_inspect_unknown_table_is_one_line_and_exit_2(pg_dsn, tmp_path):
    res = bench(
        "inspect",
        "--dsn",
        pg_dsn,
        "--table",
        "no_such_schema.no_table",
        "--watch",
        "0s",
        "-o",
        str(tmp_path / "i"),
        timeout=120,
    )
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "not found" in lines[0] and "--table SCHEMA.TABLE" in lines[0], lines


def test_inspect_compare_must_name_runs(pg_dsn, tmp_path):
    res = bench(
        "inspect",
        "--dsn",
        pg_dsn,
        "--table",
        "pg_catalog.pg_class",
        "--watch",
        "0s",
        "--compare",
        str(tmp_path / "no-runs-here"),
        "-o",
        str(tmp_path / "i"),
        timeout=120,
    )
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --compare: no run directory at"), lines
