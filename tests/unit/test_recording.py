"""The processor, the recorder, HDR recording and the run-directory summary, without a scheduler."""

import asyncio
import time

import numpy as np
import pyarrow.parquet as pq
import pytest

from loadgen import workload as wl
from loadgen.population import build
from loadgen.processor import PollingProcessor
from metrics import accounting, rundir
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
    w = wl.from_mapping(
        {
            "rate": "50/s",
            "interval": "10s..20s",
            "warmup": "0s",
            "duration": "60s",
            "provider_latency": {"median": "1ms", "p99": "2ms"},
            **fields,
        }
    ).resolved()
    pop = build(w)
    now = time.time()
    rec = FireRecorder(tmp_path / rundir.SEGMENTS_DIR, now - 1, now + 60)
    return w, pop, rec, PollingProcessor(w, pop, rec)


def fires_for(pop, idx, due, attempt=1):
    return [Fire(pop.ids[i], pop.tenants[i], "poll", d, d - 1, attempt, "w0", 0) for i, d in zip(idx, due)]


def test_fixed_cadence_rearms_at_previous_due_plus_interval(tmp_path):
    w, pop, rec, proc = make(tmp_path, error_rate=0.0, new_event_rate=1.0, state_size=64)
    now = time.time()
    due = np.round(now - 0.5 - np.arange(3), 6)  # 0.5 to 2.5 s late: less than one interval
    proc.note_armed(np.arange(3), due, now - 30)
    outs = asyncio.run(proc.process(fires_for(pop, [0, 1, 2], due)))
    for i, o in enumerate(outs):
        assert o.effect is True and len(o.new_state) == 64
        assert o.next_fire_at == pytest.approx(due[i] + pop.interval_s[i], abs=2e-6)  # not when the poll ended
    assert rec.rows == 3 and len(proc.skipped_due) == 0


def test_after_poll_cadence_rearms_an_interval_after_the_poll(tmp_path):
    w, pop, rec, proc = make(tmp_path, error_rate=0.0, cadence="after-poll")
    now = time.time()
    outs = asyncio.run(proc.process(fires_for(pop, [0, 1, 2], [now - 0.5] * 3)))
    done = time.time()
    for i, o in enumerate(outs):
        assert now + pop.interval_s[i] - 0.01 <= o.next_fire_at <= done + pop.interval_s[i] + 0.01


def test_a_fire_more_than_one_interval_late_fires_once_and_realigns(tmp_path):
    w, pop, rec, proc = make(tmp_path, error_rate=0.0)
    iv = pop.interval_s[0]
    now = time.time()
    due = round(now - 2.5 * iv, 6)  # 2.5 intervals late: the grid times due+iv and due+2iv went by
    proc.note_armed(np.array([0]), np.array([due]), now - 100)
    (out,) = asyncio.run(proc.process(fires_for(pop, [0], [due])))
    assert out.next_fire_at == pytest.approx(due + 3 * iv, abs=2e-6)  # the first grid time after now
    assert proc.skipped_due == pytest.approx([due + iv, due + 2 * iv])


def test_errors_back_off_and_a_retry_keeps_its_grid(tmp_path):
    w, pop, rec, proc = make(tmp_path, error_rate=1.0, retry_backoff="1s")
    now = time.time()
    due = round(now, 6)
    proc.note_armed(np.array([0]), np.array([due]), now - 10)
    first = asyncio.run(proc.process(fires_for(pop, [0], [due])))[0]
    second = asyncio.run(proc.process(fires_for(pop, [0], [first.next_fire_at])))[0]
    assert first.effect is False and first.new_state is None
    assert first.next_fire_at - now == pytest.approx(1.0, abs=0.05)
    assert second.next_fire_at - time.time() == pytest.approx(2.0, abs=0.05)  # doubled
    proc.w.error_rate = 0.0  # the provider recovers: the next fire is back on the grid
    third = asyncio.run(proc.process(fires_for(pop, [0], [second.next_fire_at])))[0]
    assert third.next_fire_at == pytest.approx(due + pop.interval_s[0], abs=2e-6)


