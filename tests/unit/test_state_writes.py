"""Like for like: bench compare holds every design with a choice to one state-write policy, and
the report says which policy each run followed, naming a design that has only its own."""

from pathlib import Path

import pandas as pd
import pytest

from harness.compare import plan, state_write_args
from harness.errors import UsageError
from reports.load import Run
from reports.tables import state_writes_sentence


def run(label: str, policy: str | None, fixed: bool = False) -> Run:
    caps = {} if policy is None else {"state_writes": policy, "state_writes_fixed": fixed}
    return Run(
        path=Path(f"/runs/20260101-000000-{label}"),
        config={"scheduler": label, "capabilities": caps},
        summary={},
        fires=pd.DataFrame(),
        samples=pd.DataFrame(),
        label=label,
    )


def test_designs_with_a_choice_get_the_policy_and_the_others_keep_theirs() -> None:
    assert state_write_args("pg_leased", "always") == ("--opt", "skip_unchanged_state=false")
    assert state_write_args("temporal_shards", "skip-unchanged") == ("--opt", "skip_unchanged_state=true")
    assert state_write_args("pg_queue", "skip-unchanged") == ()
    assert state_write_args("pg_leased", None) == ()
    with pytest.raises(UsageError, match="--state-writes"):
        state_write_args("pg_leased", "sometimes")
    runs = plan(["pg_queue", "temporal_shards", "pg_leased"], True, "always")
    assert [r.extra_args[:2] for r in runs] == [
        (),
        ("--opt", "autovacuum_tuned=true"),  # pg_queue's tuned control: pg_queue has no choice
        ("--opt", "skip_unchanged_state=false"),
        ("--opt", "skip_unchanged_state=false"),
    ]


def test_the_report_names_every_run_that_followed_another_policy() -> None:
    same = state_writes_sentence([run("pg_leased", "skip-unchanged"), run("temporal_shards", "skip-unchanged")])
    assert same is not None and "one policy, skip-unchanged" in same
    mixed = state_writes_sentence(
        [
            run("pg_queue", "always", fixed=True),
            run("pg_leased", "skip-unchanged"),
            run("temporal_shards", "skip-unchanged"),
        ]
    )
    assert mixed is not None and mixed.startswith("State writes differ")
    assert "pg_queue: always (its design has no other policy)" in mixed
    assert state_writes_sentence([run("old", None)]) is None


def test_the_recommendation_says_which_policy_the_costs_were_compared_under() -> None:
    from reports.recommend import recommend

    runs = [run("pg_queue", "always", fixed=True), run("pg_leased", "skip-unchanged")]
    for r in runs:
        r.summary.update(rate_held=True, lag_ms={"p99": 1.0}, outcomes={"lost": 0}, lost_in_warmup=0)
    why = " ".join(recommend(runs).why)
    assert "pg_queue: always (its design has no other policy)" in why
