"""PUT /timers body validation, the multi-node merge rules, and the arm-load shapes: pure logic."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from harness.node_api import MAX_TIMERS_PER_PUT, BadTimers, load_json, parse_timers
from loadgen.arm_shape import parse_shape, users_at
from loadgen.processor import PollingProcessor, merge_state
from metrics.parts import count_double_held

TYPES = ["load", "poll"]


def test_good_body_parses_every_form_of_fire_at():
    timers = parse_timers(
        {
            "timers": [
                {"id": "a", "fire_at": 1_800_000_000, "tenant": "t1", "priority": 3},
                {"id": "b", "fire_at": "2027-01-15T12:00:00Z", "type": "load"},
                {"id": "c", "fire_at": None, "tenant_id": "t2"},
            ]
        },
        TYPES,
    )
    assert [t.id for t in timers] == ["a", "b", "c"]
    assert timers[0].fire_at == 1_800_000_000.0 and timers[0].tenant_id == "t1" and timers[0].priority == 3
    assert timers[1].fire_at == pytest.approx(1_800_014_400.0) and timers[1].type == "load"
    assert timers[2].fire_at is None and timers[2].tenant_id == "t2" and timers[2].type == "poll"


def test_a_bare_list_is_a_body_too():
    assert [t.id for t in parse_timers([{"id": "x", "fire_at": None}], TYPES)] == ["x"]


@pytest.mark.parametrize(
    "body, names",
    [
        ({"nope": []}, "body must be"),
        ({"timers": []}, "no timers"),
        ({"timers": ["x"]}, "timers[0] must be an object"),
        ({"timers": [{"fire_at": None}]}, "timers[0].id"),
        ({"timers": [{"id": "", "fire_at": None}]}, "timers[0].id"),
        ({"timers": [{"id": "a"}]}, "timers[0].fire_at is required"),
        ({"timers": [{"id": "a", "fire_at": "tomorrow"}]}, "not an ISO-8601 time"),
        ({"timers": [{"id": "a", "fire_at": "2027-01-15T12:00:00"}]}, "no time zone"),
        ({"timers": [{"id": "a", "fire_at": -5}]}, "not a plausible epoch"),
        ({"timers": [{"id": "a", "fire_at": 1.7e12}]}, "not a plausible epoch"),  # milliseconds by mistake
        ({"timers": [{"id": "a", "fire_at": float("nan")}]}, "not a plausible epoch"),
        ({"timers": [{"id": "a", "fire_at": True}]}, "fire_at must be"),
        ({"timers": [{"id": "a", "fire_at": None, "type": "email"}]}, "has no processor"),
        ({"timers": [{"id": "a", "fire_at": None, "tenant": 7}]}, "tenant must be"),
        ({"timers": [{"id": "a", "fire_at": None, "priority": "high"}]}, "priority must be"),
        ({"timers": [{"id": "a", "fire_at": None, "priority": 2**40}]}, "priority must be"),
        ({"timers": [{"id": "a", "fire_at": None, "colour": "red"}]}, "unknown field"),
        ({"timers": [{"id": "ok", "fire_at": None}, {"id": "bad", "fire_at": "x"}]}, "timers[1]"),
    ],
)
def test_bad_body_is_rejected_naming_the_item_and_field(body, names):
    with pytest.raises(BadTimers) as err:
        parse_timers(body, TYPES)
    assert names in str(err.value)


def test_a_body_nested_deeper_than_the_parser_goes_is_a_bad_body_not_a_crash():
    deep = "[" * 100_000 + "]" * 100_000  # 200 KB
    with pytest.raises(BadTimers, match="nested too deeply"):
        load_json(deep)
    with pytest.raises(BadTimers, match="not JSON"):
        load_json("{not json")
    assert load_json('[[{"id": "a"}]]') == [[{"id": "a"}]]


def test_too_many_timers_in_one_request_is_rejected():
    with pytest.raises(BadTimers, match="at most"):
        parse_timers([{"id": f"t{i}", "fire_at": None} for i in range(MAX_TIMERS_PER_PUT + 1)], TYPES)


# -- merging node state ------------------------------------------------------------------------


def _proc(n: int):
    proc = SimpleNamespace(armed_due=np.full(n, np.nan), armed_at=np.full(n, np.nan), received_due=np.full(n, np.nan))
    proc.outstanding = lambda before: PollingProcessor.outstanding(proc, before)
    return proc


def test_merge_takes_the_latest_arm_and_the_latest_receipt_of_any_node():
    run = _proc(3)
    run.armed_due[:] = [10.0, 20.0, 30.0]  # the initial arms, in the run process
    run.armed_at[:] = [1.0, 1.0, 1.0]
    # node a received trigger 0 at 10 and re-armed it for 110; node b then received 110
    a = {
        "armed_due": np.array([110.0, np.nan, np.nan]),
        "armed_at": np.array([10.5, np.nan, np.nan]),
        "received_due": np.array([10.0, np.nan, np.nan]),
    }
    b = {
        "armed_due": np.array([210.0, 20.0, np.nan]),
        "armed_at": np.array([110.5, 0.5, np.nan]),
        "received_due": np.array([110.0, np.nan, 30.0]),
    }
    for _ in range(2):  # idempotent
        merge_state(run, a)
        merge_state(run, b)
    assert run.armed_due.tolist() == [210.0, 20.0, 30.0]  # b's older arm of trigger 1 lost to the run's
    assert run.received_due[2] == 30.0  # received the latest arm: not outstanding
    assert run.received_due[0] == 110.0 and run.armed_due[0] == 210.0  # 210 still outstanding
    assert math.isnan(run.received_due[1])
    assert run.outstanding(200.0).tolist() == [1] and run.outstanding(300.0).tolist() == [0, 1]


def test_merge_refuses_a_node_with_another_population():
    with pytest.raises(ValueError, match="same workload"):
        merge_state(_proc(3), {k: np.zeros(4) for k in ("armed_due", "armed_at", "received_due")})


def _holds(rows):
    ids, start, end, worker = zip(*rows)
    return {
        "timer_id": np.array(ids, object),
        "received_at": np.array(start, float),
        "committed_at": np.array(end, float),
        "worker": np.array(worker, object),
    }


def test_double_held_counts_overlaps_across_workers_only():
    holds = _holds(
        [
            ("t1", 0.0, 1.0, "n0"),
            ("t1", 2.0, 3.0, "n1"),  # after n0 committed: fine
            ("t2", 0.0, 5.0, "n0"),
            ("t2", 4.0, 6.0, "n1"),  # n0 still held t2: a double hold
            ("t3", 0.0, 5.0, "n0"),
            ("t3", 1.0, 2.0, "n0"),  # the same worker twice (a redelivery to itself): not this check
            ("t4", 0.0, math.nan, "n0"),  # never committed (the node stopped): proves nothing
            ("t4", 1.0, 2.0, "n1"),
        ]
    )
    assert count_double_held(holds) == 1


def test_no_holds_no_double_holds():
    assert count_double_held(_holds([("t", 0.0, 1.0, "n0")])) == 0


# -- arm-load shapes ---------------------------------------------------------------------------


def test_steps_hold_each_user_count_until_its_time_then_end():
    kind, points = parse_shape("steps:20s=2,40s=4,1m=8")
    assert points == [(20.0, 2), (40.0, 4), (60.0, 8)]
    assert [users_at(kind, points, t) for t in (0, 19.9, 20, 45, 59.9)] == [2, 2, 4, 8, 8]
    assert users_at(kind, points, 60) is None


def test_ramp_interpolates_between_points():
    kind, points = parse_shape("ramp:10s=1,20s=11")
    assert [users_at(kind, points, t) for t in (0, 5, 10, 15)] == [1, 1, 1, 6]
    assert users_at(kind, points, 20) is None


@pytest.mark.parametrize("spec", ["wave:10s=1", "steps:", "steps:10s", "steps:20s=1,10s=2", "ramp:10x=2"])
def test_bad_shape_is_one_clear_error(spec):
    with pytest.raises(ValueError, match="arm-load shape"):
        parse_shape(spec)
