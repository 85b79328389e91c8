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
