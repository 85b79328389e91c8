"""temporal_shards' initial shard count from the population, the run telling a backend its size,
the batch-size counters every backend may expose, and the payload chunking of signals (pure
logic: no server)."""

from __future__ import annotations

import json

import pytest

from schedulers.base import EXPECTED_TIMERS, BatchSizes, StoreContext, with_expected_timers
from schedulers.temporal_shards import SHARDS_WHEN_UNKNOWN, TemporalShardsScheduler, initial_shards
from schedulers.temporal_shards.workflows import (
    PayloadSize,
    ShardConfig,
    ShardInput,
    chunks,
    encoded_size,
    timer_bytes,
    timers_bytes,
)


def test_production_population_starts_within_the_cap():
    # the Composio article: ~48,000 triggers, 5,000 timers a shard, the controller targets 60 %
    n = initial_shards(0, 48_100, 5_000, 0.6)
    assert n == 17
    assert 48_100 / n <= 0.6 * 5_000
    # the bounded-load ring never puts more than (1 + eps) x the average on one shard: under the cap
    assert 1.25 * 48_100 / n < 5_000


def test_given_shards_win_and_unknown_population_keeps_the_old_default():
    assert initial_shards(4, 48_100, 5_000, 0.6) == 4  # today's scale-out-in-progress start, on request
    assert initial_shards(0, 0, 5_000, 0.6) == SHARDS_WHEN_UNKNOWN
    assert initial_shards(0, 10, 5_000, 0.6) == 1


def test_resolved_options_record_the_shard_count_the_run_starts_with():
    s = TemporalShardsScheduler(StoreContext(), expected_timers=48_100)
    assert s.options["shards"] == 17 and s.options[EXPECTED_TIMERS] == 48_100
    # the resolved options, given again (to a node, or a rerun), start the same ring
    assert TemporalShardsScheduler(StoreContext(), **s.options).options["shards"] == 17


def test_the_run_fills_expected_timers_only_where_declared_and_unknown():
    declared = {EXPECTED_TIMERS: 0, "batch": 800}
    assert with_expected_timers(declared, {EXPECTED_TIMERS: 0, "batch": 800}, 48_100)[EXPECTED_TIMERS] == 48_100
    assert with_expected_timers(declared, {EXPECTED_TIMERS: 1_000}, 48_100)[EXPECTED_TIMERS] == 1_000
    assert with_expected_timers({"batch": 800}, {"batch": 800}, 48_100) == {"batch": 800}


@pytest.mark.parametrize("bad", [{"payload_limit_bytes": 0}, {"split_payload_frac": 0.0}, {"split_payload_frac": 1.5}])
def test_payload_options_out_of_range_are_refused(bad):
    with pytest.raises(ValueError, match="payload_limit_bytes must be > 0 and split_payload_frac"):
        TemporalShardsScheduler(StoreContext(), **bad)


def test_batch_sizes_count_bins_and_reasons():
    b = BatchSizes()
    for size, why in ((1, "max_lag"), (25, "max_lag"), (26, "max_lag"), (230, "max_lag"), (800, "full")):
        b.add(size, why)
    g = b.gauges()
    assert g["batches"] == 5 and g["batched_timers"] == 1 + 25 + 26 + 230 + 800 and g["batches_bin_width"] == 25
    assert {k: v for k, v in g.items() if k.startswith("batch_size_bin_")} == {
        "batch_size_bin_25": 2.0,
        "batch_size_bin_50": 1.0,
        "batch_size_bin_250": 1.0,
        "batch_size_bin_800": 1.0,
    }
    assert g["batches_closed_max_lag"] == 4 and g["batches_closed_full"] == 1


