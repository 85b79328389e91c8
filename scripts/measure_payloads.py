"""Payload conversion cost: a batch of timers encoded and decoded by the SDK's default converter
and by the Temporal designs' own (``schedulers.temporal.DATA_CONVERTER``).

    .venv/bin/python scripts/measure_payloads.py --timers 800

Encodes a ``BatchInput`` of ``--timers`` timers (the shape a shard hands a batch poller) and
decodes it back, ``--repeat`` times each, and prints the median milliseconds per encode and per
decode for both converters and whether their bytes are equal. A last line decodes into the same
fields with the timers typed ``list[list]``, as they were before: the SDK then converts every
timer in Python. Pure Python, no server.

Not a test: one machine, timings only.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time

from temporalio.converter import DataConverter

from schedulers.temporal import DATA_CONVERTER
from schedulers.temporal_shards.workflows import BatchInput


def batch(n: int) -> BatchInput:
    now = time.time()
    timers = [[f"trigger-{i:07d}", now + i / 7, i % 5, now - 60, "poll", f"tenant-{i % 50}", 0] for i in range(n)]
    return BatchInput(shard=0, type="poll", timers=timers, lease_s=30.0, retry_initial_s=1.0, closed_by="full")


def median_ms(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--timers", type=int, default=800, help="timers in the batch (default 800)")
    ap.add_argument("--repeat", type=int, default=50, help="runs of each measure (default 50)")
    args = ap.parse_args()
    value = batch(args.timers)
    encoded = {}
    for name, conv in (("sdk default", DataConverter.default), ("timerbench", DATA_CONVERTER)):
        pc = conv.payload_converter
        payloads = pc.to_payloads([value])
        encoded[name] = [p.SerializeToString() for p in payloads]
        enc = median_ms(lambda pc=pc: pc.to_payloads([value]), args.repeat)
        dec = median_ms(lambda pc=pc, p=payloads: pc.from_payloads(p, [BatchInput]), args.repeat)
        print(f"{name:12s} {args.timers} timers: encode {enc:.2f} ms, decode {dec:.2f} ms")
    print("same bytes:", encoded["sdk default"] == encoded["timerbench"])
    typed = dataclasses.make_dataclass(
        "TypedBatchInput",
        [(f.name, list[list] if f.name == "timers" else f.type, f) for f in dataclasses.fields(BatchInput)],
    )
    p = DATA_CONVERTER.payload_converter
    payloads = p.to_payloads([value])
    dec = median_ms(lambda: p.from_payloads(payloads, [typed]), args.repeat)
    print(f"timers typed list[list]: decode {dec:.2f} ms")


if __name__ == "__main__":
    main()
