"""The workflow of temporal_per_trigger: one long-running workflow per trigger.

It sleeps on a durable timer until the trigger's fire time, runs one poll activity (which fires
the trigger and commits its next fire time in Postgres), follows the fire time the poll
returns, and sleeps again. Arming or moving the trigger signals it (signal-with-start). It
continues as new, carrying only the trigger's fire time and version, past a bounded history or
when the server suggests it, and returns when the trigger is finished (a later arm starts a new
execution under the same id).

It runs in the Temporal workflow sandbox rules: deterministic, no I/O, time from
``workflow.now()``. The poll activity is referred to by name so this module never imports
psycopg.

Versions: the Postgres row's ``version`` bumps on every arm and every commit. The workflow
follows the highest version it has heard of, from a signal or from a poll's answer; a poll only
fires the version its workflow armed. So when a move arrives while a poll is in flight, the
poll's commit is fenced out in Postgres and the workflow keeps the moved fire time: only the
latest fire time of an id fires (promise 4).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

from schedulers.temporal_per_trigger import costs

TRIGGER_WORKFLOW = "TriggerTimer"
ARM_SIGNAL = "arm"
POLL_ACTIVITY = "poll_trigger"


@dataclass
class TriggerConfig:
    """Carried in the input so it survives Continue-As-New."""

    task_queue: str
    history_bound: int  # events; continue as new past this (or when the server suggests it)
    lease_s: float  # poll activity heartbeat timeout: a dead worker's poll is retried after it
    retry_initial_s: float  # first retry of a failed poll activity


@dataclass
class TriggerInput:
    trigger_id: str
    config: TriggerConfig
    fire_at: float | None = None  # epoch seconds; None: finished
    version: int = 0  # 0: not armed yet (the start signal brings the first arm)
    continued: int = 0  # how many times this trigger's workflow continued as new


@dataclass
class ArmSignal:
    fire_at: float | None  # the arm's fire time (arm() resolves fire_at=None to the arm time);
    # None only from disarm(): the trigger is finished
    version: int  # the row's version after the arm (or the disarm)


@dataclass
class PollInput:
    trigger_id: str
    version: int  # the version this workflow armed: the only one the poll may fire


@dataclass
class PollResult:
    fired: bool  # a fire went to a processor
    version: int  # the row's version after the poll; 0: the row is gone
    fire_at: float | None  # the row's fire time after the poll; None: finished


def _count(cfg: TriggerConfig, name: str) -> None:
    if not workflow.unsafe.is_replaying():  # a replay after cache eviction must not count again
        costs.count(cfg.task_queue, name)


@workflow.defn(name=TRIGGER_WORKFLOW)
class TriggerWorkflow:
    @workflow.init
    def __init__(self, inp: TriggerInput) -> None:
        self.fire_at = inp.fire_at
        self.version = inp.version
        self.woken = False

    @workflow.signal(name=ARM_SIGNAL)
    def arm(self, sig: ArmSignal) -> None:
        self._follow(sig.version, sig.fire_at)

    @workflow.query(name="armed")
    def armed(self) -> list:
        return [self.fire_at, self.version]

    def _follow(self, version: int, fire_at: float | None) -> None:
        """Take a fire time if it is newer than the one held (a re-sent or late signal is not)."""
        if version > self.version:
            self.version, self.fire_at = version, fire_at
            self.woken = True

    @workflow.run
    async def run(self, inp: TriggerInput) -> None:
        cfg = inp.config
        if self.version == 0:
            await workflow.wait_condition(lambda: self.version > 0)
        while self.fire_at is not None:
            if self._should_continue(cfg):
                await workflow.wait_condition(workflow.all_handlers_finished)
                _count(cfg, "continue_as_new")
                workflow.continue_as_new(
                    TriggerInput(inp.trigger_id, cfg, self.fire_at, self.version, inp.continued + 1)
                )
            wait_s = self.fire_at - workflow.now().timestamp()
            if wait_s > 0:
                # The durable timer; a move (signal) wakes the loop to sleep for the new time.
                self.woken = False
                try:
                    await workflow.wait_condition(lambda: self.woken, timeout=timedelta(seconds=wait_s))
                except TimeoutError:
                    pass
                continue
            polled_version = self.version
            result: PollResult = await workflow.execute_activity(
                POLL_ACTIVITY,
                PollInput(inp.trigger_id, self.version),
                result_type=PollResult,
                start_to_close_timeout=timedelta(days=1),  # liveness comes from the heartbeat
                heartbeat_timeout=timedelta(seconds=cfg.lease_s),
                retry_policy=RetryPolicy(
                    initial_interval=timedelta(seconds=cfg.retry_initial_s),
                    backoff_coefficient=2.0,
                    maximum_interval=timedelta(seconds=max(1.0, cfg.lease_s)),
                    maximum_attempts=0,  # a fire is never given up: at least once
                ),
            )
            if result.version == 0:
                break  # the row is gone (the store was dropped): nothing left to fire
            if result.version >= self.version or self.version == polled_version:
                # The row is the truth (a commit, or an arm whose signal is still on its way; or,
                # with no newer signal meanwhile, a store reset under a running workflow, which
                # must not poll the same stale fire time forever). A newer signal that arrived
                # during the poll has already raised self.version and stays.
                self.version, self.fire_at = result.version, result.fire_at
        _count(cfg, "workflows_completed")

    def _should_continue(self, cfg: TriggerConfig) -> bool:
        info = workflow.info()
        return info.is_continue_as_new_suggested() or info.get_current_history_length() >= cfg.history_bound
