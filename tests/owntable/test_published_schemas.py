"""``--preset`` for River, Oban, Solid Queue and good_job, on tables built from their published
schemas in our own words (``published_schemas.sql``: their runtimes are Go, Elixir and Ruby), with
finished runs kept behind each trigger's pending one: capture learns every interval from the
finished rows' due times alone (``--watch 0s``), inspect names each library's signatures. Then
``--map`` expressions on a team's own table that is no preset, and the one-line refusals of bad
expressions, before anything but the catalogue is read."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from loadgen.population import from_trace
from schedulers.sqlfile import load_blocks
from tests.owntable.libraries import bench, check_signatures, findings, ok

BLOCKS = load_blocks(Path(__file__).with_name("published_schemas.sql"))
TRIGGERS = 40
EVERY = [3 + i % 4 for i in range(1, TRIGGERS + 1)]  # as the fill blocks arm them
TENANTS = 5


def run_block(dsn: str, name: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL(BLOCKS[name]).format(triggers=sql.Literal(TRIGGERS)))
        if not name.startswith("app_timers"):
            conn.execute("ANALYZE")


CASES = {
    # preset: (schema block, tenant path, library signatures)
    "river": (
        "river",
        "args.tenant",
        {
            "finished_rows_kept": True,  # completed jobs wait for the job cleaner (24 h)
            "log_table_unbounded": False,  # no log table
            "due_index_includes_finished": True,  # river_job_prioritized_fetching_index: every state
            "missing_partial_index": True,
        },
    ),
    "oban": (
        "oban",
        "args.tenant",
        {
            "finished_rows_kept": True,
            "log_table_unbounded": False,
            "due_index_includes_finished": True,  # (state, queue, priority, scheduled_at, id), no predicate
            "missing_partial_index": True,
        },
    ),
    "solid-queue": (
        "solid_queue",
        "arguments.arguments.0.tenant",  # JSON inside a text column
        {
            "finished_rows_kept": True,  # preserve_finished_jobs
            "log_table_unbounded": None,  # no watch window: growth not measured
            "due_index_includes_finished": True,  # index_solid_queue_jobs_for_alerting (scheduled_at, finished_at)
            "missing_partial_index": True,
        },
    ),
    "good_job": (
        "good_job",
        "serialized_params.arguments.0.tenant",
        {
            "finished_rows_kept": True,
            "log_table_unbounded": None,
            "due_index_includes_finished": False,
            "missing_partial_index": False,  # index_good_jobs_on_scheduled_at WHERE finished_at IS NULL
        },
    ),
}


@pytest.mark.parametrize("preset", list(CASES))
def test_a_published_schema_captured_from_its_finished_rows(preset, library_db, tmp_path):
    block, tenant, expected = CASES[preset]
    run_block(library_db, block)
    run_block(library_db, f"{block}_fill")
    ins = ok(bench("inspect", "--dsn", library_db, "--preset", preset, "--watch", "0s", "-o", str(tmp_path / "i")))
    cap = ok(
        bench(
            "capture",
            "--dsn",
            library_db,
            "--preset",
            preset,
            "--map",
            f"tenant={tenant}",
            "--watch",
            "0s",
            "-o",
            str(tmp_path / "c"),
        )
    )
    check_signatures(findings(tmp_path / "i"), expected)
    captured = json.loads((tmp_path / "c" / "capture.json").read_text())
    population = from_trace(tmp_path / "c" / "trace.csv")
    assert captured["triggers"] == TRIGGERS and captured["interval_sources"]["rearms"] == TRIGGERS
    assert sorted(population.interval_s) == pytest.approx(sorted(EVERY), rel=0.01)
    assert population.rate_per_s() == pytest.approx(sum(1 / e for e in EVERY), rel=0.01)
    assert captured["tenants"] == TENANTS and captured["history"]["identities"] == TRIGGERS
    print(f"{preset}:\n{ins.stdout}\n{cap.stdout}")


class TimerApp(threading.Thread):
    """The team's own application beside ``app_timers``: a tick every 100 ms."""

    def __init__(self, dsn: str) -> None:
        super().__init__(daemon=True)
        self.dsn, self.stop, self.error = dsn, threading.Event(), None

    def run(self) -> None:
        try:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                while not self.stop.wait(0.1):
                    conn.execute(BLOCKS["app_timers_fire"])
        except BaseException as exc:  # noqa: BLE001 - surfaced by the test
            self.error = exc


def test_capture_maps_json_paths_on_a_table_that_is_no_preset(library_db, tmp_path):
    run_block(library_db, "app_timers")
    app = TimerApp(library_db)
    app.start()
    try:
        time.sleep(1.0)
        cap = ok(
            bench(
                "capture",
                "--dsn",
                library_db,
                "--table",
                "public.app_timers",
                "--map",
                "id=spec.trigger_id,tenant=spec.tenant,due=due_at,state=spec",
                "--where",
                "state=waiting",
                "--watch",
                "9s",
                "-o",
                str(tmp_path / "c"),
            )
        )
    finally:
        app.stop.set()
        app.join(10)
    assert app.error is None
    captured = json.loads((tmp_path / "c" / "capture.json").read_text())
    population = from_trace(tmp_path / "c" / "trace.csv")
    assert captured["triggers"] == TRIGGERS and captured["interval_sources"]["rearms"] == TRIGGERS, cap.stdout
    assert sorted(population.interval_s) == pytest.approx(sorted(EVERY), rel=0.01)
    assert population.rate_per_s() == pytest.approx(sum(1 / e for e in EVERY), rel=0.01)
    assert captured["tenants"] == TENANTS and captured["where"] == "state=waiting"
    assert [c["method"] for c in captured["path_checks"]] == ["statistics (pg_stats samples)"] * 2


def scans(dsn: str) -> tuple[int, int]:
    """The table's sequential and index scans so far (after the last backend's flush)."""
    time.sleep(1.2)
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT seq_scan, coalesce(idx_scan, 0) FROM pg_stat_user_tables WHERE relname = 'app_timers'"
        ).fetchone()
    return row[0], row[1]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--map", "id=due_at.trigger_id,tenant=spec.tenant,due=due_at"], "is timestamp with time zone, not JSON"),
        (["--map", "id=spec.trigger,tenant=spec.tenant,due=due_at"], "path trigger is never present in spec"),
        (["--map", "id=state.x,tenant=spec.tenant,due=due_at"], "holds no JSON"),
        (
            ["--map", "id=spec.trigger_id,tenant=spec.tenant,due=due_at", "--where", "status=waiting"],
            "no column 'status'",
        ),
        (
            ["--map", "id=spec.trigger_id,tenant=spec.tenant,due=due_at", "--where", "state in (waiting"],
            "bad condition",
        ),
        (["--map", "id=spec.trigger_id,tenant=spec.tenant,due=spec.due"], "is a JSON path"),
        (["--preset", "no-such-library"], "unknown --preset 'no-such-library'"),
        (["--preset", "river"], "expects the schema of River"),
    ],
)
def test_bad_expressions_are_one_line_exit_2_with_nothing_read_but_the_catalogue(library_db, tmp_path, args, message):
    run_block(library_db, "app_timers")
    before = scans(library_db)
    res = bench(
        "capture",
        "--dsn",
        library_db,
        "--table",
        "public.app_timers",
        *args,
        "--watch",
        "3s",
        "-o",
        str(tmp_path / "c"),
        timeout=120,
    )
    assert res.returncode == 2, res.stdout + res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], lines
    assert scans(library_db) == before  # not one row of the table was read
