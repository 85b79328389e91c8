"""temporal_shards as the Composio article describes it, and each departure as an option: batches of 800
flushed at MaxLag, every commit writing the poll state, the Continue-As-New payload measured and
kept under Temporal's limit by splitting.

Real Postgres and the embedded Temporal dev server; small limits stand in for 2 MB of data.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import psycopg
import pytest
from psycopg import sql
from temporalio.client import WorkflowExecutionStatus

from schedulers.base import BATCH_SIZE_BIN_GAUGE, BATCHES_CLOSED_GAUGE, Fire, Outcome, Timer
from schedulers.temporal_shards import TemporalShardsScheduler
from tests.conformance.helpers import RecordingProcessor, Runner, wait_until
from tests.pg_queue.conftest import table_stats
from tests.temporal_shards.test_shards import FAST, finish, started


def batch_gauges(stats: dict[str, float]) -> tuple[dict[int, float], dict[str, float]]:
    bins = {
        int(k.removeprefix(BATCH_SIZE_BIN_GAUGE)): v for k, v in stats.items() if k.startswith(BATCH_SIZE_BIN_GAUGE)
    }
    closed = {k.removeprefix(BATCHES_CLOSED_GAUGE): v for k, v in stats.items() if k.startswith(BATCHES_CLOSED_GAUGE)}
    return bins, closed


def test_defaults_are_the_articles():
    d = TemporalShardsScheduler.default_options
    assert d["batch"] == 800  # the Composio article: "full batches of 800"
    assert d["max_lag_s"] == 10.0  # the Composio article: MaxLag 10 s for polling
    assert d["skip_unchanged_state"] is False  # the Composio article: skipping was "next on the list"
    assert d["payload_limit_bytes"] == 2 * 1024 * 1024  # the Composio article: "Temporal caps that payload at 2 MB"
    assert d["timer_cap"] == 5000


@pytest.mark.parametrize(
    "batch, closed_by", [(TemporalShardsScheduler.default_options["batch"], "max_lag"), (5, "full")]
)
async def test_batches_close_at_max_lag_at_a_low_rate_and_on_size_when_small(make_ctx, batch, closed_by):
    # 60 timers due over ~3 s, 20 a second, on one shard with MaxLag 1 s: with the article's batch
    # of 800 no batch can fill, so every one closes at MaxLag; with batch 5 they close full.
    s = await started(make_ctx, shards=1, batch=batch, max_lag_s=1.0, controller=False)
    runner = Runner(s)
    try:
        proc = RecordingProcessor()
        runner.start(proc, "w1")
        t0 = time.time()
        timers = [Timer(f"lowrate-{i}", t0 + 0.5 + 0.05 * i) for i in range(60)]
        await s.arm(timers)
        ok = await wait_until(lambda: proc.ids() >= {t.id for t in timers}, 20)
        assert ok, f"{len({t.id for t in timers} - proc.ids())} timers never fired"
        stats = await s.shard_report()
        bins, closed = batch_gauges(stats)
        print(f"\nbatch {batch}: {stats['batches']:.0f} batches, closed {closed}, sizes by bin {bins}")
        assert stats["batched_timers"] == 60
        assert closed == {closed_by: stats["batches"]}, closed
        assert sum(bins.values()) == stats["batches"]
        if closed_by == "max_lag":
            assert max(bins) <= 800 and stats["batches"] >= 1
        else:
            assert set(bins) == {25} and stats["batches"] == 12  # 60 timers in batches of 5
    finally:
        await finish(s, runner)


@dataclass
class Unchanged:
    """Fires once, finds nothing: the poll state stays as it was (new_state None)."""

    fired: list[str] = field(default_factory=list)

    async def process(self, fires: Sequence[Fire]) -> list[Outcome]:
        self.fired.extend(f.timer_id for f in fires)
        return [Outcome(next_fire_at=None) for _ in fires]

    def committed(self, fires: Sequence[Fire], delivered: Sequence[bool]) -> None:
        pass


TOAST_DELETES = sql.SQL(
    "SELECT coalesce(sum(s.n_tup_del), 0) FROM pg_stat_all_tables s JOIN pg_class c ON c.reltoastrelid = s.relid "
    "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relname = 'trigger'"
)


def state_writes(conn: psycopg.Connection, schema: str, in_row: bool) -> int:
    """Poll-state writes so far: with the state in the trigger row, the TOAST chunks its commits
    replaced (the arm's first state inserts chunks but deletes none); else trigger_state's updates."""
    if in_row:
        return int(conn.execute(TOAST_DELETES, (schema,)).fetchone()[0])
    return table_stats(conn, schema, "trigger_state")["n_tup_upd"]


@pytest.mark.parametrize(
    "in_row, skip, writes",
    [(False, False, 40), (False, True, 0), (True, False, 40 * 3), (True, True, 0)],
    ids=["own_table_writes_every_commit", "own_table_skip_unchanged", "row_writes_every_commit", "row_skip_unchanged"],
)
async def test_state_write_per_commit_follows_skip_unchanged_state(make_ctx, pg_dsn, schema, in_row, skip, writes):
    """40 polls that leave the state as it was: every commit writes it again (a 4 KB incompressible
    state is 3 TOAST chunks), or none does with skip_unchanged_state."""
    ctx = make_ctx(TemporalShardsScheduler, state_bytes=4096)
    s = TemporalShardsScheduler(ctx, **{**FAST, "skip_unchanged_state": skip, "state_in_row": in_row})
    await s.setup()
    runner = Runner(s)
    try:
        proc = Unchanged()
        runner.start(proc, "w1")
        await s.arm([Timer(f"st-{i}", time.time()) for i in range(40)])
        assert await wait_until(lambda: len(proc.fired) >= 40, 15), "the timers did not fire"
        await runner.stop_all()
        await s.teardown(drop=False)  # the writers' connections close: their counters flush
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("SELECT pg_stat_force_next_flush()")
            updates = -1
            for _ in range(40):  # statistics arrive within a second or so
                updates = state_writes(conn, schema, in_row)
                if updates == writes:
                    break
                await asyncio.sleep(0.25)
        assert updates == writes, f"skip_unchanged_state={skip}: {updates} state writes for 40 unchanged polls"
    finally:
        await runner.stop_all()
        await s.teardown(drop=True)


async def shard_statuses(s: TemporalShardsScheduler) -> dict[int, WorkflowExecutionStatus]:
    n = int((await s.shard_report())["shards"])
    out = {}
    for shard in range(n):
        with_handle = s.client.get_workflow_handle(s.shard_id(shard))
        try:
            out[shard] = (await with_handle.describe()).status
        except Exception:  # a shard the ring has but no timer reached yet has no workflow
            continue
    return out


async def shard_counts(s: TemporalShardsScheduler) -> int:
    n = int((await s.shard_report())["shards"])
    total = 0
    for shard in range(n):
        try:
            total += await s.client.get_workflow_handle(s.shard_id(shard)).query("count")
        except Exception:
            continue
    return total


LIMIT_BYTES = 40_000  # a payload limit a few hundred timers reach (a timer here encodes to ~70 bytes)


async def test_a_shard_nearing_the_payload_limit_splits_and_keeps_every_timer(make_ctx):
    # One shard, no controller: 700 long-horizon timers (~50 KB) would carry more than the limit
    # across Continue-As-New. The shard measures its payload, passes its split mark (half the
    # limit), grows the ring and forwards its farthest timers; every Continue-As-New stays under
    # the limit, no workflow fails, no timer is lost, and near timers still fire once.
    s = await started(
        make_ctx,
        shards=1,
        controller=False,
        payload_limit_bytes=LIMIT_BYTES,
        history_bound=40,
        util_report_s=0.5,
        ring_refresh_s=0.2,
    )
    runner = Runner(s)
    try:
        proc = RecordingProcessor()
        runner.start(proc, "w1")
        t0 = time.time()
        far = [Timer(f"far-{i:04d}", t0 + 3600 + i) for i in range(700)]
        await s.arm(far[:400])  # one call: signals of at most a quarter of the limit each
        for i in range(400, 700, 50):
            await s.arm(far[i : i + 50])
            await asyncio.sleep(0.2)
        near = [Timer(f"near-{i}", time.time() + 1.0) for i in range(20)]
        await s.arm(near)
        ok = await wait_until(lambda: proc.ids() >= {t.id for t in near}, 20)
        assert ok, "near timers stopped firing once the shard split"

        async def settled() -> bool:
            st = await s.shard_report()
            return (
                st["splits"] >= 1
                and st["continue_as_new"] >= 1
                and all(
                    v <= LIMIT_BYTES // 2
                    for k, v in st.items()
                    if k.endswith("_payload_bytes") and k.startswith("shard_") and not k.endswith("_can_payload_bytes")
                )
            )

        deadline = time.time() + 30
        while not await settled() and time.time() < deadline:
            await asyncio.sleep(0.3)
        stats = await s.shard_report()
        print(
            f"\nsplit: shards {stats['shards']:.0f}, splits {stats['splits']:.0f}, largest payload measured "
            f"{stats['max_payload_bytes']:.0f} B, largest at Continue-As-New {stats['max_can_payload_bytes']:.0f} B "
            f"(limit {LIMIT_BYTES}), Continue-As-New {stats['continue_as_new']:.0f}, postponed "
            f"{stats['can_postponed']:.0f}"
        )
        assert await settled(), f"the shards did not split under the split mark: {stats}"
        assert stats["shards"] >= 2
        assert 0 < stats["max_can_payload_bytes"] <= LIMIT_BYTES, stats
        statuses = await shard_statuses(s)
        assert statuses and all(v == WorkflowExecutionStatus.RUNNING for v in statuses.values()), statuses
        held = await shard_counts(s)
        assert held == len(far), f"the shards hold {held} timers, {len(far)} were armed"
        assert not any(r.timer_id.startswith("far-") for r in proc.received), "a long-horizon timer fired early"
        assert all(len(proc.of(t.id)) == 1 for t in near)
    finally:
        await finish(s, runner)


async def test_a_timer_too_large_for_a_payload_is_refused_before_any_write(make_ctx):
    s = await started(make_ctx, payload_limit_bytes=LIMIT_BYTES)
    try:
        with pytest.raises(ValueError, match="payload_limit_bytes"):
            await s.arm([Timer("x" * (LIMIT_BYTES // 3), time.time() + 60), Timer("fits", time.time() + 60)])
        async with s.pool.connection() as conn:
            query = sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(s.ctx.schema, "trigger"))
            rows = (await (await conn.execute(query)).fetchone())[0]
        assert rows == 0, "a refused arm wrote trigger rows"
    finally:
        await s.teardown(drop=True)


async def test_a_batch_whose_input_would_pass_the_payload_share_goes_to_several_pollers(make_ctx):
    # 200 timers due at once on one shard, batch 800 (the Composio article): one MaxLag flush of ~14 KB. With
    # a 20 KB limit a poller's input may carry a quarter (5 KB, ~70 timers), so the flush starts
    # several pollers, none over the share; every timer fires once. (split_payload_frac 1: the
    # shard's own payload, ~14 KB, stays under its split mark, so the ring does not grow.)
    limit = 20_000
    s = await started(
        make_ctx,
        shards=1,
        controller=False,
        batch=800,
        max_lag_s=1.0,
        payload_limit_bytes=limit,
        split_payload_frac=1.0,
    )
    runner = Runner(s)
    try:
        proc = RecordingProcessor()
        runner.start(proc, "w1")
        due = time.time() + 1.0
        timers = [Timer(f"wide-{i:04d}", due) for i in range(200)]
        await s.arm(timers)  # one call, several signals (each under the share too)
        ok = await wait_until(lambda: proc.ids() >= {t.id for t in timers}, 30)
        assert ok, f"{len({t.id for t in timers} - proc.ids())} timers never fired"
        stats = await s.shard_report()
        bins, closed = batch_gauges(stats)
        sizes = [len(b) for b in proc.batches]
        print(
            f"\n200 timers due at once, payload limit {limit} B: batches of {sorted(sizes)}, closed {closed}, "
            f"shards {stats['shards']:.0f}, splits {stats['splits']:.0f}"
        )
        assert stats["batched_timers"] == 200 and stats["batches"] == len(proc.batches)
        assert len(proc.batches) >= 3, f"one flush of ~14 KB went to {len(proc.batches)} pollers"
        assert max(bins) <= 100, bins  # every piece well under 800
        assert stats["splits"] == 0 and stats["shards"] == 1
        assert all(len(proc.of(t.id)) == 1 for t in timers)
    finally:
        await finish(s, runner)


async def test_a_timer_over_the_2mb_limit_is_refused_with_the_fix(make_ctx):
    # the default limit, the Composio article's 2 MB: a timer whose tenant alone is 2 MB cannot travel
    s = await started(make_ctx)
    try:
        assert s.options["payload_limit_bytes"] == 2 * 1024 * 1024
        with pytest.raises(
            ValueError, match=r"over the 524288-byte share of payload_limit_bytes=2097152.*raise payload_limit_bytes"
        ):
            await s.arm([Timer("huge", time.time() + 60, tenant_id="t" * (2 * 1024 * 1024 + 1))])
        await s.arm([Timer("ordinary", time.time() + 60)])  # the scheduler is still usable
        async with s.pool.connection() as conn:
            query = sql.SQL("SELECT id FROM {}").format(sql.Identifier(s.ctx.schema, "trigger"))
            ids = [r[0] for r in await (await conn.execute(query)).fetchall()]
        assert ids == ["ordinary"], ids
    finally:
        await s.teardown(drop=True)


async def test_the_arm_writes_a_new_triggers_state_with_its_row_and_a_move_keeps_it(make_ctx, pg_dsn, schema):
    """With the state in the row, a new trigger's first state goes in with its row (one heap write
    per armed trigger, no insert-then-update), and moving an armed trigger leaves its state alone."""
    ctx = make_ctx(TemporalShardsScheduler, state_bytes=4096)
    s = TemporalShardsScheduler(ctx, **FAST)
    await s.setup()
    rows = sql.SQL("SELECT id, state, version, ctid::text FROM {} ORDER BY id").format(
        sql.Identifier(schema, "trigger")
    )
    try:
        await s.arm([Timer(f"st-{i}", time.time() + 3600) for i in range(10)])
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            first = conn.execute(rows).fetchall()
        assert [r[0] for r in first] == [f"st-{i}" for i in range(10)]
        assert all(len(state) == 4096 and version == 1 for _, state, version, _ in first)
        # ten rows inserted into an empty table sit at line pointers 1-10 of its first page; an
        # update of each in the same transaction would have put their live versions at 11-20
        assert sorted(ctid for *_, ctid in first) == sorted(f"(0,{k})" for k in range(1, 11))
        await s.arm([Timer(f"st-{i}", time.time() + 7200) for i in range(5)] + [Timer("st-new", time.time() + 3600)])
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            after = {r[0]: r for r in conn.execute(rows).fetchall()}
        for tid, state, version, _ in first:
            moved = tid in {f"st-{i}" for i in range(5)}
            assert after[tid][1] == state and after[tid][2] == version + (1 if moved else 0), tid
        assert len(after["st-new"][1]) == 4096 and after["st-new"][2] == 1
    finally:
        await s.teardown(drop=True)
