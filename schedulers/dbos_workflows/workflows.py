"""The DBOS workflow of dbos_workflows: one durable workflow per trigger.

Registered with DBOS at import (DBOS keeps a process-wide registry that outlives launches).
The workflow waits for its fire time with a durable wait (``DBOS.sleep_async``, or
``DBOS.recv_async`` with a timeout when ``wait=recv``, so a move can wake it), then runs one
poll step, which hands the trigger to this process's run loops (:mod:`.executor`) and returns
the trigger's next fire time once the fire committed; it loops, and after
``fires_per_workflow`` fires it enqueues a fresh workflow for the trigger and returns (DBOS
replays a workflow's whole step history on recovery, so an unbounded loop must not stay one
workflow).

Determinism (DBOS replays the workflow function on recovery): every branch depends only on
checkpointed values (the poll step's output, the workflow's inputs). The wait's length is
computed from the clock, but DBOS checkpoints the wait's end, so a replay waits for the
recorded end, never for a new one; it is never 0, because DBOS records no wait of 0 seconds
and a replay would then see a different step sequence.
"""

from __future__ import annotations

import time
from typing import Any

from dbos import DBOS

from schedulers.dbos_workflows import executor

TRIGGER_WORKFLOW = "timerbench_dbos_trigger"
POLL_STEP = "timerbench_dbos_poll"
TAKE_OVER_STEP = "timerbench_dbos_take_over"
ARM_TOPIC = "arm"  # wait=recv: the topic arm() wakes a holder on
MIN_WAIT_S = 0.001  # a durable wait is always recorded (see above)


@DBOS.step(name=POLL_STEP, retries_allowed=False)
async def poll_step(store: str, trigger_id: str, me: str, pred: str | None) -> list[Any] | None:
    """One poll: ``[next_fire_at, fired]`` (``next_fire_at`` None: finished), or None when this
    workflow has nothing left to do (no longer the holder, or the store is gone). Retries on
    its own (:meth:`executor.Launch.poll`): an exception here would end the workflow for good."""
    return await executor.poll(store, trigger_id, me, pred)


@DBOS.step(name=TAKE_OVER_STEP, retries_allowed=False)
async def take_over_step(store: str, trigger_id: str, me: str, pred: str) -> list[Any] | None:
    """wait=recv only: a restarted workflow's successor becomes the holder before it listens,
    in one statement with the read of the row's fire time, so that no move falls in between."""
    return await executor.take_over(store, trigger_id, me, pred)


@DBOS.workflow(name=TRIGGER_WORKFLOW)
async def trigger_workflow(
    store: str, trigger_id: str, me: str, pred: str | None, fire_at: float | None, wait_first: bool = True
) -> None:
    """``fire_at`` is the first fire time; ``wait_first`` False (arm() decided it from the clock
    when it enqueued this workflow, so it is an input and a replay takes the same branch): that
    fire is due already, and the first poll goes without a durable wait before it."""
    settings = executor.settings(store)
    if settings is None:
        return  # this process runs no store of that name (its run ended): nothing to fire
    if settings.wait == "recv" and pred is not None:
        taken = await take_over_step(store, trigger_id, me, pred)
        if taken is None:
            return
        fire_at, pred = taken[0], None
    wake_at = fire_at if wait_first else None
    fired = 0
    while True:
        if wake_at is not None:
            wait_s = max(MIN_WAIT_S, wake_at - time.time())
            if settings.wait == "recv":
                await DBOS.recv_async(ARM_TOPIC, timeout_seconds=wait_s)
            else:
                await DBOS.sleep_async(wait_s)
        answer = await poll_step(store, trigger_id, me, pred)
        if answer is None:
            return
        wake_at, did_fire = answer
        if wake_at is None:
            return  # finished
        fired += 1 if did_fire else 0
        if fired >= settings.fires_per_workflow:
            successor = executor.successor_id(me)
            options: dict[str, Any] = {
                "workflow_name": TRIGGER_WORKFLOW,
                "queue_name": settings.queue,
                "workflow_id": successor,
            }
            # Like arm(): a successor whose fire is far enough out waits DELAYED on the queue, not
            # running (with fires_per_workflow=1 every fire is a workflow DBOS's queue starts when
            # its delay ends). The clock only sets the delay of a checkpointed enqueue: a replay
            # returns the recorded child and enqueues nothing.
            delay_s = wake_at - settings.delayed_start_lead_s - time.time()
            if settings.wait == "sleep" and settings.delayed_start_lead_s > 0 and delay_s > 0:
                options["delay_seconds"] = delay_s
            await DBOS.enqueue_workflow_with_options_async(
                options,
                store,
                trigger_id,
                successor,
                me,
                wake_at,
            )
            return
