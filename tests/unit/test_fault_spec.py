"""``--fault SPEC`` parsing and the per-fault summary figures (pure logic, no servers)."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from harness.faults import ACCEPTED_FORMS, FaultSpec, parse
from metrics.faults import fault_summary
from metrics.rundir import FIRES_SCHEMA


@pytest.mark.parametrize(
    "text, spec",
    [
        ("kill-worker@30s", FaultSpec("kill-worker@30s", "kill-worker", 30.0)),
        ("pause-worker@30s:20s", FaultSpec("pause-worker@30s:20s", "pause-worker", 30.0, 20.0)),
        ("restart-postgres@1m", FaultSpec("restart-postgres@1m", "restart-postgres", 60.0)),
        ("restart-temporal@60", FaultSpec("restart-temporal@60", "restart-temporal", 60.0)),
        ("restart-temporal@60s:5s", FaultSpec("restart-temporal@60s:5s", "restart-temporal", 60.0, down_s=5.0)),
        ("hold-snapshot@10s:2m", FaultSpec("hold-snapshot@10s:2m", "hold-snapshot", 10.0, 120.0)),
        ("slow-provider@30s:60s:500ms", FaultSpec("slow-provider@30s:60s:500ms", "slow-provider", 30.0, 60.0, 0.5)),
        ("kill-worker@0s", FaultSpec("kill-worker@0s", "kill-worker", 0.0)),
    ],
)
def test_each_accepted_form_parses_to_seconds(text, spec):
    assert parse(text) == spec


@pytest.mark.parametrize(
    "text",
    [
        "kill@30s",  # unknown kind
        "kill-worker",  # no offset
        "kill-worker@30s:5s",  # a value too many
        "pause-worker@30s",  # missing duration
        "slow-provider@30s:60s",  # missing latency
        "hold-snapshot@ten:5s",  # not a duration
        "hold-snapshot@10s:0s",  # zero duration
        "restart-postgres@-5s",  # negative offset
        "restart-postgres@5s:1s:1s",  # a value too many
        "restart-temporal@5s:0s",  # stays down for no time
    ],
)
def test_a_bad_spec_is_one_line_naming_it_and_every_accepted_form(text):
    with pytest.raises(ValueError) as err:
        parse(text)
    msg = str(err.value)
    assert "\n" not in msg
    assert repr(text) in msg
    assert ACCEPTED_FORMS in msg


def _write_run(tmp_path, rows, faults, max_lag_s=1.0, arm_start=1000.0):
    cols = {name: [r.get(name) for r in rows] for name in FIRES_SCHEMA.names}
    table = pa.table(cols, schema=FIRES_SCHEMA)
    pq.write_table(table, tmp_path / "fires.parquet")
    (tmp_path / "faults.json").write_text(
        json.dumps({"max_lag_s": max_lag_s, "arm_start": arm_start, "faults": faults})
    )
    return tmp_path


def fire(tid, due, fired, effect=False, worker="w0", external=None, held=None):
    return {
        "timer_id": tid,
        "tenant_id": "t0",
        "type": "poll",
        "due_at": due,
        "armed_at": due - 10,
        "fired_at": fired,
        "lag_s": None if fired is None else fired - due,
        "attempt": 0 if fired is None else 1,
        "worker": worker,
        "batch": 0,
        "effect_delivered": effect,
        "warmup": False,
        "external_effect": effect if external is None else external,
        "held_at_end": held,
    }


def span(text, kind, start, end):
    return {"text": text, "kind": kind, "start": start, "end": end, "note": ""}


def test_a_crash_owns_the_redelivery_of_what_it_lost_even_after_the_next_fault(tmp_path):
    rows = [
        # in the killed batch: received, its webhook sent, never committed
        fire("a", 1009.8, 1010.0, effect=False, external=True),
        fire("a", 1009.8, 1016.0, effect=True),  # redelivered 6 s later, after the restart began
        fire("b", 1011.0, 1011.2),
        fire("c", 1015.5, 1015.6, effect=True),  # due during the restart, on time
        fire("c", 1015.5, 1017.0, effect=True),  # a doubled effect: the key should have stopped it
        fire("d", 1016.0, None, held=False),  # due during the restart, never came, not held: lost
        fire("f", 1016.5, None, held=True),  # due during the restart, never came, still held: pending
        fire("e", 1020.0, 1020.1),  # on time again
    ]
    run = _write_run(
        tmp_path,
        rows,
        [
            span("kill-worker@10s", "kill-worker", 1010.0, 1011.0),
            span("restart-postgres@15s", "restart-postgres", 1015.0, 1015.5),
            {"text": "hold-snapshot@99s:5s", "kind": "hold-snapshot", "start": None, "end": None, "note": "not fired"},
        ],
    )
    kill, restart, unfired = fault_summary(run)
    assert (kill["duplicate_fires"], kill["duplicate_effects"], kill["lost"], kill["pending"]) == (1, 0, 0, 0)
    assert kill["duplicate_external_effects"] == 1  # at-least-once: the webhook went out twice
    assert kill["late_fires"] == 1 and kill["lag_peak_ms"] == pytest.approx(6200.0)
    assert kill["time_to_recover_s"] == pytest.approx(5.0)  # redelivered 5 s after the replacement started
    assert kill["start_s"] == pytest.approx(10.0)
    assert (restart["duplicate_fires"], restart["duplicate_effects"], restart["lost"], restart["pending"]) == (
        1,
        1,
        1,
        1,
    )
    assert restart["time_to_recover_s"] == pytest.approx(1.5)  # c's late duplicate at 1017.0
    assert unfired == {"spec": "hold-snapshot@99s:5s", "kind": "hold-snapshot", "fired": False, "note": "not fired"}


def test_lag_still_over_the_bound_at_the_end_of_the_run_is_no_recovery(tmp_path):
    rows = [fire("a", 1000.0, 1000.1), fire("b", 1004.0, 1009.0), fire("c", 1005.0, 1010.0)]
    run = _write_run(tmp_path, rows, [span("slow-provider@3s:60s:5s", "slow-provider", 1003.0, 1063.0)])
    (f,) = fault_summary(run)
    assert f["time_to_recover_s"] is None and f["late_fires"] == 2


def test_a_fault_without_late_fires_recovers_at_once(tmp_path):
    rows = [fire("a", 1000.0, 1000.1), fire("b", 1004.0, 1004.2)]
    run = _write_run(tmp_path, rows, [span("hold-snapshot@3s:5s", "hold-snapshot", 1003.0, 1008.0)])
    (f,) = fault_summary(run)
    assert f["time_to_recover_s"] == 0.0 and f["lost"] == 0 and f["pending"] == 0 and f["fires"] == 1


def test_a_run_without_faults_has_no_fault_summary(tmp_path):
    pq.write_table(FIRES_SCHEMA.empty_table(), tmp_path / "fires.parquet")
    assert fault_summary(tmp_path) is None


def _write_samples(run_dir, rows):
    from metrics.rundir import SAMPLES_SCHEMA

    cols = {"t": [], "elapsed_s": [], "scope": [], "metric": [], "value": []}
    for t, scope, value in rows:
        for k, v in zip(cols, (t, t - 1000.0, scope, "n_dead_tup", value)):
            cols[k].append(v)
    pq.write_table(pa.table(cols, schema=SAMPLES_SCHEMA), run_dir / "samples.parquet")


def test_a_held_snapshot_reports_dead_tuples_per_relation_and_the_lowest_sample_after_its_release(tmp_path):
    held = span("hold-snapshot@3s:5s", "hold-snapshot", 1003.0, 1008.0)
    held["dead_tuples_start"] = {"s.timers": 10.0, "s.timers#toast": 0.0, "s.audit": 5.0}
    held["dead_tuples_end"] = {"s.timers": 910.0, "s.timers#toast": 0.0, "s.audit": 5.0}
    run = _write_run(tmp_path, [fire("a", 1000.0, 1000.1)], [held])
    # before the release (ignored), then vacuum takes s.timers down to 40 three seconds after it
    _write_samples(run, [(1007.0, "s.timers", 800.0), (1009.0, "s.timers", 600.0), (1011.0, "s.timers", 40.0)])
    (f,) = fault_summary(run)
    assert f["dead_tuples"]["s.timers"] == {
        "start": 10.0,
        "release": 910.0,
        "lowest_after": 40.0,
        "lowest_after_s": 3.0,
    }
    assert f["dead_tuples"]["s.audit"]["lowest_after"] is None  # never sampled after the release
    assert set(f["dead_tuples"]) == {"s.timers", "s.timers#toast", "s.audit"}
