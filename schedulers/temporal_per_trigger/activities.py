"""The poll activity of temporal_per_trigger: one fire of one trigger.

One :class:`PollActivities` per ``run()``: it binds the processors and worker id of that run, so
several workers in one process each call their own processors.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

import psycopg
from temporalio import activity
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from schedulers.base import Fire, Outcome, Processor, us
from schedulers.temporal_per_trigger import costs
from schedulers.temporal_per_trigger.workflows import POLL_ACTIVITY, PollInput, PollResult

if TYPE_CHECKING:
    from schedulers.temporal_per_trigger import TemporalPerTriggerScheduler


class PollActivities:
    def __init__(
        self,
        scheduler: TemporalPerTriggerScheduler,
        processors: Mapping[str, Processor],
        worker_id: str,
        stopping: asyncio.Event,
    ) -> None:
        self.s = scheduler
        self.processors = processors
        self.worker_id = worker_id
        self.stopping = stopping  # set on a graceful stop: finish in-flight polls, take no new
        self.batch_no = 0
        self.in_flight = 0

    @activity.defn(name=POLL_ACTIVITY)
    async def poll_trigger(self, inp: PollInput) -> PollResult:
        """Read the row by key; if it is still at the version the workflow armed, hand the fire
        to its type's processor and commit effect, state and next fire time in one transaction.

        Retried by Temporal until it succeeds. A retry after a crash finds the row either still
        at the armed version (the fire is delivered again, as attempt 2, and its effect key keeps
        a second effect out) or already committed (it returns the committed fire time, so the
        re-arm is not lost).
        """
        if self.stopping.is_set():
            raise ApplicationError(
                "worker is stopping; the poll goes to another worker", category=ApplicationErrorCategory.BENIGN
            )
        tq = self.s.task_queue
        costs.count(tq, "activities_executed")
        self.in_flight += 1
        try:
            try:
                async with self.s.pool.connection() as conn:
                    row = await (await conn.execute(self.s.q["read_trigger"], {"id": inp.trigger_id})).fetchone()
            except (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName):
                row = None  # the store was dropped (teardown): end the workflow, do not retry forever
            if row is None:
                return PollResult(fired=False, version=0, fire_at=None)
            version, type_, tenant, prio, fire_at, armed_at, state = row
            if version != inp.version or fire_at is None:
                costs.count(tq, "stale_polls")
                return PollResult(fired=False, version=version, fire_at=None if fire_at is None else us(fire_at))
            processor = self.processors.get(type_)
            if processor is None:
                raise ApplicationError(f"this worker has no processor for timer type {type_!r}")
            due_at = us(fire_at)
            early_s = due_at - time.time()
            if early_s > 0:  # never early (promise 1), whatever the timer's rounding
                await asyncio.sleep(early_s)
            self.batch_no += 1
            fire = Fire(
                inp.trigger_id,
                tenant,
                type_,
                due_at,
                us(armed_at),
                activity.info().attempt,
                self.worker_id,
                self.batch_no,
                state,
                prio,
            )
            costs.count(tq, "fires")
            self.s.claimed_timers += 1  # the poll owns the fire from here; a retry counts again
            outcome = await self._process(processor, fire)
            result, delivered = await self._commit(fire, version, outcome)
            processor.committed([fire], [delivered])
            return result
        finally:
            self.in_flight -= 1

    async def _process(self, processor: Processor, fire: Fire) -> Outcome:
        # Nothing to release on a crash (cancellation): Temporal retries the activity after the
        # failure the worker reports, or after the heartbeat timeout when the process died.
        beat = asyncio.create_task(self._heartbeat())
        try:
            (outcome,) = await processor.process([fire])
            return outcome
        finally:
            beat.cancel()

    async def _heartbeat(self) -> None:
        """A slow poll that is alive keeps its fire: Temporal's heartbeat timeout is the lease."""
        interval_s = self.s.lease_s / 3
        while True:
            await asyncio.sleep(interval_s)
            activity.heartbeat()

    async def _commit(self, fire: Fire, version: int, outcome: Outcome) -> tuple[PollResult, bool]:
        """Next fire time, effect and changed state in one transaction, fenced on the version that
        fired: if the trigger moved while the poll was in flight (or an overlapping attempt after
        a lost heartbeat committed first), nothing of this poll is written and the row's current
        fire time is what the workflow follows."""
        q = self.s.q
        nxt = None if outcome.next_fire_at is None else us(outcome.next_fire_at)
        commit = {"id": fire.timer_id, "version": version, "next_fire_at": nxt, "now": time.time()}
        delivered = False
        async with self.s.pool.connection() as conn:
            if not outcome.effect and outcome.new_state is None:
                # The common case (no new events): one autocommit statement.
                row = await (await conn.execute(q["commit_fire"], commit)).fetchone()
            else:
                async with conn.transaction():
                    row = await (await conn.execute(q["commit_fire"], commit)).fetchone()
                    if row is None:
                        raise psycopg.Rollback()
                    if outcome.effect:
                        cur = await conn.execute(q["record_effect"], {"id": fire.timer_id, "due_at": fire.due_at})
                        delivered = await cur.fetchone() is not None
                    if outcome.new_state is not None:  # unchanged state is not rewritten
                        await conn.execute(q["write_state"], {"id": fire.timer_id, "state": outcome.new_state})
            if row is None:
                row = await (await conn.execute(q["read_trigger"], {"id": fire.timer_id})).fetchone()
                if row is None:
                    return PollResult(fired=True, version=0, fire_at=None), False
                row = (row[0], row[4])
        new_version, fire_at = row[0], row[1]
        return PollResult(True, new_version, None if fire_at is None else us(fire_at)), delivered
