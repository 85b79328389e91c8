"""pg_queue's own choices where the article is silent: the table shape and the stale-claim timeout
(no heartbeat). A move during a claim is a promise of every backend: the conformance suite's
``move_during_an_inflight_batch_wins_over_its_rearm``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import psycopg
from psycopg import sql

from schedulers.base import Fire, Outcome, Timer
from tests.conformance.helpers import wait_until as _wait_for
from tests.pg_queue.conftest import make_scheduler


@dataclass
class ScriptedProcessor:
    """Holds each batch until ``release`` is set (when given); re-arms ``rearm_in_s`` ahead, or finishes."""

    rearm_in_s: float | None = None
    release: asyncio.Event | None = None
    received: list[Fire] = field(default_factory=list)
    committed_ids: list[str] = field(default_factory=list)

    async def process(self, fires: Sequence[Fire]) -> list[Outcome]:
        self.received.extend(fires)
        if self.release is not None:
            await self.release.wait()
        nxt = None if self.rearm_in_s is None else time.time() + self.rearm_in_s
        return [Outcome(next_fire_at=nxt) for _ in fires]

    def committed(self, fires: Sequence[Fire], delivered: Sequence[bool]) -> None:
        self.committed_ids.extend(f.timer_id for f in fires)


async def test_table_is_wide_with_six_indexes_and_toasted_state(pg_dsn, schema, pg_queue_ctx):
    s = await make_scheduler(pg_queue_ctx(4096))
    try:
        await s.arm([Timer(f"w-{i}", time.time() + 3600) for i in range(20)])
        assert s.relations() == [f"{schema}.triggers", f"{schema}.effects"]
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            indexes = [
                r[0]
                for r in conn.execute(
                    "SELECT indexrelname FROM pg_stat_user_indexes WHERE schemaname = %s AND relname = 'triggers'",
                    (schema,),
                )
            ]
            assert len(indexes) == 6, f"the Composio article's queue table had six indexes, found {sorted(indexes)}"
            assert "triggers_next_fire_at_idx" in indexes
            assert {f"{schema}.{i}" for i in indexes} <= set(s.indexes())
            (toast_bytes,) = conn.execute(
                "SELECT pg_relation_size(c.reltoastrelid) FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relname = 'triggers'",
                (schema,),
            ).fetchone()
            assert toast_bytes >= 20 * 4096, f"poll state is not stored out of line: TOAST holds {toast_bytes} bytes"
    finally:
        await s.teardown(drop=True)


async def test_claim_past_stale_timeout_is_taken_over_and_its_late_commit_fenced(pg_dsn, schema, pg_queue_ctx):
    ctx = pg_queue_ctx(256)
    # Two processes sharing the table; the slow one polls one batch at a time, so it cannot
    # re-claim its own stale rows while it is stuck on them.
    slow_s = await make_scheduler(ctx, tick_s=0.05, stale_claim_s=0.5, batch=10, inflight_batches=1)
    rival_s = await make_scheduler(ctx, tick_s=0.05, stale_claim_s=0.5, batch=10)
    slow_release = asyncio.Event()
    slow = ScriptedProcessor(rearm_in_s=3600.0, release=slow_release)  # alive, but no heartbeat
    rival = ScriptedProcessor(rearm_in_s=None)
    stops = [asyncio.Event(), asyncio.Event()]
    tasks = [asyncio.create_task(slow_s.run({"poll": slow}, stops[0], worker_id="slow"))]
    try:
        await slow_s.arm([Timer(f"stale-{i}", time.time() - 0.1) for i in range(5)])
        assert await _wait_for(lambda: len(slow.received) == 5, 5.0)
        with psycopg.connect(ctx.dsn, autocommit=True) as conn:
            claimed = conn.execute(
                sql.SQL("SELECT count(*) FROM {}.triggers WHERE claimed_by IS NOT NULL").format(
                    sql.Identifier(ctx.schema)
                )
            ).fetchone()[0]
        assert claimed == 5, f"{claimed} rows marked claimed"
        tasks.append(asyncio.create_task(rival_s.run({"poll": rival}, stops[1], worker_id="rival")))
        # A first version has no heartbeat: past stale_claim_s the rival takes the rows.
        assert await _wait_for(lambda: len(rival.committed_ids) == 5, 5.0), "stale claims were not taken over"
        assert all(f.attempt == 2 for f in rival.received), "a takeover is a redelivery (attempt 2)"
        slow_release.set()
        assert await _wait_for(lambda: len(slow.committed_ids) == 5, 5.0)
        assert slow_s.fenced == 5, "the slow owner's late commit re-armed rows it no longer held"
        assert await rival_s.export_armed() == [], "the slow owner's late re-arm (+1 h) came back"
    finally:
        slow_release.set()
        for stop in stops:
            stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks), 10)
        await slow_s.teardown(drop=False)
        await rival_s.teardown(drop=True)
