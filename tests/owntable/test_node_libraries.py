"""``bench inspect --preset`` and ``bench capture --preset`` on the tables pg-boss and
graphile-worker create themselves (the npm packages, installed by the test setup into
tests/owntable/node), each with a polling application (``node/apps.mjs``) that re-arms a job per
trigger with the trigger's id and tenant in the job's JSON data. The connection reaches node
through the PG* environment variables (the password, when there is one, as PGPASSWORD)."""

from __future__ import annotations

import pytest

from tests.owntable.libraries import EVERY, TRIGGERS, inspect_and_capture, libpq_env, node_app

CASES = {
    "pg-boss": (
        "data.tenant",
        {
            "finished_rows_kept": True,  # completed jobs stay in their queue's partition for 12 h
            "log_table_unbounded": False,  # pgboss.archive: deleted after 7 days (and empty so far)
            "due_index_includes_finished": False,
            "missing_partial_index": False,  # job_i5: (name, start_after) WHERE state < 'active'
        },
    ),
    "graphile-worker": (
        "payload.tenant",  # a json column (no statistics samples: the path is checked on rows)
        {
            "finished_rows_kept": False,  # completed jobs are deleted...
            "log_table_unbounded": False,
            "due_index_includes_finished": False,
            "missing_partial_index": False,  # jobs_main_index: (priority, run_at) WHERE is_available
        },
    ),
}


@pytest.mark.parametrize("library", list(CASES))
def test_a_node_job_library_table_captured_and_diagnosed(library, library_db, tmp_path):
    app = node_app(library, library_db, tmp_path / "app.json", TRIGGERS, EVERY)
    found = inspect_and_capture(library, library_db, app, tmp_path, *CASES[library])
    if library == "graphile-worker":  # ...one insert and one delete per fire
        assert found["delete_reinsert_churn"]["shown"] is True, found["delete_reinsert_churn"]


def test_the_node_applications_get_the_password_from_the_environment(tmp_path):
    passfile = tmp_path / "pgpass"
    passfile.write_text("127.0.0.1:5999:*:app:s3cr\\:et\n")
    env = libpq_env(f"host=127.0.0.1 port=5999 dbname=x user=app passfile={passfile}")
    assert env == {"PGHOST": "127.0.0.1", "PGPORT": "5999", "PGDATABASE": "x", "PGUSER": "app", "PGPASSWORD": "s3cr:et"}
    assert libpq_env("host=h port=1 dbname=d user=u password=pw")["PGPASSWORD"] == "pw"
    assert "PGPASSWORD" not in libpq_env(f"host=h port=1 dbname=d user=u passfile={passfile}")