def test_signal_chunks_stay_under_their_byte_budget():
    timers = [[f"id-{i:05d}", 1.7e9 + i / 7, i, 1.7e9, "poll", f"tenant-{i % 9}", 0] for i in range(1000)]
    pieces = chunks(timers, 4_000)
    assert [t for p in pieces for t in p] == timers  # nothing lost, order kept
    for p in pieces:
        assert len(json.dumps(p, separators=(",", ":"))) <= 4_000
    # a list of n timers: its brackets plus each timer and its separator, less the last separator
    assert sum(timer_bytes(t) for t in timers) + 1 == len(json.dumps(timers, separators=(",", ":")))
    assert timers_bytes(timers) == sum(timer_bytes(t) for t in timers) and timers_bytes([]) == 0


def test_a_list_that_fits_is_one_piece_and_one_byte_more_cuts_it():
    timers = [[f"id-{i:05d}", 1.7e9 + i / 7, i, 1.7e9, "poll", f"tenant-{i % 9}", 0] for i in range(800)]
    whole = len(json.dumps(timers, separators=(",", ":")))
    assert chunks(timers, whole) == [timers]
    cut = chunks(timers, whole - 1)
    assert len(cut) == 2 and [t for p in cut for t in p] == timers
    assert all(len(json.dumps(p, separators=(",", ":"))) <= whole - 1 for p in cut)
    assert chunks([], 100) == []


def test_the_report_reads_the_gauge_names_the_backends_write():
    from metrics import rundir
    from schedulers import base

    assert (rundir.BATCH_SIZE_BIN_GAUGE, rundir.BATCHES_CLOSED_GAUGE, rundir.BATCH_BIN_WIDTH_GAUGE) == (
        base.BATCH_SIZE_BIN_GAUGE,
        base.BATCHES_CLOSED_GAUGE,
        base.BATCH_BIN_WIDTH_GAUGE,
    )


@pytest.mark.parametrize("timers", [0, 1, 3_000])
def test_the_payload_measure_is_the_converters_own_size_of_the_shard_input(timers):
    # The shard measures its Continue-As-New input through a mapping, not the dataclass: the
    # bytes must be the ones the converter sends for the dataclass itself (what the server checks).
    from temporalio.converter import DataConverter

    converter = DataConverter.default.payload_converter
    cfg = ShardConfig("ts-run", "queue", 800, 10.0, per_type={"poll": [800.0, 10.0]})
    entries = [
        [f"trigger-{i:06d}", 1.8e9 + i * 0.37, i % 5, 1.7e9, "poll", f"tenant-{i % 7}", i % 3] for i in range(timers)
    ]
    inp = ShardInput(4, cfg, entries, [f"key-{i}" for i in range(timers // 100)], continued=2)
    expected = sum(p.ByteSize() for p in converter.to_payloads([inp]))
    assert encoded_size(inp, converter) == expected


@pytest.mark.parametrize("timers", [0, 1, 2, 3_000, 40_000])
def test_the_running_payload_size_is_the_converters_size_of_the_shard_input(timers):
    # A shard keeps its Continue-As-New payload's size as sums of its timers' and keys' bytes
    # over one encoding of the rest; the sums must give the converter's own size, across the
    # data length's varint boundaries (40,000 timers pass 2 MiB).
    from temporalio.converter import DataConverter

    converter = DataConverter.default.payload_converter
    cfg = ShardConfig("ts-run", "queue", 800, 10.0, per_type={"poll": [800.0, 10.0]})
    entries = [
        [f"trigger-{i:06d}", 1.8e9 + i * 0.37, i % 5, 1.7e9, "poll", f"tenant-{i % 7}", i % 3] for i in range(timers)
    ]
    keys = [f"key-{i}" for i in range(timers // 100)]
    size = PayloadSize(4, cfg, 2, converter)
    size.timers, size.keys = timers_bytes(entries), timers_bytes(keys)
    assert size.total() == encoded_size(ShardInput(4, cfg, entries, keys, continued=2), converter)
    # timers leaving: take their bytes away again
    size.timers -= timers_bytes(entries[: timers // 2])
    assert size.total() == encoded_size(ShardInput(4, cfg, entries[timers // 2 :], keys, continued=2), converter)
