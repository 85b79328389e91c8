"""pg_leased beyond the shared conformance suite: ownership, fairness at a 10,000-row backlog,
leases against a really killed process and a slow heartbeating one, and HOT updates from the
statistics views. Real Postgres throughout (the ``pg_dsn`` and ``schema`` fixtures)."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import pytest

from schedulers.base import Fire, Outcome, StoreContext, Timer
from schedulers.pg_leased import PgLeasedScheduler
from tests.conformance.helpers import HalfThenHangs, RecordingProcessor, Runner, wait_until

REPO = Path(__file__).resolve().parents[2]
FAST = {"tick_s": 0.05, "lease_s": 1.0, "sweep_s": 0.2, "batch": 50, "max_per_tenant": 10}


async def make(pg_dsn: str, schema: str, state_bytes: int = 64, **options) -> PgLeasedScheduler:
    s = PgLeasedScheduler(StoreContext(dsn=pg_dsn, schema=schema, state_bytes=state_bytes), **{**FAST, **options})
    await s.setup()
    return s


@dataclass
class OwnershipProcessor:
    """Re-arms every timer at once and records [start, end] of each process() per timer id.

    The true hold of a row runs from its claim's commit to its re-arm's commit and contains the
    recorded interval, so two recorded intervals of one id that overlap prove a double hold.
    """

    hold_s: float = 0.01
    intervals: dict[str, list[tuple[float, float, str]]] = field(default_factory=dict)
    fires: int = 0

    async def process(self, fires: Sequence[Fire]) -> list[Outcome]:
        start = time.monotonic()
        await asyncio.sleep(self.hold_s)
        end = time.monotonic()
        for f in fires:
            self.intervals.setdefault(f.timer_id, []).append((start, end, f.worker))
        self.fires += len(fires)
        return [Outcome(next_fire_at=time.time(), new_state=None, effect=False) for _ in fires]

    def committed(self, fires: Sequence[Fire], delivered: Sequence[bool]) -> None:
        pass


async def test_two_run_loops_never_hold_the_same_row(pg_dsn, schema):
    a = await make(pg_dsn, schema)
    b = await make(pg_dsn, schema)  # a second "node": its own pool on the same table
    proc = OwnershipProcessor()
    runners = [Runner(a), Runner(b)]
    try:
        await a.arm([Timer(f"own-{i}", None, tenant_id=f"t{i % 5}") for i in range(120)])
        runners[0].start(proc, "a1")
        runners[0].start(proc, "a2")  # two loops on one instance
        runners[1].start(proc, "b1")

        def contended() -> bool:
            workers = {w for ivs in proc.intervals.values() for _, _, w in ivs}
            return proc.fires >= 600 and workers == {"a1", "a2", "b1"}

        # 600 fires of 120 rows over three loops: every row claimed five times on average, the
        # loops racing for the same rows (however long that takes on a loaded machine)
        assert await wait_until(contended, 120.0), (
            f"{proc.fires} fires, loops {[w for ivs in proc.intervals.values() for _, _, w in ivs][:3]}"
        )
    finally:
        for r in runners:
            await r.stop_all()
        await a.teardown(drop=False)
        await b.teardown(drop=True)
    workers = {w for ivs in proc.intervals.values() for _, _, w in ivs}
    assert workers == {"a1", "a2", "b1"}, f"not every loop got work: {workers}"
    overlaps = []
    for tid, ivs in proc.intervals.items():
        ivs.sort()
        for (_s1, e1, w1), (s2, _e2, w2) in zip(ivs, ivs[1:]):
            if s2 < e1:
                overlaps.append((tid, w1, w2, round(e1 - s2, 4)))
    assert not overlaps, f"{len(overlaps)} rows were held by two loops at once, e.g. {overlaps[:3]}"


async def test_small_tenants_all_in_first_batch_behind_10000_row_backlog(pg_dsn, schema):
    # One claim statement at a time: the promise is about what one claim takes. With several in
    # flight (claimers, default 3) another claim, skipping the rows this one locked, may hand
    # over a batch of the big tenant's rows first (seen on a busy machine: a "first batch" of 10).
    s = await make(pg_dsn, schema, state_bytes=16, batch=100, max_per_tenant=10, claimers=1)
    runner = Runner(s)
    try:
        past = time.time() - 60
        big = [Timer(f"big-{i}", past + i * 1e-3, tenant_id="big") for i in range(10_000)]
        # Every small row is due after every big row: a time-ordered claim reaches them last.
        small = [Timer(f"small-{k}-{i}", past + 30, tenant_id=f"small{k}") for k in range(9) for i in range(10)]
        await s.arm(big)
        await s.arm(small)
        proc = RecordingProcessor()
        runner.start(proc, "w1")
        assert await wait_until(lambda: proc.first_claim(), 10.0), "nothing was claimed"
        first = proc.first_claim()
        ids = {r.timer_id for r in first}
        missing = {t.id for t in small} - ids
        assert not missing, f"{len(missing)} of 90 small-tenant rows missing from the first batch of {len(first)}"
        per_tenant = {}
        for r in first:
            per_tenant[r.tenant_id] = per_tenant.get(r.tenant_id, 0) + 1
        assert per_tenant["big"] == 10, f"the big tenant got {per_tenant['big']} rows, cap is 10"
    finally:
        await runner.stop_all()
        await s.teardown(drop=True)


KILLED_OWNER = textwrap.dedent(
    """
    import asyncio, sys, time
    from schedulers.base import Outcome, StoreContext
    from schedulers.pg_leased import PgLeasedScheduler

    class Hang:
        async def process(self, fires):
            print("CLAIMED", time.time(), ",".join(f.timer_id for f in fires), flush=True)
            await asyncio.Event().wait()  # never answers: killed mid-batch

        def committed(self, fires, delivered):
            pass

    async def main():
        s = PgLeasedScheduler(StoreContext(dsn=sys.argv[1], schema=sys.argv[2], state_bytes=64), **eval(sys.argv[3]))
        await s.run({"poll": Hang()}, asyncio.Event(), worker_id="doomed")

    asyncio.run(main())
    """
)


async def test_killed_owner_rows_are_delivered_again_after_the_lease(pg_dsn, schema):
    s = await make(pg_dsn, schema)
    timers = [Timer(f"kill-{i}", time.time() - 1) for i in range(10)]
    await s.arm(timers)
    child = subprocess.Popen(
        [sys.executable, "-c", KILLED_OWNER, pg_dsn, schema, repr(FAST)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    runner = Runner(s)
    try:
        line = await asyncio.wait_for(asyncio.to_thread(child.stdout.readline), 20.0)
        assert line.startswith("CLAIMED"), f"the doomed owner printed {line!r}"
        claimed_at = float(line.split()[1])
        assert set(line.split()[2].split(",")) == {t.id for t in timers}
        os.kill(child.pid, signal.SIGKILL)  # a real crash: no cleanup code runs
        child.wait(10)
        heir = RecordingProcessor()
        runner.start(heir, "heir")
        limit = s.capabilities.redelivery_s + 5.0
        ok = await wait_until(lambda: heir.ids() >= {t.id for t in timers}, limit)
        assert ok, f"{len(heir.ids())} of 10 rows of a killed owner came back within {limit:.1f}s"
        first = min(r.received_at for r in heir.received)
        assert first >= claimed_at + FAST["lease_s"] - 0.1, (
            f"redelivered {first - claimed_at:.2f}s after the claim, before the {FAST['lease_s']}s lease lapsed"
        )
        assert {r.attempt for r in heir.received} == {2}, "a redelivery must count as attempt 2"
        # committed() follows process() after the batch's commit: on a busy machine it lags the receipt
        assert await wait_until(lambda: len(heir.delivered) == 10, 10.0), "the heir's effects were not recorded"
        assert s.recovered >= 10, f"the sweeper counted {s.recovered} recovered rows"
    finally:
        if child.poll() is None:
            child.kill()
        await runner.stop_all()
        await s.teardown(drop=True)


async def test_slow_heartbeating_owner_keeps_its_rows(pg_dsn, schema):
    slow_s = FAST["lease_s"] * 3.5
    s = await make(pg_dsn, schema)
    rival_node = await make(pg_dsn, schema)
    timers = [Timer(f"slow-{i}", time.time() - 1) for i in range(10)]
    await s.arm(timers)
    slow = RecordingProcessor(hold_s=slow_s)
    rival = RecordingProcessor()
    runner, rival_runner = Runner(s), Runner(rival_node)
    try:
        runner.start(slow, "slow")
        assert await wait_until(lambda: slow.ids() >= {t.id for t in timers}, 5.0), "the slow owner got nothing"
        rival_runner.start(rival, "rival")
        await asyncio.sleep(FAST["lease_s"] * 2)  # two leases in: only heartbeats keep the rows
        with psycopg.connect(pg_dsn) as conn:
            owners = conn.execute(f'SELECT owner_id, lease_expires > now() FROM "{schema}".schedule').fetchall()
        assert owners and all(o == ("slow", True) for o in owners), f"leases not held by the live owner: {owners}"
        assert await wait_until(lambda: len(slow.delivered) == 10, slow_s + 5.0), "the slow owner's commit failed"
        await asyncio.sleep(FAST["lease_s"] + FAST["sweep_s"])
        stolen = rival.ids() & {t.id for t in timers}
        assert not stolen, f"{len(stolen)} rows were taken from a slow owner that kept heartbeating"
        assert s.heartbeats >= 3, f"only {s.heartbeats} heartbeats in {slow_s}s"
        assert s.recovered == 0 and rival_node.recovered == 0, "the sweeper took rows from a live owner"
    finally:
        await runner.stop_all()
        await rival_runner.stop_all()
        await rival_node.teardown(drop=False)
        await s.teardown(drop=True)


@dataclass
class FailsOnceProcessor:
    """Raises on its first batch (a poll that blew up), then records like RecordingProcessor."""

    inner: RecordingProcessor = field(default_factory=RecordingProcessor)
    failed: int = 0

    async def process(self, fires: Sequence[Fire]) -> list[Outcome]:
        if not self.failed:
            self.failed = len(fires)
            raise RuntimeError("provider exploded")
        return await self.inner.process(fires)

    def committed(self, fires: Sequence[Fire], delivered: Sequence[bool]) -> None:
        self.inner.committed(fires, delivered)


async def test_failed_batch_is_redelivered_after_its_lease(pg_dsn, schema):
    s = await make(pg_dsn, schema)
    proc = FailsOnceProcessor()
    runner = Runner(s)
    try:
        await s.arm([Timer(f"fail-{i}", None) for i in range(5)])
        t0 = time.time()
        runner.start(proc, "w1")
        ok = await wait_until(lambda: len(proc.inner.delivered) == 5, s.capabilities.redelivery_s + 5.0)
        assert proc.failed == 5 and ok, f"{len(proc.inner.delivered)} of 5 rows of a failed batch came back"
        assert min(r.received_at for r in proc.inner.received) >= t0 + FAST["lease_s"], (
            "retried before the lease lapsed"
        )
    finally:
        await runner.stop_all()
        await s.teardown(drop=True)


async def test_rows_commit_as_their_polls_finish_and_a_crash_returns_only_the_rest(pg_dsn, schema):
    """Outcomes streamed back per group commit per group (head-of-line blocking): the
    fast half of a claim is re-armed while its slow half is still polling, and a crash then
    redelivers only the slow half."""
    s = await make(pg_dsn, schema, batch=10, inflight_batches=1, commit_per_group="always")
    dying = HalfThenHangs(hold=asyncio.Event())
    runner = Runner(s)
    try:
        timers = [Timer(f"hol-{i}", time.time() - 0.1) for i in range(10)]
        await s.arm(timers)
        task = runner.start(dying, "w1")
        ok = await wait_until(lambda: dying.in_process > 0 and len(dying.delivered) == 5, 10.0)
        assert ok, f"the fast half was not committed while the slow half polled ({len(dying.delivered)} of 5)"
        fast = {k[0] for k in dying.delivered}
        # the room of the committed half came back: one run loop with room for one batch claims
        # again while the first batch's slow half is out
        await s.arm([Timer("late-comer", time.time() - 0.1)])
        ok = await wait_until(lambda: "late-comer" in dying.ids(), 10.0)
        assert ok, "the committed rows' room did not come back: nothing more was claimed"
        await runner.crash(task)
        heir = RecordingProcessor()
        runner.start(heir, "heir")
        ok = await wait_until(lambda: len(heir.delivered) >= 5, s.capabilities.redelivery_s + 10.0)
        assert ok, "the uncommitted half never came back"
        await asyncio.sleep(0.5)
        slow = {t.id for t in timers} - fast
        assert heir.ids() & {t.id for t in timers} == slow, "a committed row was delivered again, or a slow one lost"
    finally:
        await runner.stop_all()
        await s.teardown(drop=True)


@pytest.mark.parametrize("mode", ["never", "auto"])
async def test_a_claim_commits_whole_when_its_slowest_poll_ends(pg_dsn, schema, mode):
    """``commit_per_group=never`` is the articles' batch, and so is ``auto`` while the run loop's room
    is mostly free: a streaming processor's fast half waits for the slow half, and nothing of the
    claim is committed while it polls."""
    s = await make(pg_dsn, schema, batch=10, commit_per_group=mode)
    slow = HalfThenHangs(hold=asyncio.Event())
    runner = Runner(s)
    try:
        await s.arm([Timer(f"whole-{i}", time.time() - 0.1) for i in range(10)])
        runner.start(slow, "w1")
        assert await wait_until(lambda: slow.in_process > 0, 10.0), "the claim never reached the processor"
        await asyncio.sleep(0.5)
        assert slow.streamed == 0 and not slow.delivered, "a group was committed before the claim's slowest poll"
        slow.hold.set()
        assert await wait_until(lambda: len(slow.delivered) == 10, 10.0), "the claim was not committed whole"
    finally:
        await runner.stop_all()
        await s.teardown(drop=True)


@dataclass
class StatefulProcessor:
    """Every poll finds news: a new encrypted state (random bytes) and an effect.

    Re-arms 0.5-0.8 s later: a fire cycle, compressed from the Composio article's 60-120 s intervals but
    still long enough that the previous cycle's row versions are dead to every snapshot (and
    so prunable) when the next update comes, even on a loaded machine where one statement may
    stall for a few hundred ms. Re-arming at once would measure how fast pruning can chase a
    row updated every few milliseconds, which no polling workload does.
    """

    state_bytes: int
    fires: int = 0

    async def process(self, fires: Sequence[Fire]) -> list[Outcome]:
        self.fires += len(fires)
        now = time.time()
        return [
            Outcome(next_fire_at=now + 0.5 + 0.3 * random.random(), new_state=os.urandom(self.state_bytes), effect=True)
            for _ in fires
        ]

    def committed(self, fires: Sequence[Fire], delivered: Sequence[bool]) -> None:
        pass


def table_stats(dsn: str, schema: str, min_state_updates: int, timeout_s: float = 15.0) -> dict[str, tuple[int, int]]:
    """(n_tup_upd, n_tup_hot_upd) per table, once the scheduler's backends have flushed."""
    deadline = time.time() + timeout_s
    with psycopg.connect(dsn, autocommit=True) as conn:
        while True:
            conn.execute("SELECT pg_stat_force_next_flush()")
            conn.execute("SELECT pg_stat_clear_snapshot()")
            rows = conn.execute(
                "SELECT relname, n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE schemaname = %s",
                (schema,),
            ).fetchall()
            out = {r[0]: (r[1], r[2]) for r in rows}
            if out.get("state", (0, 0))[0] >= min_state_updates or time.time() > deadline:
                return out
            time.sleep(0.2)


