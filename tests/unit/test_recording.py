"""The processor, the recorder, HDR recording and the run-directory summary, without a scheduler."""

import asyncio
import time

import numpy as np
import pyarrow.parquet as pq
import pytest

from loadgen import workload as wl
from loadgen.population import build
from loadgen.processor import PollingProcessor
from metrics import rundir
from metrics.hdr import new_histogram, percentiles_ms, record_many, reset
from metrics.recorder import FireRecorder
from schedulers.base import Fire


def test_record_many_matches_record_value():
    rng = np.random.default_rng(3)
    values = rng.lognormal(9, 2.5, 20_000).astype(np.int64)
    a, b = new_histogram(), new_histogram()
    for v in values:
        a.record_value(int(v))
    record_many(b, values)
    assert list(a.counts) == list(b.counts)
    assert (a.total_count, a.min_value, a.max_value) == (b.total_count, b.min_value, b.max_value)
    assert percentiles_ms(b)["max"] == values.max() / 1000
    reset(b)
    assert b.total_count == 0 and percentiles_ms(b)["p99"] is None


def make(tmp_path, **fields):
    w = wl.from_mapping({"rate": "50/s", "interval": "10s..20s", "warmup": "0s", "duration": "60s",
                         "provider_latency": {"median": "1ms", "p99": "2ms"}, **fields}).resolved()
    pop = build(w)
    now = time.time()
    rec = FireRecorder(tmp_path / rundir.SEGMENTS_DIR, now - 1, now + 60)
    return w, pop, rec, PollingProcessor(w, pop, rec)


def fires_for(pop, idx, due, attempt=1):
    return [Fire(pop.ids[i], pop.tenants[i], "poll", d, d - 1, attempt, "w0", 0) for i, d in zip(idx, due)]


def test_outcomes_rearm_after_the_interval_and_effects_carry_new_state(tmp_path):
    w, pop, rec, proc = make(tmp_path, error_rate=0.0, new_event_rate=1.0, state_size=64)
    now = time.time()
    fires = fires_for(pop, [0, 1, 2], [now - 0.5] * 3)
    outs = asyncio.run(proc.process(fires))
    done = time.time()
    for i, o in enumerate(outs):
        assert o.effect is True and len(o.new_state) == 64
        assert now + pop.interval_s[i] - 0.01 <= o.next_fire_at <= done + pop.interval_s[i] + 0.01
    assert rec.rows == 3


def test_errors_back_off_and_leave_state_alone(tmp_path):
    w, pop, rec, proc = make(tmp_path, error_rate=1.0, retry_backoff="1s")
    now = time.time()
    first = asyncio.run(proc.process(fires_for(pop, [0], [now])))[0]
    second = asyncio.run(proc.process(fires_for(pop, [0], [first.next_fire_at])))[0]
    assert first.effect is False and first.new_state is None
    assert first.next_fire_at - now == pytest.approx(1.0, abs=0.05)
    assert second.next_fire_at - time.time() == pytest.approx(2.0, abs=0.05)  # doubled


def test_missed_fires_are_armed_times_never_received(tmp_path):
    w, pop, rec, proc = make(tmp_path)
    now = time.time()
    proc.note_armed(np.array([0, 1, 2]), np.array([now - 10, now - 10, now + 100]), now - 20)
    asyncio.run(proc.process(fires_for(pop, [0], [round(now - 10, 6)])))
    assert proc.outstanding(now).tolist() == [1]  # 0 fired, 2 not due yet
    missed = proc.missed_table(now, now - 100)
    assert missed.num_rows == 1 and missed.column("fired_at").null_count == 1


def write_run(tmp_path, rows, window, workload=None):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    rundir.write_json(run_dir / rundir.CONFIG, {"scheduler": "x", "workload": workload or {"name": "w", "rate_per_s": 2.0},
                                               "window": window})
    import pyarrow as pa

    cols = {name: [r[i] for r in rows] for i, name in enumerate(rundir.FIRES_SCHEMA.names)}
    pq.write_table(pa.table(cols, schema=rundir.FIRES_SCHEMA), run_dir / rundir.FIRES)
    return run_dir


def test_summary_counts_duplicates_missed_and_the_window(tmp_path):
    W = {"arm_start": 0.0, "measure_start": 10.0, "measure_end": 20.0, "grace_s": 2.0}
    rows = [
        # timer, tenant, type, due, armed, fired, lag, attempt, worker, batch, effect, warmup
        ("a", "t", "poll", 1.0, 0.0, 1.1, 0.1, 1, "w", 0, True, True),  # warm-up
        ("a", "t", "poll", 11.0, 1.1, 11.2, 0.2, 1, "w", 1, True, False),
        ("a", "t", "poll", 11.0, 1.1, 11.4, 0.4, 2, "w", 2, True, False),  # duplicate fire and effect
        ("b", "t", "poll", 12.0, 0.0, 12.3, 0.3, 1, "w", 1, False, False),
        ("b", "t", "poll", 19.9, 0.0, 20.5, 0.6, 1, "w", 3, False, False),  # after the window
        ("c", "t", "poll", 13.0, 0.0, None, None, 0, "", -1, False, False),  # missed
    ]
    s = rundir.compute_summary(write_run(tmp_path, rows, W))
    assert s["fires"] == 3 and s["measured_s"] == 10.0 and s["warmup_s"] == 10.0
    assert s["achieved_rate"] == pytest.approx(0.3)
    assert (s["missed"], s["duplicate_fires"], s["duplicate_effects"]) == (1, 1, 1)
    assert s["lag_ms"]["max"] == pytest.approx(400.0)
    assert s["dead_tuples"]["table_peak"] is None  # no relations sampled
    assert any("rate not held" in w for w in s["warnings"])
    assert any("missed" in w for w in s["warnings"]) and any("duplicate effects" in w for w in s["warnings"])


