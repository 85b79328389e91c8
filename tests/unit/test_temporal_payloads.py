"""The Temporal designs' payload converter writes the same bytes as the SDK's default and reads
them back to equal values (pure logic: no server). Payloads already stored by the default (a
shard's Continue-As-New input, a batch poller's input) must read the same after an upgrade."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest
from temporalio.converter import DataConverter

from schedulers.temporal import DATA_CONVERTER
from schedulers.temporal_shards.workflows import (
    ArmSignal,
    BatchInput,
    ForwardInput,
    ShardConfig,
    ShardInput,
    UtilInput,
)

TIMERS = [
    [f"t-{i}", 1_796_000_000.123456 + i, i % 3, 1_795_990_000.5, "poll", f"tenant-{i % 7}", i % 2] for i in range(50)
]
CONFIG = ShardConfig("tb-x", "tb-x", 800, 10.0, per_type={"callback": [50.0, 60.0]})


@dataclasses.dataclass
class Nested:
    at: datetime
    pair: tuple[int, str]
    inner: ShardConfig
    by_name: dict[str, list[int]]


VALUES = [
    ShardInput(3, CONFIG, TIMERS, ["k1", "k2"], continued=2),
    BatchInput(1, "poll", TIMERS, 30.0, 0.5, "max_lag"),
    ArmSignal("key/0", TIMERS),
    ForwardInput(2, TIMERS[:5], grow=True),
    UtilInput(0, 12, 0.4, 900, payload_bytes=1234),
    Nested(datetime(2026, 12, 3, 12, 0, tzinfo=UTC), (1, "a"), CONFIG, {"x": [1, 2]}),
]


@pytest.mark.parametrize("value", VALUES, ids=lambda v: type(v).__name__)
def test_payloads_are_the_sdk_defaults_bytes_and_read_back_equal(value):
    ours = DATA_CONVERTER.payload_converter.to_payloads([value])
    default = DataConverter.default.payload_converter.to_payloads([value])
    assert [p.SerializeToString() for p in ours] == [p.SerializeToString() for p in default]
    if isinstance(value, Nested):
        return  # a datetime is written as text; reading it back is the caller's business
    back = DATA_CONVERTER.payload_converter.from_payloads(ours, [type(value)])[0]
    assert back == value
    assert DataConverter.default.payload_converter.from_payloads(default, [type(value)])[0] == back
