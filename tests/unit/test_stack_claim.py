"""Servers a person brings up while test sessions share them stay up when the sessions end."""

from __future__ import annotations

import json

from harness import stack


def test_env_up_marks_the_servers_as_running_before_the_test_sessions(tmp_path, monkeypatch):
    monkeypatch.setenv("TIMERBENCH_HOME", str(tmp_path))
    sessions = tmp_path / stack.TEST_SESSIONS
    sessions.mkdir()
    before = sessions / stack.RUNNING_BEFORE
    before.write_text(json.dumps({"postgres": False, "temporal": False}))  # the tests started both
    stack.claim_for_user(["postgres"])
    assert json.loads(before.read_text()) == {"postgres": True, "temporal": False}


def test_without_test_sessions_nothing_is_written(tmp_path, monkeypatch):
    monkeypatch.setenv("TIMERBENCH_HOME", str(tmp_path))
    stack.claim_for_user(["postgres", "temporal"])
    assert not (tmp_path / stack.TEST_SESSIONS).exists()
