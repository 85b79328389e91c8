"""``bench inspect --preset`` and ``bench capture --preset`` on the tables procrastinate,
PgQueuer and DBOS create themselves, each with a polling application re-arming through the
library's own API (:mod:`tests.owntable.job_apps`): capture finds every trigger once, its
interval, its tenant (inside the job's JSON arguments) and the application's rate; inspect names
the library's own signatures."""

from __future__ import annotations

import pytest

from tests.owntable.libraries import EVERY, TRIGGERS, inspect_and_capture, python_app

CASES = {
    # library: (the tenant's path in its row, the library signatures expected)
    "procrastinate": (
        "args.tenant",
        {
            "finished_rows_kept": True,  # succeeded jobs stay in procrastinate_jobs
            "log_table_unbounded": True,  # procrastinate_events: a row per state change
            "due_index_includes_finished": False,  # no index on scheduled_at at all...
            "missing_partial_index": True,  # ...so none restricted to todo rows either
        },
    ),
    "pgqueuer": (
        "payload.tenant",  # bytea holding JSON
        {
            "finished_rows_kept": False,  # finished jobs leave pgqueuer...
            "log_table_unbounded": True,  # ...for pgqueuer_log, which nothing empties
            "due_index_includes_finished": False,
            "missing_partial_index": False,  # pgqueuer_ep_ea_idx: (entrypoint, execute_after) WHERE queued
        },
    ),
    "dbos": (
        "attributes.tenant",
        {
            "finished_rows_kept": True,  # SUCCESS workflows stay in workflow_status
            "log_table_unbounded": True,  # operation_outputs: a row per step
            "due_index_includes_finished": False,
            "missing_partial_index": False,  # idx_workflow_status_delayed WHERE status = 'DELAYED'
        },
    ),
}


@pytest.mark.parametrize("library", list(CASES))
def test_a_job_library_table_captured_and_diagnosed(library, library_db, tmp_path):
    app = python_app(library, library_db, tmp_path / "app.json", TRIGGERS, EVERY)
    inspect_and_capture(library, library_db, app, tmp_path, *CASES[library])