@pytest.mark.parametrize(
    "state_bytes, inline_state",
    # the Composio article's layout: a 4 kB encrypted state in TOAST; and a state small enough to stay in
    # the row with room for a second version (a 4 kB inline state cannot be HOT: two versions
    # do not fit in an 8 kB page; scripts/measure_pg_leased_knobs.py shows why it is still the
    # cheaper default).
    [(4096, False), (1024, True)],
    ids=["toasted-4096", "inline-1024"],
)
async def test_split_state_updates_are_hot(isolated_dsn, schema, state_bytes, inline_state):
    pg_dsn = isolated_dsn  # see conftest.py: the vacuum horizon of a database of our own
    n, cycles = 200, 5
    s = await make(pg_dsn, schema, state_bytes=state_bytes, split_state=True, inline_state=inline_state, batch=100)
    proc = StatefulProcessor(state_bytes)
    runner = Runner(s)
    try:
        await s.arm([Timer(f"hot-{i}", None, tenant_id=f"t{i % 10}") for i in range(n)])
        runner.start(proc, "w1")
        ok = await wait_until(lambda: s.state_writes >= n * cycles, 60.0)
        await runner.stop_all()
        assert ok, f"only {s.state_writes} state writes for {n} triggers x {cycles} cycles"
        writes = s.state_writes
        await s.teardown(drop=False)  # the pool's backends exit and flush their statistics
        stats = table_stats(pg_dsn, schema, writes)
    finally:
        await runner.stop_all()
        await s.teardown(drop=True)
    upd, hot = stats["state"]
    assert upd >= writes, f"pg_stat_user_tables shows {upd} state updates, the scheduler made {writes}"
    sched_upd, sched_hot = stats["schedule"]
    print(
        f"\nsplit_state on, {state_bytes}-byte state, inline_state={inline_state}, {n} triggers, {proc.fires} fires:"
        f" state table {hot}/{upd} HOT ({hot / upd:.1%});"
        f" schedule table {sched_hot}/{sched_upd} HOT ({sched_hot / max(sched_upd, 1):.1%})"
    )
    assert hot / upd >= 0.95, f"state table updates only {hot / upd:.1%} HOT ({hot}/{upd})"
    # Claims and re-arms change indexed columns (state, due_key), so they are never HOT; only
    # heartbeats, which touch lease_expires alone, can be. These batches never live long
    # enough for a heartbeat, so the schedule table's ratio is ~0 by design.
    assert sched_hot / max(sched_upd, 1) < 0.2