def test_a_stale_redelivery_does_not_move_the_bookkeeping_back(tmp_path):
    w, pop, rec, proc = make(tmp_path, error_rate=0.0)
    now = time.time()
    d1 = round(now - 100, 6)
    proc.note_armed(np.array([0]), np.array([d1]), now - 200)
    (o1,) = asyncio.run(proc.process(fires_for(pop, [0], [d1])))
    (o2,) = asyncio.run(proc.process(fires_for(pop, [0], [o1.next_fire_at])))
    armed, received = proc.armed_due[0], proc.received_due[0]
    asyncio.run(proc.process(fires_for(pop, [0], [d1], attempt=2)))  # an old redelivery arrives late
    assert proc.armed_due[0] == armed == pytest.approx(o2.next_fire_at)
    assert proc.received_due[0] == received == pytest.approx(o1.next_fire_at)


def test_undelivered_fires_are_pending_when_the_backend_holds_them_and_lost_when_not(tmp_path):
    w, pop, rec, proc = make(tmp_path)
    now = time.time()
    proc.note_armed(np.arange(5), np.array([now - 10, now - 10, now - 10, now - 10, now + 100]), now - 20)
    asyncio.run(proc.process(fires_for(pop, [0], [round(now - 10, 6)])))
    assert proc.outstanding(now).tolist() == [1, 2, 3]  # 0 fired, 4 not due yet
    held = {
        pop.ids[1]: round(now - 10, 6),  # held at its due: pending
        pop.ids[2]: round(now - 12, 6),  # held at an earlier due (an uncommitted re-arm): pending
        pop.ids[3]: round(now + 50, 6),
    }  # held later: it moved past a fire it never delivered: lost
    t = proc.undelivered_table(now, now - 100, held)
    assert t.num_rows == 3 and t.column("fired_at").null_count == 3
    assert t.column("held_at_end").to_pylist() == [True, True, False]
    del held[pop.ids[1]]  # not held at all: lost
    assert proc.undelivered_table(now, now - 100, held).column("held_at_end").to_pylist() == [False, True, False]
    assert proc.undelivered_table(now, now - 100, None).column("held_at_end").null_count == 3  # not asked


def test_fires_received_after_arming_stops_are_finished(tmp_path):
    w, pop, rec, proc = make(tmp_path)
    now = time.time()
    proc.note_armed(np.array([0]), np.array([round(now - 1, 6)]), now - 10)
    proc.rearm_until = now - 0.1  # the drain began
    (out,) = asyncio.run(proc.process(fires_for(pop, [0], [round(now - 1, 6)])))
    assert out.next_fire_at is None and np.isnan(proc.armed_due[0])
    assert proc.outstanding(time.time() + 1000).size == 0


def test_external_effects_are_noted_as_each_poll_finishes_even_in_a_killed_batch(tmp_path):
    w, pop, rec, proc = make(tmp_path, error_rate=0.0, new_event_rate=1.0)
    # two polls of the batch have finished, two take another minute (the batch waits for its slowest)
    proc._poll_latency = lambda n, now: np.array([now - 0.01, now - 0.01, now + 60.0, now + 60.0])
    fires = fires_for(pop, [0, 1, 2, 3], [time.time() - 1] * 4)

    async def killed() -> None:
        task = asyncio.create_task(proc.process(fires))
        while rec.rows < 4:  # received: the batch is now in its polls
            await asyncio.sleep(0)
        await asyncio.sleep(0)
        task.cancel()  # a crash mid-batch
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(killed())
    rec.close()
    flags = rundir.read_fires(tmp_path).column("external_effect").to_pylist()
    assert flags == [True, True, False, False]  # the finished polls' webhooks went out; the others never
    assert proc.external_effects == 2


