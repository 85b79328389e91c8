"""The four outcomes, the rates and the lag of a run, recomputed by hand from a small fire log.

Every fire due in the window (``max(due_at, armed_at)`` in ``[measure_start, measure_end)``) is
exactly one of on time, late, pending, lost; lag percentiles cover all of them with undelivered
fires infinitely late; early fires keep their negative lag; lost fails the run.
"""

import math

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from metrics import accounting, rundir

WINDOW = {"arm_start": 0.0, "measure_start": 10.0, "measure_end": 20.0, "drain_limit_s": 60.0, "drained_s": 5.0}
WORKLOAD = {"name": "w", "rate_per_s": 0.5, "on_time_s": 2.0, "cadence": "fixed", "interval_max_s": 10.0}


def row(tid, due, fired, armed=0.0, attempt=1, effect=False, external=False, held=None):
    return {
        "timer_id": tid,
        "tenant_id": "t",
        "type": "poll",
        "due_at": due,
        "armed_at": armed,
        "fired_at": fired,
        "lag_s": None if fired is None else fired - max(due, armed),
        "attempt": 0 if fired is None else attempt,
        "worker": "w" if fired is not None else "",
        "batch": 0 if fired is not None else -1,
        "effect_delivered": effect,
        "warmup": (fired if fired is not None else due) < WINDOW["measure_start"],
        "external_effect": external,
        "held_at_end": held,
    }


def write_run(tmp_path, rows, load=None, window=None):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    rundir.write_json(
        run_dir / rundir.CONFIG,
        {
            "scheduler": "x",
            "workload": WORKLOAD,
            "window": window or WINDOW,
            "load": load or {"periodic_triggers": 5, "interval_max_s": 10.0, "skipped_periods_in_window": 0},
        },
    )
    cols = {name: [r[name] for r in rows] for name in rundir.FIRES_SCHEMA.names}
    pq.write_table(pa.table(cols, schema=rundir.FIRES_SCHEMA), run_dir / rundir.FIRES)
    return run_dir


ROWS = [
    row("a", 1.0, 1.1),  # due in the warm-up
    row("a", 11.0, 11.2, armed=1.1, effect=True),  # on time (0.2 s)
    row("a", 11.0, 11.4, armed=1.1, attempt=2, effect=True),  # a redelivery, its keyed effect doubled
    row("b", 12.0, 15.5),  # late: 3.5 s over a 2 s bound
    row("b", 19.9, 25.0),  # late, delivered during the drain (5.1 s): counts, outside the achieved rate
    row("c", 13.0, None, held=True),  # never delivered, still held: pending
    row("d", 14.0, None, held=False),  # never delivered, not held: lost
    row("e", 5.0, None, held=False),  # lost in the warm-up
    row("f", 16.0, 15.9),  # early: its lag stays -0.1 s (on time)
    row("g", 17.0, 17.1, external=True),  # a webhook sent ...
    row("g", 17.0, 18.0, attempt=2, external=True),  # ... and sent again on redelivery
]


def test_every_fire_due_in_the_window_is_exactly_one_of_four_outcomes(tmp_path):
    s = accounting.compute_summary(write_run(tmp_path, ROWS))
    assert s["outcomes"] == {"due": 7, "on_time": 3, "late": 2, "pending": 1, "lost": 1}
    o = s["outcomes"]
    assert o["on_time"] + o["late"] + o["pending"] + o["lost"] == o["due"]
    assert s["lost_in_warmup"] == 1 and s["early"] == 1


def test_lag_percentiles_cover_every_due_fire_and_undelivered_ones_are_infinitely_late(tmp_path):
    s = accounting.compute_summary(write_run(tmp_path, ROWS))
    # sorted lags of the 7 due keys: -0.1, 0.1, 0.2, 3.5, 5.1, inf, inf (nearest rank)
    assert s["lag_ms"]["p50"] == pytest.approx(3500.0)
    assert s["lag_ms"]["p90"] == s["lag_ms"]["p99"] == s["lag_ms"]["max"] == accounting.NOT_DELIVERED
    lags = accounting.lag_percentiles_ms([-0.1, 0.1, 0.2])
    assert lags["p50"] == pytest.approx(100.0) and lags["max"] == pytest.approx(200.0)
    assert accounting.lag_percentiles_ms([-0.3, -0.2, 0.1])["p50"] == pytest.approx(-200.0)  # never clamped
    assert accounting.lag_percentiles_ms([])["p99"] is None


