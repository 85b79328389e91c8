"""Activities of temporal_shards: everything that does I/O (Postgres, signals to other shards).

One :class:`ShardActivities` per ``run()``: it binds the processors and worker id of that run,
so several workers in one process each call their own processors.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from temporalio import activity
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from schedulers.base import Fire, Processor, us
from schedulers.temporal_shards.workflows import (
    E_ID,
    E_VER,
    BatchInput,
    ControllerInput,
    ForwardInput,
    UtilInput,
)

if TYPE_CHECKING:
    from schedulers.temporal_shards import TemporalShardsScheduler


class ShardActivities:
    def __init__(
        self,
        scheduler: TemporalShardsScheduler,
        processors: Mapping[str, Processor],
        worker_id: str,
        stopping: asyncio.Event,
    ) -> None:
        self.s = scheduler
        self.processors = processors
        self.worker_id = worker_id
        self.stopping = stopping  # set on a graceful stop: finish in-flight batches, take no new
        self.batch_no = 0
        self.in_flight = 0

    def all(self) -> list:
        return [self.poll_batch, self.report_util, self.forward_timers, self.controller_tick]

    # -- the batch poller --------------------------------------------------------------------

    @activity.defn(name="poll_batch")
    async def poll_batch(self, inp: BatchInput) -> dict:
        """Claim by key with a lease, poll, commit state + effects in one transaction, re-arm.

        Retried by Temporal until it succeeds; the claim owner is the batch (the poller
        workflow id), so a retry after a crash takes the batch over, and a retry after a
        crash between commit and re-arm finds its committed rows and re-sends their re-arm.
        """
        if self.stopping.is_set():
            raise ApplicationError(
                "worker is stopping; the batch goes to another worker", category=ApplicationErrorCategory.BENIGN
            )
        processor = self.processors.get(inp.type)
        if processor is None:
            raise ApplicationError(f"this worker has no processor for timer type {inp.type!r}")
        if activity.info().attempt == 1:  # each flushed batch once, not once per retry
            self.s.batch_sizes.add(len(inp.timers), inp.closed_by)
        # The batch owns its rows (a retry of the same batch takes them over). Its id without
        # the scheduler prefix keeps the narrow trigger row narrow, so more HOT room per page.
        owner = activity.info().workflow_id.removeprefix(self.s.prefix + "-")
        versions = {t[E_ID]: t[E_VER] for t in inp.timers}
        todo = list(versions)
        fired = stale = 0
        rounds = 0
        self.in_flight += 1
        try:
            while todo:
                fires, waits, rearms = await self._claim(owner, todo, versions, inp.lease_s)
                if rearms:
                    await self.s.send(rearms, key=f"{owner}/{rounds}/recover")
                if fires:
                    await self._process(owner, processor, fires, inp.lease_s)
                    fired += len(fires)
                stale += len(todo) - len(fires) - len(waits) - len(rearms)
                todo = list(waits)
                if todo:
                    # Another batch holds a copy of these (rebalancing can briefly leave a timer
                    # on two shards): wait for its lease to end, then claim what is still ours.
                    activity.heartbeat()
                    await asyncio.sleep(min(inp.lease_s, max(0.05, min(waits.values()) + 0.05)))
                rounds += 1
        finally:
            self.in_flight -= 1
        return {"fired": fired, "stale": stale}

    async def _claim(self, owner, ids, versions, lease_s):
        q = self.s.q
        vers = [versions[i] for i in ids]
        async with self.s.pool.connection() as conn:
            cur = await conn.execute(q["claim"], {"ids": ids, "versions": vers, "owner": owner, "lease_s": lease_s})
            rows = await cur.fetchall()
            got = {r[0] for r in rows}
            rest = [i for i in ids if i not in got]
            waits: dict[str, float] = {}
            rearms: list[list] = []
            if rest:
                cur = await conn.execute(
                    q["unclaimed_status"],
                    {"ids": rest, "versions": [versions[i] for i in rest], "owner": owner, "batch": owner},
                )
                for tid, status, left_s, version, type_, tenant, prio, fire_at, armed_at in await cur.fetchall():
                    if status == "leased":
                        waits[tid] = left_s or 0.0
                    else:
                        rearms.append([tid, us(fire_at), version, us(armed_at), type_, tenant, prio])
        self.batch_no += 1
        self.s.claimed_timers += len(rows)
        fires = [
            Fire(tid, tenant, type_, us(due_at), us(armed_at), attempt, self.worker_id, self.batch_no, state, prio)
            for tid, tenant, type_, prio, attempt, due_at, armed_at, state in rows
        ]
        return fires, waits, rearms

    async def _process(self, owner, processor, fires, lease_s) -> None:
        ids = [f.timer_id for f in fires]
        beat = asyncio.create_task(self._heartbeat(owner, ids, lease_s))
        try:
            try:
                outcomes = await processor.process(fires)
            except asyncio.CancelledError:
                # A crash keeps its claims (they come back through the activity retry); only a
                # graceful stop hands them back at once.
                if self.stopping.is_set():
                    with contextlib.suppress(Exception):
                        await asyncio.shield(self._release(owner, ids))
                raise
            rearms, delivered = await self._commit(owner, fires, outcomes)
            processor.committed(fires, [f.timer_id in delivered for f in fires])
            if rearms:  # held a moment to share signals with other batches: still heartbeating
                await self.s.send_rearms(rearms)
        finally:
            beat.cancel()

    async def _heartbeat(self, owner: str, ids: list[str], lease_s: float) -> None:
        """A slow owner that is alive keeps its timers: Temporal heartbeat + Postgres lease."""
        while True:
            await asyncio.sleep(lease_s / 3)
            activity.heartbeat()
            with contextlib.suppress(Exception):
                async with self.s.pool.connection() as conn:
                    await conn.execute(self.s.q["extend_leases"], {"ids": ids, "owner": owner, "lease_s": lease_s})

    async def _release(self, owner: str, ids: list[str]) -> None:
        async with self.s.pool.connection() as conn:
            await conn.execute(self.s.q["release"], {"ids": ids, "owner": owner})

    async def _commit(self, owner, fires, outcomes) -> tuple[list[list], set[str]]:
        q = self.s.q
        eff_ids = [f.timer_id for f, o in zip(fires, outcomes) if o.effect]
        eff_dues = [f.due_at for f, o in zip(fires, outcomes) if o.effect]
        if self.s.skip_unchanged_state:
            # the optimisation the Composio article lists as "next on the list" (skip-unchanged): no
            # write (no TOAST churn) when the poll left the state as it was
            states = [(f.timer_id, o.new_state) for f, o in zip(fires, outcomes) if o.new_state is not None]
        else:
            # the Composio article as measured (toast-third): every commit writes the poll state, so
            # every fire rewrites all of its TOAST chunks (the state read at claim goes back when the
            # poll left it alone; Postgres compares no bytes, a value sent again is stored again)
            states = [
                (f.timer_id, o.new_state if o.new_state is not None else f.state)
                for f, o in zip(fires, outcomes)
                if o.new_state is not None or f.state is not None
            ]
        st_ids = [tid for tid, _ in states]
        st_vals = [v for _, v in states]
        nexts = [None if o.next_fire_at is None else us(o.next_fire_at) for o in outcomes]
        commit = {
            "ids": [f.timer_id for f in fires],
            "next_fire_ats": nexts,
            "owner": owner,
            "batch": owner,
            "now": time.time(),
        }
        if self.s.state_in_row:  # the state goes with the commit's own row write (NULL: kept)
            by_id = dict(states)
            commit["states"] = [by_id.get(f.timer_id) for f in fires]
            st_ids = []
        async with self.s.pool.connection() as conn:
            async with conn.transaction():
                delivered: set[str] = set()
                if eff_ids:
                    cur = await conn.execute(q["record_effects"], {"ids": eff_ids, "dues": eff_dues})
                    delivered = {r[0] for r in await cur.fetchall()}
                if st_ids:
                    await conn.execute(q["write_state"], {"ids": st_ids, "states": st_vals})
                cur = await conn.execute(q["commit_rows"], commit)
                rows = await cur.fetchall()
        rearms = [
            [tid, us(fire_at), version, us(armed_at), type_, tenant, prio]
            for tid, version, type_, tenant, prio, fire_at, armed_at in rows
            if fire_at is not None
        ]
        return rearms, delivered

    # -- shard housekeeping ----------------------------------------------------------------------

    @activity.defn(name="report_util")
    async def report_util(self, inp: UtilInput) -> None:
        q = self.s.q["util_continued" if inp.continued else "util_report"]
        async with self.s.pool.connection() as conn:
            await conn.execute(
                q,
                {
                    "shard": inp.shard,
                    "timers": inp.timers,
                    "utilisation": inp.utilisation,
                    "history_length": inp.history_length,
                    "payload_bytes": inp.payload_bytes,
                    "splits": inp.splits,
                    "can_postponed": inp.can_postponed,
                },
            )

    @activity.defn(name="forward_timers")
    async def forward_timers(self, inp: ForwardInput) -> list[list]:
        """Send an overloaded shard's long-horizon timers to their place on the current ring
        (``grow``: a split, on the ring grown by one shard first). Returns ``[id, version]`` of
        those that left. The key makes a retry's signals a no-op (a retried split may grow the
        ring once more: a shard too many, never a timer lost)."""
        if inp.grow:
            async with self.s.pool.connection() as conn:
                n = (await (await conn.execute(self.s.q["ring_split"])).fetchone())[0]
            activity.logger.info("shard %d split: shard count now %d", inp.shard, n)
        ring, loads, _ = await self.s.ring_view(fresh=True)
        loads = list(loads) + [0] * (ring.n_shards - len(loads))
        if inp.shard < len(loads):
            loads[inp.shard] = 1 << 30  # this shard is full: walk past it
        cap = ring.capacity(sum(x for i, x in enumerate(loads) if i != inp.shard) + len(inp.timers))
        moving = []
        for t in inp.timers:
            target = ring.place(t[E_ID], loads, cap)
            if target != inp.shard:
                loads[target] += 1
                moving.append((target, t))
        if moving:
            # Take the moving timers off the sender's reported count before they leave: the
            # receivers may report them before the sender reports again, and the controller must
            # never count a timer twice (it would grow the ring past its target). Until both sides
            # report, the sum counts a moving timer once or not at all.
            async with self.s.pool.connection() as conn:
                await conn.execute(self.s.q["util_forwarded"], {"shard": inp.shard, "moved": len(moving)})
            info = activity.info()
            await self.s.send_to(moving, key=f"fwd/{info.workflow_run_id}/{info.activity_id}")
        return [[t[E_ID], t[E_VER]] for _, t in moving]

    @activity.defn(name="controller_tick")
    async def controller_tick(self, inp: ControllerInput) -> dict:
        """Grow the shard count when average utilisation passes ``grow_above``, to ``grow_target``
        (controller-80-60: 80 % and 60 %). Never shrinks: timers may live on every shard."""
        q = self.s.q
        async with self.s.pool.connection() as conn:
            n = (await (await conn.execute(q["ring_read"])).fetchone())[0]
            settle = (await (await conn.execute(q["ring_settle"], {"settle_s": inp.settle_s})).fetchone())[0]
            if settle and settle > 0:
                return {"shards": n, "utilisation": None, "grown": False, "settling_s": settle}
            rows = await (await conn.execute(q["util_read"])).fetchall()
            total = sum(r[1] for r in rows if r[0] < n)
            avg = total / (n * inp.timer_cap)
            grown = None
            if avg > inp.grow_above:
                want = max(n + 1, math.ceil(total / (inp.grow_target * inp.timer_cap)))
                cur = await conn.execute(q["ring_grow"], {"shards": want})
                row = await cur.fetchone()
                grown = row[0] if row else None
        if grown:
            activity.logger.info("shard count %d -> %d at utilisation %.2f", n, grown, avg)
        return {"shards": grown or n, "utilisation": avg, "grown": bool(grown)}
