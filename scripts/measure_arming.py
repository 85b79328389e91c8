"""Arming throughput: how long ``arm()`` takes to arm N timers into an empty store.

    .venv/bin/python scripts/measure_arming.py --timers 1000000 --scheduler pg_leased
    .venv/bin/python scripts/measure_arming.py --timers 100000 --scheduler pg_leased,pg_queue

For each design: a fresh schema on the embedded stack (started on demand, as ``bench`` does;
``--dsn`` / ``TIMERBENCH_DSN`` for another server), ``setup()``, then ``--timers`` long-horizon
timers (fire times 30-60 days ahead, ``--tenants`` tenants, ``--state-bytes`` of poll state each:
256 B by default, the long-horizon payload ``bench scale`` arms) armed in calls of
``--call-size`` timers (default: all in one call), in random id order. Only the ``arm()`` calls
are timed; setup and the schema's drop are not. ``--option NAME=VALUE`` sets a design's option
(``bulk_arm_min=1000000000`` measures pg_leased's and pg_queue's per-call upsert). Prints one
line per design: timers, seconds, timers/s, and the 1-minute load average sampled each second
while arming (mean and max), since the machine is shared and the figure means little without it.

Not a test: one machine, timings only. Designs with ``needs_temporal`` get the embedded Temporal.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import time
import uuid

from harness import stack as stack_mod
from schedulers.base import REGISTRY, StoreContext, Timer, convert_option, create, scheduler_class

DAY_S = 86_400.0


def timers(n: int, tenants: int, seed: int) -> list[Timer]:
    rng = random.Random(seed)
    now = time.time()
    out = [
        Timer(f"arm-{i:08d}", now + rng.uniform(30 * DAY_S, 60 * DAY_S), "poll", f"t{rng.randrange(tenants)}")
        for i in range(n)
    ]
    rng.shuffle(out)  # callers arm in no particular id order; arm() sorts for its row locks
    return out


async def sample_load(samples: list[float], stop: asyncio.Event) -> None:
    while not stop.is_set():
        samples.append(os.getloadavg()[0])
        try:
            await asyncio.wait_for(stop.wait(), 1.0)
        except TimeoutError:
            pass


async def measure(name: str, args: argparse.Namespace, stack: stack_mod.Stack) -> dict[str, float]:
    schema = f"arming_{name}_{uuid.uuid4().hex[:8]}"
    ctx = StoreContext(
        dsn=stack.dsn, schema=schema, temporal_address=stack.temporal_address, state_bytes=args.state_bytes
    )
    cls = scheduler_class(name)
    options = {}
    for item in args.option:
        key, _, value = item.partition("=")
        if key in cls.default_options:  # options a design does not have are left to the others
            options[key] = convert_option(cls.default_options[key], value)
    sched = create(name, ctx, **options)
    batch = timers(args.timers, args.tenants, args.seed)
    await sched.setup()
    samples: list[float] = []
    stop = asyncio.Event()
    sampler = asyncio.create_task(sample_load(samples, stop))
    try:
        started = time.perf_counter()
        for i in range(0, len(batch), args.call_size):
            await sched.arm(batch[i : i + args.call_size])
        seconds = time.perf_counter() - started
    finally:
        stop.set()
        await sampler
        await sched.teardown(drop=not args.keep)
    return {
        "timers": float(args.timers),
        "seconds": seconds,
        "timers_per_s": args.timers / seconds,
        "load_mean": sum(samples) / len(samples),
        "load_max": max(samples),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--timers", type=int, default=100_000)
    ap.add_argument("--scheduler", default="pg_leased", help="a design, or several separated by commas")
    ap.add_argument("--call-size", type=int, default=0, help="timers per arm() call (0: all in one call)")
    ap.add_argument("--state-bytes", type=int, default=256, help="poll state per timer")
    ap.add_argument("--tenants", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--dsn", default=None, help="default: the embedded Postgres")
    ap.add_argument("--keep", action="store_true", help="keep the schema (default: dropped afterwards)")
    ap.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a scheduler option, repeatable (e.g. bulk_arm_min=1000000000: the per-call path)",
    )
    args = ap.parse_args()
    names = [n.strip() for n in args.scheduler.split(",") if n.strip()]
    unknown = [n for n in names if n not in REGISTRY]
    if unknown:
        ap.error(f"unknown scheduler {unknown[0]!r}; choose from {', '.join(sorted(REGISTRY))}")
    args.call_size = args.call_size or args.timers
    need_temporal = any(getattr(scheduler_class(n), "needs_temporal", False) for n in names)
    stack = stack_mod.resolve(args.dsn, None, need_temporal, say=lambda s: print(s, file=sys.stderr))
    print("scheduler\ttimers\tcall_size\tseconds\ttimers_per_s\tload1_mean\tload1_max", flush=True)
    for name in names:
        r = asyncio.run(measure(name, args, stack))
        print(
            f"{name}\t{int(r['timers'])}\t{args.call_size}\t{r['seconds']:.1f}\t{r['timers_per_s']:,.0f}"
            f"\t{r['load_mean']:.2f}\t{r['load_max']:.2f}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