def test_rates_offered_against_achieved_and_target(tmp_path):
    s = accounting.compute_summary(write_run(tmp_path, ROWS))
    assert s["offered_rate"] == pytest.approx(0.7)  # 7 keys due in a 10 s window
    assert s["achieved_rate"] == pytest.approx(0.4) and s["fires"] == 4  # first deliveries inside the window
    assert s["rate_held"] is False  # 0.4 < 95% of 0.7 (offered is >= 95% of the 0.5 target)
    assert any("achieved 0.4 fires/s" in w for w in s["warnings"])
    assert accounting.rate_held(100.0, 96.0, 95.0) == (True, [])
    held, why = accounting.rate_held(100.0, 90.0, 90.0)
    assert held is False and "offered 90.0" in why[0]


def test_lost_fires_and_duplicate_keyed_effects_fail_the_run(tmp_path):
    s = accounting.compute_summary(write_run(tmp_path, ROWS))
    assert s["correct"] is False
    assert any("2 fires lost" in f for f in s["failures"]) and any(
        "1 duplicate keyed effects" in f for f in s["failures"]
    )
    assert (s["duplicate_fires"], s["duplicate_effects"], s["redelivered_fires"]) == (2, 1, 2)
    assert (s["external_effects"], s["duplicate_external_effects"]) == (2, 1)
    ok = [r for r in ROWS if r["timer_id"] not in ("d", "e")]
    ok = [r if r["attempt"] < 2 else {**r, "effect_delivered": False} for r in ok]
    (tmp_path / "ok").mkdir()
    s = accounting.compute_summary(write_run(tmp_path / "ok", ok))
    assert s["correct"] is True and s["failures"] == [] and s["outcomes"]["pending"] == 1


def test_cycles_per_trigger_and_steady_state(tmp_path):
    s = accounting.compute_summary(write_run(tmp_path, ROWS))
    assert s["cycles_per_trigger"] == pytest.approx(7 / 5) and s["steady_state"] is False
    assert any("not steady state: 1.40 cycles per trigger" in w for w in s["warnings"])
    (tmp_path / "steady").mkdir()
    s = accounting.compute_summary(
        write_run(tmp_path / "steady", ROWS, load={"periodic_triggers": 3, "interval_max_s": 10.0})
    )
    assert s["cycles_per_trigger"] == pytest.approx(7 / 3) and s["steady_state"] is True
    (tmp_path / "short").mkdir()  # enough cycles, but the warm-up (10 s) is shorter than the longest interval
    s = accounting.compute_summary(
        write_run(tmp_path / "short", ROWS, load={"periodic_triggers": 3, "interval_max_s": 30.0})
    )
    assert s["steady_state"] is False and any("shorter than the longest interval" in w for w in s["warnings"])
    assert s["arming_into_window_s"] is None  # no arm recorded (killed before it ended): not said

    steady = {"periodic_triggers": 3, "interval_max_s": 10.0}
    cases = ((9.0, None, None), (13.0, 3.0, "armed 3.0 s into the 10 s window:"), (20.5, 10.0, "had not finished"))
    for arming_end, into, said in cases:
        d = tmp_path / f"armed-{arming_end:g}"
        d.mkdir()  # the population's arm ended before the window, inside it, after it (cut at its end)
        s = accounting.compute_summary(write_run(d, ROWS, load=steady, window={**WINDOW, "arming_end": arming_end}))
        assert s["arming_into_window_s"] == into and s["steady_state"] is (said is None), arming_end
        assert (said is None) or any("population was still being armed" in w and said in w for w in s["warnings"])


def test_undelivered_fires_the_backend_was_not_asked_about_are_pending_and_said(tmp_path):
    rows = [row("a", 11.0, 11.2), row("b", 12.0, None, held=None)]
    s = accounting.compute_summary(write_run(tmp_path, rows))
    assert s["outcomes"]["pending"] == 1 and s["outcomes"]["lost"] == 0
    assert any("lost not judged" in w for w in s["warnings"])


def test_a_run_directory_from_before_the_new_columns_still_reads(tmp_path):
    old = rundir.FIRES_SCHEMA.remove(rundir.FIRES_SCHEMA.get_field_index("held_at_end"))
    old = old.remove(old.get_field_index("external_effect"))
    cols = {name: [r[name] for r in ROWS[:2]] for name in old.names}
    run_dir = write_run(tmp_path, ROWS[:2])
    pq.write_table(pa.table(cols, schema=old), run_dir / rundir.FIRES)
    t = rundir.read_fires(run_dir)
    assert t.column("external_effect").to_pylist() == [False, False]
    assert t.column("held_at_end").null_count == 2
    assert not math.isnan(accounting.compute_summary(run_dir)["offered_rate"])
