"""Finding runs from directories, parents and globs; labels; the baseline."""

import json

import pytest

from reports.errors import ReportError
from reports.load import expand_run_paths, load_runs, pick_baseline


def make_run_dir(parent, name, scheduler):
    d = parent / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"scheduler": scheduler, "workload": {"name": "smoke"}}))
    (d / "summary.json").write_text(json.dumps({"scheduler": scheduler, "complete": True}))
    return d


def test_run_dirs_parents_and_globs(tmp_path):
    a = make_run_dir(tmp_path, "20260101-000001-memory", "memory")
    b = make_run_dir(tmp_path, "20260101-000002-pg_leased", "pg_leased")
    (tmp_path / "not-a-run").mkdir()
    assert expand_run_paths([str(tmp_path)]) == [a, b]
    assert expand_run_paths([str(tmp_path / "*-pg_*")]) == [b]
    assert expand_run_paths([str(b), str(tmp_path)]) == [b, a]  # order as given, no duplicates


def test_an_argument_that_names_no_run_is_a_usage_error(tmp_path):
    with pytest.raises(ReportError, match="no run directory"):
        expand_run_paths([str(tmp_path / "missing")])


def test_labels_are_unique_and_missing_files_are_reported(tmp_path):
    make_run_dir(tmp_path, "20260101-000001-memory", "memory")
    make_run_dir(tmp_path, "20260101-000002-memory", "memory")
    runs = load_runs([str(tmp_path)])
    assert [r.label for r in runs] == ["memory @000001", "memory @000002"]
    assert "fires.parquet missing" in runs[0].problems


def test_baseline_by_directory_name_or_scheduler(tmp_path):
    make_run_dir(tmp_path, "20260101-000001-memory", "memory")
    b = make_run_dir(tmp_path, "20260101-000002-pg_leased", "pg_leased")
    runs = load_runs([str(tmp_path)])
    assert pick_baseline(runs, None) == 0
    assert pick_baseline(runs, str(b)) == 1
    assert pick_baseline(runs, "pg_leased") == 1
    with pytest.raises(ReportError, match="choose one of"):
        pick_baseline(runs, "temporal_shards")


def test_a_damaged_file_is_one_short_line_said_once(tmp_path):
    """A truncated fires.parquet without summary.json: the recomputed summary fails for the same
    reason as the file; the run's warnings say it once, in one line."""
    from reports.checks import run_checks, warning_lines

    d = make_run_dir(tmp_path, "20260101-000001-memory", "memory")
    (d / "summary.json").unlink()
    (d / "fires.parquet").write_bytes(b"PAR1" + b"\0" * 100)
    (run,) = load_runs([str(d)])
    fires = [x for x in run.problems if "fires" in x]
    assert len(fires) == 1 and fires[0].startswith("fires.parquet unreadable (") and len(fires[0]) < 160
    lines = warning_lines(run, run_checks(run))
    assert sum("fires.parquet unreadable" in line for line in lines) == 1


def test_collapse_says_each_problem_once():
    from reports.fmt import collapse

    boom = "RuntimeError: store connection lost\nTraceback (most recent call last): ..."
    assert collapse([boom, boom, "other", boom]) == ["RuntimeError: store connection lost (3 times)", "other"]
    assert collapse(["incomplete run: crashed: X; figures cover what was recorded", "y"], known=["crashed: X"]) == ["y"]