@pytest.mark.parametrize("split_state", [True, False])
async def test_fire_times_and_states_travel_exactly_through_claim_and_commit(pg_dsn, schema, split_state):
    """The claim hands times over as float8 epoch seconds and commit_batch turns them back with
    to_timestamp: every microsecond must come back as the timestamptz it was, or a redelivery
    would record its effect under a second key. The claim also returns each row's poll state."""
    s = await make(pg_dsn, schema, state_bytes=300, split_state=split_state, batch=100, max_per_tenant=100)
    base = float(int(time.time()) - 100)  # all due already
    fractions = [0.0, 0.000001, 0.999999, 0.5, 0.123456, 0.0005, 0.999, *(random.random() for _ in range(40))]
    timers = [Timer(f"exact-{k:02d}", round(base + k + f, 6)) for k, f in enumerate(fractions)]
    timers.append(Timer("exact-null", None))  # due when armed: its key is armed_at
    try:
        await s.arm(timers)
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            state_col = "t.poll_state" if split_state else "s.poll_state"
            rows = conn.execute(
                f"""SELECT s.id, (extract(epoch FROM coalesce(s.next_fire_at, s.armed_at)) * 1000000)::bigint,
                           {state_col}
                      FROM {schema}.schedule s LEFT JOIN {schema}.state t ON t.id = s.id"""
            ).fetchall()
        armed_us = {i: due for i, due, _ in rows}
        armed_state = {i: st for i, _, st in rows}
        (statement,) = s._claim_statements()
        claimed = await s._claim(statement, "probe", 0, 100)
        assert sorted(c.fire.timer_id for c in claimed) == sorted(armed_us)
        for c in claimed:
            assert c.fire.due_at == armed_us[c.fire.timer_id] / 1e6
            assert c.fire.state == armed_state[c.fire.timer_id] and len(c.fire.state) == 300
        later = [round(base + 3600 + k + random.random(), 6) for k in range(len(claimed))]
        outcomes = [Outcome(next_fire_at=t, new_state=None, effect=True) for t in later]
        delivered = await s._commit(claimed, outcomes, "probe")
        assert all(delivered.values()) and len(delivered) == len(claimed)
        # the same fires again (a redelivery): every effect key exists already, nothing re-arms
        again = await s._commit(claimed, outcomes, "probe")
        assert not any(again.values())
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            effects = dict(
                conn.execute(
                    f"SELECT trigger_id, (extract(epoch FROM due_at) * 1000000)::bigint FROM {schema}.effects"
                ).fetchall()
            )
            next_us = dict(
                conn.execute(
                    f"SELECT id, (extract(epoch FROM next_fire_at) * 1000000)::bigint FROM {schema}.schedule"
                ).fetchall()
            )
        assert effects == armed_us
        assert next_us == {c.fire.timer_id: round(t * 1e6) for c, t in zip(claimed, later)}
    finally:
        await s.teardown(drop=True)