def test_recorder_flushes_in_batches_and_fixes_late_effects(tmp_path):
    w, pop, rec, proc = make(tmp_path)
    old = time.time() - 30
    fires = fires_for(pop, [0, 1], [old, old])
    rec.receive(fires, old)  # received long ago: old enough to be written
    asyncio.run(rec.maybe_flush(time.time()))
    assert rec._written == 2 and rec.segments == 1
    rec.committed(fires, [True, False])  # the commit arrives after the rows were written
    rec.close()
    assert rec.late_effects == 1
    # read from the segments (a killed run) and from the compacted file alike
    assert rundir.read_fires(tmp_path).column("effect_delivered").to_pylist() == [True, False]
    rundir.write_json(tmp_path / rundir.CONFIG, {"window": {}})
    rundir.compact(tmp_path)
    t = pq.read_table(tmp_path / "fires.parquet")
    assert t.column("effect_delivered").to_pylist() == [True, False]
    assert not (tmp_path / rundir.SEGMENTS_DIR).exists()


def test_only_closed_segments_are_read_and_young_rows_wait(tmp_path):
    """What a SIGKILL leaves: complete segments (and a half-written one under its .tmp name,
    which no reader takes for a segment); rows younger than FLUSH_AFTER_S are not written yet."""
    from metrics.recorder import FLUSH_AFTER_S

    w, pop, rec, proc = make(tmp_path)
    now = time.time()
    rec.receive(fires_for(pop, [0, 1], [now - 60] * 2), now - 60)
    asyncio.run(rec.maybe_flush(now))
    rec.receive(fires_for(pop, [2], [now - 50]), now - 50)
    asyncio.run(rec.maybe_flush(now))
    rec.receive(fires_for(pop, [3], [now]), now)  # too young: its commit may still come
    asyncio.run(rec.maybe_flush(now + FLUSH_AFTER_S / 2))
    seg = tmp_path / rundir.SEGMENTS_DIR
    assert sorted(p.name for p in seg.iterdir()) == ["fires-run.00000.parquet", "fires-run.00001.parquet"]
    (seg / "fires-run.00002.parquet.tmp").write_bytes(b"PAR1 half a file")  # a writer killed mid-write
    assert rundir.read_fires(tmp_path).column("timer_id").to_pylist() == [pop.ids[0], pop.ids[1], pop.ids[2]]


def test_polls_queue_on_the_bounded_poller_lanes(tmp_path):
    w, pop, rec, proc = make(tmp_path)
    proc.lanes = np.zeros(1)  # one poller: polls run one after another
    finish = proc._poll_latency(5, 100.0)
    assert np.all(np.diff(finish) > 0) and finish[0] > 100.0
    proc.lanes = np.zeros(64)  # more pollers than polls: all start at once
    proc._lane = 0
    finish = proc._poll_latency(5, 200.0)
    assert np.all(finish > 200.0) and np.all(finish < 200.5)
    assert np.all(proc.lanes[:5] == finish)


def test_a_killed_run_is_read_from_its_segments_and_marked_interrupted(tmp_path):
    """No summary.json, nobody holding run.lock: the figures come from the closed segments, the
    window ends at the last fire, missed fires are not judged (None, not 0)."""
    W = {"arm_start": 0.0, "measure_start": 10.0, "measure_end": 100.0, "grace_s": 2.0}
    run_dir = tmp_path / "run"
    seg = run_dir / rundir.SEGMENTS_DIR
    seg.mkdir(parents=True)
    rundir.write_json(run_dir / rundir.CONFIG, {"scheduler": "x", "workload": {"name": "w", "rate_per_s": 1.0},
                                               "window": W})
    import pyarrow as pa

    def rows(*fired):
        cols = {name: [] for name in rundir.FIRES_SCHEMA.names}
        for i, f in enumerate(fired):
            for name, v in zip(rundir.FIRES_SCHEMA.names, (f"t{f}", "t", "poll", f - 0.1, 0.0, f, 0.1, 1, "w0", i,
                                                           False, f < 10.0)):
                cols[name].append(v)
        return pa.table(cols, schema=rundir.FIRES_SCHEMA)

    rundir.write_parquet_atomic(rows(5.0, 11.0, 12.0), rundir.fire_segment(seg, rundir.RUN_LOG, 0))
    rundir.write_parquet_atomic(rows(13.0, 14.0, 20.0), rundir.fire_segment(seg, rundir.RUN_LOG, 1))
    rundir.save_rows_atomic(np.array([4, 99]), rundir.late_effects(seg, rundir.RUN_LOG))  # 99: died with its writer
    rundir.write_samples_segment(seg, 0, {"t": [21.0], "elapsed_s": [21.0], "scope": ["run"],
                                          "metric": ["fires_per_s"], "value": [1.0]})
    assert rundir.run_state(run_dir) == "interrupted"
    fd = rundir.hold_run_lock(run_dir)  # as the live run process does
    try:
        assert rundir.run_state(run_dir) == "running"
    finally:
        rundir.release_run_lock(run_dir, fd)
    assert rundir.run_state(run_dir) == "interrupted"

    assert rundir.read_fires(run_dir).column("effect_delivered").to_pylist() == [False] * 4 + [True, False]
    s = rundir.interrupted_summary(run_dir)
    assert s["complete"] is False and s["incomplete_reason"].startswith("interrupted at T+21 s")
    assert s["fires"] == 5 and s["measured_s"] == pytest.approx(10.0)  # the window ends at the last fire (20)
    assert s["missed"] is None and any("not judged" in w for w in s["warnings"])
    rundir.write_json(run_dir / rundir.SUMMARY, s)
    assert rundir.run_state(run_dir) == "finished"