def test_recorder_flushes_in_batches_and_fixes_late_effects(tmp_path):
    w, pop, rec, proc = make(tmp_path)
    old = time.time() - 30
    fires = fires_for(pop, [0, 1], [old, old])
    rec.receive(fires, old)  # received long ago: old enough to be written
    asyncio.run(rec.maybe_flush(time.time()))
    assert rec._written == 2 and rec.segments == 1
    rec.external(fires[1:])  # a webhook sent after its row was written (a slow poll)
    rec.committed(fires, [True, False])  # the commit arrives after the rows were written
    rec.close()
    assert rec.late_effects == 1
    # read from the segments (a killed run) and from the compacted file alike
    assert rundir.read_fires(tmp_path).column("effect_delivered").to_pylist() == [True, False]
    assert rundir.read_fires(tmp_path).column("external_effect").to_pylist() == [False, True]
    rundir.write_json(tmp_path / rundir.CONFIG, {"window": {}})
    rundir.compact(tmp_path)
    t = pq.read_table(tmp_path / "fires.parquet")
    assert t.column("effect_delivered").to_pylist() == [True, False]
    assert t.column("external_effect").to_pylist() == [False, True]
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
    window ends at the last fire, pending and lost fires are not judged (None, not 0)."""
    W = {"arm_start": 0.0, "measure_start": 10.0, "measure_end": 100.0, "drain_limit_s": 180.0}
    run_dir = tmp_path / "run"
    seg = run_dir / rundir.SEGMENTS_DIR
    seg.mkdir(parents=True)
    rundir.write_json(
        run_dir / rundir.CONFIG, {"scheduler": "x", "workload": {"name": "w", "rate_per_s": 1.0}, "window": W}
    )
    import pyarrow as pa

    def rows(*fired):
        cols = {name: [] for name in rundir.FIRES_SCHEMA.names}
        for i, f in enumerate(fired):
            for name, v in zip(
                rundir.FIRES_SCHEMA.names,
                (f"t{f}", "t", "poll", f - 0.1, 0.0, f, 0.1, 1, "w0", i, False, f < 10.0, False, None),
            ):
                cols[name].append(v)
        return pa.table(cols, schema=rundir.FIRES_SCHEMA)

    rundir.write_parquet_atomic(rows(5.0, 11.0, 12.0), rundir.fire_segment(seg, rundir.RUN_LOG, 0))
    rundir.write_parquet_atomic(rows(13.0, 14.0, 20.0), rundir.fire_segment(seg, rundir.RUN_LOG, 1))
    rundir.save_rows_atomic(np.array([4, 99]), rundir.late_effects(seg, rundir.RUN_LOG))  # 99: died with its writer
    rundir.write_samples_segment(
        seg, 0, {"t": [21.0], "elapsed_s": [21.0], "scope": ["run"], "metric": ["fires_per_s"], "value": [1.0]}
    )
    assert rundir.run_state(run_dir) == "interrupted"
    fd = rundir.hold_run_lock(run_dir)  # as the live run process does
    try:
        assert rundir.run_state(run_dir) == "running"
    finally:
        rundir.release_run_lock(run_dir, fd)
    assert rundir.run_state(run_dir) == "interrupted"

    assert rundir.read_fires(run_dir).column("effect_delivered").to_pylist() == [False] * 4 + [True, False]
    s = accounting.interrupted_summary(run_dir)
    assert s["complete"] is False and s["incomplete_reason"].startswith("interrupted at T+21 s")
    assert s["fires"] == 5 and s["measured_s"] == pytest.approx(10.0)  # the window ends at the last fire (20)
    assert s["outcomes"]["lost"] is None and s["outcomes"]["pending"] is None and s["correct"] is None
    assert any("not judged" in w for w in s["warnings"])
    assert s["lag_ms"]["p50"] == pytest.approx(100.0)  # over the delivered fires, as the warning says
    rundir.write_json(run_dir / rundir.SUMMARY, s)
    assert rundir.run_state(run_dir) == "finished"
