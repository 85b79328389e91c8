"""temporal_shards beyond the shared promises: Continue-As-New, the controller, crashes.

Real Postgres and the embedded Temporal dev server; every test uses its own schema, so its own
task queue and workflow ids.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from schedulers.base import Fire, Outcome, Timer, us
from schedulers.temporal_shards import TemporalShardsScheduler
from schedulers.temporal_shards.ring import Ring
from tests.conformance.helpers import RecordingProcessor, Runner, bound_s, wait_until

FAST = dict(TemporalShardsScheduler.conformance_options)


@dataclass
class Rearming:
    """Re-arms each fire ``every_s`` later until an id has fired ``times`` times; records
    (id, due, worker) of every fire."""

    every_s: float
    times: int
    fires: list[tuple[str, float, str]] = field(default_factory=list)
    delivered: dict[tuple[str, float], int] = field(default_factory=dict)

    async def process(self, fires: Sequence[Fire]) -> list[Outcome]:
        now = time.time()
        self.fires.extend((f.timer_id, f.due_at, f.worker) for f in fires)
        seen = [sum(1 for tid, _, _ in self.fires if tid == f.timer_id) for f in fires]
        return [Outcome(next_fire_at=now + self.every_s if n < self.times else None, effect=True) for n in seen]

    def committed(self, fires: Sequence[Fire], delivered: Sequence[bool]) -> None:
        for f, d in zip(fires, delivered):
            if d:
                key = (f.timer_id, us(f.due_at))
                self.delivered[key] = self.delivered.get(key, 0) + 1


async def started(make_ctx, **options) -> TemporalShardsScheduler:
    s = TemporalShardsScheduler(make_ctx(TemporalShardsScheduler), **{**FAST, **options})
    await s.setup()
    return s


async def finish(s: TemporalShardsScheduler, runner: Runner) -> None:
    await runner.stop_all()
    await s.teardown(drop=True)


async def arm_until_continued(
    s: TemporalShardsScheduler, proc: RecordingProcessor, prefix: str, continued: int
) -> list[Timer]:
    """Arm 150 timers in 15 signals (history grows on both sides: signals in, batches out), wait
    for them to fire, then keep arming rounds of 10 until the shard has continued as new
    ``continued`` times (at most 45 more rounds); returns every timer armed.

    How many history events a timer costs depends on how the shard's wakes coalesce: on a busy
    machine a wake finds more timers due, so fewer wakes (and events) carry the same timers, and
    150 timers alone fell short of the Continue-As-New threshold there (history 169 and 192 of a
    200-event threshold)."""
    now = time.time()
    timers = [Timer(f"{prefix}-{i}", now + 0.3 + 0.02 * i) for i in range(150)]
    for i in range(0, len(timers), 10):
        await s.arm(timers[i : i + 10])
    for round_ in range(46):
        ok = await wait_until(lambda timers=timers: proc.ids() >= {t.id for t in timers}, 25)
        assert ok, f"{len({t.id for t in timers} - proc.ids())} timers lost across Continue-As-New"
        if (await s.shard_report())["continue_as_new"] >= continued or round_ == 45:
            return timers
        now = time.time()
        more = [Timer(f"{prefix}-r{round_}-{i}", now + 0.3 + 0.02 * i) for i in range(10)]
        await s.arm(more)
        timers += more
    return timers


async def test_shard_continues_as_new_without_losing_or_repeating_timers(make_ctx):
    # A small history bound forces several Continue-As-New while timers keep arriving as
    # signals and leaving as batches; the heap and the idempotency keys are carried across.
    s = await started(make_ctx, shards=1, history_bound=60, batch=5, max_lag_s=0.2)
    runner = Runner(s)
    try:
        proc = RecordingProcessor()
        runner.start(proc, "w1")
        await arm_until_continued(s, proc, "can", continued=2)
        await asyncio.sleep(0.5)
        counts = {tid: len(proc.of(tid)) for tid in proc.ids()}
        assert all(c == 1 for c in counts.values()), {k: c for k, c in counts.items() if c > 1}
        stats = await s.shard_report()
        assert stats["continue_as_new"] >= 2, stats
        assert 60 <= stats["max_history_at_continue"] < 200, stats
    finally:
        await finish(s, runner)


async def test_controller_grows_the_ring_and_timers_keep_firing(make_ctx):
    # 20 timers fill a shard; 60 long-horizon timers over 2 shards is 150 % utilisation, so the
    # controller grows the ring toward 60 %. It grows to ceil(counted / (0.6 * 20)) and stops once
    # the average is under 80 %: the 60 far timers alone need at least 4 shards (60 / 80 > 0.8 at
    # 3), and counting all 70 asks for at most 6. Where in that band it stops depends on how much
    # a tick saw (shards still reporting their arms, live timers in flight): a first grow to 4 on
    # half-reported counts is a stable 75 %. More than 6 means a timer was counted twice.
    # Overloaded shards forward their long-horizon timers; re-arming timers keep firing across
    # the change.
    period_s, report_s = 0.5, 0.3
    s = await started(
        make_ctx,
        shards=2,
        timer_cap=20,
        controller_period_s=period_s,
        util_report_s=report_s,
        ring_refresh_s=0.2,
        forward_horizon_s=60.0,
    )
    runner = Runner(s)
    try:
        t0 = time.time()
        proc = Rearming(every_s=0.3, times=1_000)
        runner.start(proc, "w1")
        far = [Timer(f"far-{i}", t0 + 3600) for i in range(60)]
        live = [Timer(f"live-{i}", t0 + 0.2) for i in range(10)]
        await s.arm(far)
        await s.arm(live)
        grown_at = None

        async def grown() -> bool:
            nonlocal grown_at
            st = await s.shard_report()
            if st["shards"] > 2 and grown_at is None:
                grown_at = time.time()
            return grown_at is not None

        deadline = time.time() + 10
        while not await grown() and time.time() < deadline:
            await asyncio.sleep(0.2)
        assert grown_at is not None, f"the controller did not grow the ring: {await s.shard_report()}"
        # A tick that read the counts before every shard had reported grows less, and a later
        # tick grows the rest; then a few more ticks (and shard reports) for any overshoot.
        while (await s.shard_report())["shards"] < 4 and time.time() < deadline:
            await asyncio.sleep(0.2)
        await asyncio.sleep(4 * period_s)  # no overshoot shows only as time passing: four more ticks
        stats = await s.shard_report()
        assert 4 <= stats["shards"] <= 6, stats
        # timers keep firing after the change, on their (possibly new) shards
        ok = await wait_until(
            lambda: {tid for tid, due, _ in proc.fires if due > grown_at + 0.5} >= {t.id for t in live}, 10
        )
        assert ok, "re-arming timers stopped firing after the ring grew"
        # long-horizon timers were forwarded to new shards, none lost
        reports: list[dict[str, float]] = []

        async def forwarded() -> bool:  # the new shards report the timers forwarded to them
            reports.append(await s.shard_report())
            return sum(reports[-1].get(f"shard_{i}_timers", 0) for i in range(2, int(reports[-1]["shards"]))) >= 10

        deadline = time.time() + 10 * report_s + bound_s(s)
        while not await forwarded() and time.time() < deadline:
            await asyncio.sleep(report_s / 2)
        stats = reports[-1]
        on_new = sum(stats.get(f"shard_{i}_timers", 0) for i in range(2, int(stats["shards"])))
        assert on_new >= 10, f"no long-horizon timers were forwarded to the new shards: {stats}"
        armed = {t.id for t in await s.export_armed()}
        assert {t.id for t in far} <= armed
        assert not any(tid.startswith("far-") for tid, _, _ in proc.fires), "a long-horizon timer fired early"
        assert all(c == 1 for c in proc.delivered.values())
    finally:
        await finish(s, runner)


async def test_worker_killed_mid_batch_loses_no_timer(make_ctx):
    s = await started(make_ctx, batch=10, lease_s=1.5)
    runner = Runner(s)
    try:
        dead = RecordingProcessor(hold=asyncio.Event())  # never answers
        now = time.time()
        timers = [Timer(f"kill-{i}", now - 0.1 + 0.01 * i) for i in range(40)]
        await s.arm(timers)
        doomed = runner.start(dead, "doomed")
        ok = await wait_until(lambda: len(dead.received) >= 10, 10)
        assert ok, "the doomed worker never got a batch"
        await runner.crash(doomed)
        heir = Rearming(every_s=0.3, times=2)  # fires, re-arms once
        runner.start(heir, "heir")
        ok = await wait_until(lambda: {tid for tid, _, _ in heir.fires} >= {t.id for t in timers}, 15)
        missing = {t.id for t in timers} - {tid for tid, _, _ in heir.fires}
        assert ok, f"{len(missing)} timers were lost with the killed worker, e.g. {sorted(missing)[:3]}"
        # the re-arms made by the heir fire too, and no (timer, due) took effect twice
        await wait_until(lambda: len(heir.fires) >= 2 * len(timers), 10)
        assert len(heir.fires) >= 2 * len(timers)
        assert all(c == 1 for c in heir.delivered.values()), "a redelivered fire took effect twice"
    finally:
        await finish(s, runner)


@dataclass
class CommitThenDie(Rearming):
    """Its first ``committed()`` raises: the activity dies after the commit, before the re-arm."""

    died: bool = False

    def committed(self, fires: Sequence[Fire], delivered: Sequence[bool]) -> None:
        super().committed(fires, delivered)
        if not self.died:
            self.died = True
            raise RuntimeError("worker died between commit and re-arm")


async def test_crash_between_commit_and_rearm_keeps_the_timer(make_ctx):
    s = await started(make_ctx)
    runner = Runner(s)
    try:
        t0 = time.time()
        proc = CommitThenDie(every_s=0.5, times=2)
        runner.start(proc, "w1")
        await s.arm([Timer("ckpt", t0 + 0.1)])
        # the retried activity finds the row committed by its own batch and re-sends the re-arm
        ok = await wait_until(lambda: len({due for _, due, _ in proc.fires}) >= 2, 10)
        assert ok, f"the committed re-arm was lost: fires {proc.fires}"
        assert proc.died
        assert all(c == 1 for c in proc.delivered.values())
    finally:
        await finish(s, runner)


async def test_rearm_after_the_ring_grew_does_not_fire_the_stale_copy(make_ctx):
    s = await started(make_ctx, shards=2, ring_refresh_s=0.0)
    runner = Runner(s)
    try:
        # an id whose home changes when the ring grows from 2 to 4 shards
        tid = next(f"mover-{i}" for i in range(1000) if Ring(2).home(f"mover-{i}") != Ring(4).home(f"mover-{i}"))
        proc = RecordingProcessor()
        runner.start(proc, "w1")
        t0 = time.time()
        await s.arm([Timer(tid, t0 + 1.0)])
        async with s.pool.connection() as conn:
            await conn.execute(s.q["ring_grow"], {"shards": 4})
        await s.arm([Timer(tid, t0 + 2.0)])  # lands on another shard; the old copy goes stale
        ok = await wait_until(lambda: proc.of(tid), 6)
        assert ok, "the moved timer never fired"
        await asyncio.sleep(0.5)
        dues = sorted(round(r.due_at - t0, 3) for r in proc.of(tid))
        assert dues == [2.0], f"fired for {dues}; only the latest fire time may fire"
    finally:
        await finish(s, runner)


async def test_shard_continues_as_new_when_the_server_suggests_it(tmp_path, pg_dsn, schema):
    # A second dev server whose history limit suggests Continue-As-New at 200 events; the
    # scheduler's own bound is out of reach, so only the SDK's suggestion can trigger it.
    from harness.stack import TemporalDev, free_port
    from schedulers.base import StoreContext

    dev = TemporalDev(
        home=tmp_path, name="temporal-can", dynamic_config={"limit.historyCount.suggestContinueAsNew": 200}
    )
    address, _ = await asyncio.to_thread(dev.start, free_port())  # its readiness probe runs its own loop
    try:
        ctx = StoreContext(dsn=pg_dsn, schema=schema, temporal_address=address, state_bytes=64)
        s = TemporalShardsScheduler(ctx, **{**FAST, "shards": 1, "batch": 5, "max_lag_s": 0.2, "history_bound": 10**9})
        await s.setup()
        runner = Runner(s)
        try:
            proc = RecordingProcessor()
            runner.start(proc, "w1")
            timers = await arm_until_continued(s, proc, "sug", continued=1)
            await asyncio.sleep(0.5)
            assert all(len(proc.of(t.id)) == 1 for t in timers), "a timer fired twice across Continue-As-New"
            stats = await s.shard_report()
            assert stats["continue_as_new"] >= 1, stats
            assert 200 <= stats["max_history_at_continue"] < 400, stats
        finally:
            await finish(s, runner)
    finally:
        await asyncio.to_thread(dev.stop)


async def test_a_committed_timer_whose_rearm_is_held_still_counts_as_armed(make_ctx):
    """Between a batch's commit and its re-arm signal (held up to ``rearm_coalesce_s`` to share a
    signal with other batches) no shard holds the timer's new version and no lease is live; the
    batch still answers for it, so a reconcile must not read it as missing meanwhile."""
    s = await started(make_ctx, rearm_coalesce_s=3.0, lease_s=10.0)
    runner = Runner(s)
    try:
        proc = Rearming(every_s=600.0, times=2)
        runner.start(proc, "w1")
        timers = [Timer(f"held-{i}", time.time()) for i in range(20)]
        await s.arm(timers)
        ids = {t.id for t in timers}
        assert await wait_until(lambda: {tid for tid, _ in proc.delivered} >= ids, 15), "the timers did not fire"
        # committed; their re-arms wait up to 3 s for company
        assert ids <= {t.id for t in await s.export_armed()}
        await asyncio.sleep(3.5)  # sent: the shards hold the new versions
        assert ids <= {t.id for t in await s.export_armed()}
    finally:
        await finish(s, runner)
