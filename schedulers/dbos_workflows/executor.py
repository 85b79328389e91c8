"""This process's DBOS executor and the bridge from its workflows' poll steps to the run loops.

DBOS is a process-wide singleton (``DBOS(config)`` then ``DBOS.launch()``; ``DBOS.destroy()``
ends it): one process is one DBOS executor, on one system database (here: the run's schema).
:class:`Launch` is one such launch. It starts with the first ``run()`` loop of the process and
ends with the last one; the ``run()`` loops of a process all take fires from it.

* **Where workflow code runs.** DBOS is launched from a worker thread, so it adopts no event
  loop of ours: the workflows it dequeues or recovers run on DBOS's own background loop (its
  own thread). A poll step hands its trigger to the run loops' event loop
  (``run_coroutine_threadsafe``) and awaits the answer there; :meth:`DBOS.destroy` cancels every
  workflow task at once, which is what a crash of this executor must do.
* **Batches.** Each due workflow's poll step is one :class:`DueRequest` on :attr:`Launch.due`;
  a run loop takes up to a batch of them (waiting ``batch_wait_s`` after the first for more),
  reads their rows in one statement, hands the due ones to the processor in one call, and
  commits each group of outcomes in one statement (``queries.sql``: ``fetch_fires``,
  ``commit_fires``). Only then does each step return, and DBOS checkpoint it.
* **Executors and recovery.** Each launch has a fresh executor id and a row in ``executors``
  with a heartbeat. DBOS recovers an executor's pending workflows only when that executor id
  launches again, or when its Conductor control plane tells a live executor to; without
  Conductor, every launch's sweeper does what Conductor would: an executor whose heartbeat is
  older than ``lease_s`` (or that stopped) gets its pending workflows handed back to the queue
  (``DBOS._recover_pending_workflows``, the call Conductor's recovery makes), and any live
  executor dequeues them and replays them from their last checkpoint.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import socket
import threading
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from dbos import DBOS

log = logging.getLogger(__name__)

POLL_RETRY_S = 0.5  # a poll whose batch failed is tried again after this (its fire is redelivered)
STOP_TIMEOUT_S = 60.0  # the longest a stopping launch waits for DBOS.destroy


@dataclass(frozen=True)
class Settings:
    """What the workflow function reads at run time (the same in every process of a run)."""

    queue: str
    wait: str  # "sleep" or "recv"
    fires_per_workflow: int
    delayed_start_lead_s: float  # a new workflow whose fire is further out starts DELAYED (sleep only)


@dataclass
class DueRequest:
    """One woken workflow's poll, waiting on the run loops' event loop."""

    trigger_id: str
    me: str  # the workflow asking
    pred: str | None  # its predecessor, when it is a restarted workflow's successor
    attempt: int  # 1, or the dispatch count of a recovered workflow for its first live poll
    future: asyncio.Future


@dataclass
class Launch:
    """One DBOS launch in this process (see the module docstring)."""

    schema: str
    dsn: str
    settings: Settings
    config: dict[str, Any]
    loop: asyncio.AbstractEventLoop
    store: Any  # the scheduler instance that launched it (its pool, queries and options)
    executor_id: str = ""
    consumers: int = 0
    due: deque[DueRequest] = field(default_factory=deque)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    dead: asyncio.Event = field(default_factory=asyncio.Event)
    tasks: list[asyncio.Task] = field(default_factory=list)
    ended: asyncio.Task | None = None  # DBOS.destroy in flight or done
    # workflow id -> attempt of its next live fire: 2 for a workflow this launch recovered from a
    # dead executor (DBOS keeps no delivery count per step; a recovered workflow's first live
    # poll re-runs the step the dead executor was in, which may have been the wait before it)
    first_attempts: dict[str, int] = field(default_factory=dict)
    recovered: int = 0  # workflows this launch handed back from dead executors
    # clear while a sweep hands workflows back: DBOS may run a recovered workflow's step before
    # the sweep has noted its attempt, so steps wait for the sweep to finish noting
    settled: asyncio.Event = field(default_factory=asyncio.Event)

    # -- the step side (called from DBOS's loop, run here) -------------------------------------

    async def request(self, trigger_id: str, me: str, pred: str | None) -> list[Any] | None:
        await self.settled.wait()
        attempt = self.first_attempts.pop(me, 1)
        while True:
            future = self.loop.create_future()
            self.due.append(DueRequest(trigger_id, me, pred, attempt, future))
            self.wake.set()
            try:
                return await future
            except asyncio.CancelledError:
                raise
            except Exception:
                # The batch failed (processor or store error; the run loop logged it) before it
                # committed: the fire is delivered again, as a lease lapse would deliver it.
                attempt += 1
                await asyncio.sleep(POLL_RETRY_S)

    # -- the run loops' side -------------------------------------------------------------------

    async def take(self, limit: int, wait_s: float, tick_s: float) -> list[DueRequest]:
        """Up to ``limit`` due requests: waits up to ``tick_s`` for the first, then ``wait_s``
        for more (a batch of one per woken workflow would cost a commit per fire)."""
        if not self.due:
            self.wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), tick_s)
        if not self.due:
            return []
        if len(self.due) < limit and wait_s > 0:
            await asyncio.sleep(wait_s)
        out: list[DueRequest] = []
        while self.due and len(out) < limit:
            r = self.due.popleft()
            if not r.future.done():  # a cancelled step (its executor died) asks nothing more
                out.append(r)
        return out


# -- the process's one launch --------------------------------------------------------------------

_current: Launch | None = None
_ending: asyncio.Future | None = None  # the last launch's DBOS.destroy: a new launch waits for it
_guard = threading.Lock()  # _current is read from DBOS's threads
_lock: asyncio.Lock | None = None
_lock_loop: asyncio.AbstractEventLoop | None = None
_launches = itertools.count(1)


def _async_lock() -> asyncio.Lock:
    global _lock, _lock_loop
    loop = asyncio.get_running_loop()
    if _lock is None or _lock_loop is not loop:
        _lock, _lock_loop = asyncio.Lock(), loop
    return _lock


def current(schema: str) -> Launch | None:
    with _guard:
        launch = _current
    return launch if launch is not None and launch.schema == schema and not launch.dead.is_set() else None


def settings(schema: str) -> Settings | None:
    launch = current(schema)
    return None if launch is None else launch.settings


async def poll(schema: str, trigger_id: str, me: str, pred: str | None) -> list[Any] | None:
    """The poll step's body, on DBOS's loop: ask this process's run loops, wait for the answer."""
    launch = current(schema)
    if launch is None:
        return None
    future = asyncio.run_coroutine_threadsafe(launch.request(trigger_id, me, pred), launch.loop)
    return await asyncio.wrap_future(future)


async def take_over(schema: str, trigger_id: str, me: str, pred: str) -> list[Any] | None:
    launch = current(schema)
    if launch is None:
        return None
    future = asyncio.run_coroutine_threadsafe(launch.store.take_over(trigger_id, me, pred), launch.loop)
    return await asyncio.wrap_future(future)


def successor_id(workflow_id: str) -> str:
    """The id of the fresh workflow a restarting one enqueues: ``<id>~1``, ``~2``, ..."""
    base, sep, n = workflow_id.rpartition("~")
    if sep and n.isdigit():
        return f"{base}~{int(n) + 1}"
    return f"{workflow_id}~1"


def new_executor_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{next(_launches)}"


async def acquire(schema: str, make: Callable[[], Launch]) -> Launch:
    """This process's launch for ``schema`` (launching DBOS when there is none), one more consumer
    on it. A process runs one DBOS, so a launch for another schema is an error."""
    global _current
    async with _async_lock():
        if _ending is not None and not _ending.done():
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(_ending), STOP_TIMEOUT_S)
        with _guard:
            launch = _current
        if launch is not None and launch.schema != schema:
            raise RuntimeError(
                f"dbos_workflows: this process already runs DBOS for schema {launch.schema!r}; DBOS is one "
                f"executor per process, so a second store ({schema!r}) needs a process of its own"
            )
        if launch is None:
            launch = make()
            await _start(launch)
            with _guard:
                _current = launch
        launch.consumers += 1
        return launch


async def release(launch: Launch, crashed: bool) -> None:
    """A run loop leaves. A crash ends the executor at once (DBOS.destroy cancels every
    workflow it runs, nothing is released: its workflows stay pending until another executor's
    sweeper finds its heartbeat silent); the last graceful leaver stops it and marks it
    stopped, so its pending workflows are recovered at once."""
    launch.consumers -= 1
    if crashed:
        end(launch, stopped=False)
    elif launch.consumers <= 0:
        end(launch, stopped=True)
        await _wait_ended(launch)


def end(launch: Launch, stopped: bool) -> asyncio.Task:
    """End ``launch`` (idempotent): stop its background tasks and destroy DBOS in a thread."""
    global _current, _ending
    if launch.ended is None:
        launch.dead.set()
        for task in launch.tasks:
            task.cancel()
        with _guard:
            if _current is launch:
                _current = None
        launch.ended = _ending = asyncio.ensure_future(_destroy(launch, stopped))
    return launch.ended


async def end_for(schema: str) -> None:
    """Teardown: end this process's launch for ``schema``, if any, and wait for it."""
    with _guard:
        launch = _current
    if launch is not None and launch.schema == schema:
        end(launch, stopped=True)
        await _wait_ended(launch)


async def _wait_ended(launch: Launch) -> None:
    if launch.ended is not None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.shield(launch.ended), STOP_TIMEOUT_S)


async def _start(launch: Launch) -> None:
    launch.executor_id = new_executor_id()
    config = dict(launch.config, executor_id=launch.executor_id)
    DBOS(config=config)
    try:
        # From a worker thread: DBOS then adopts no event loop of ours (module docstring).
        await asyncio.to_thread(DBOS.launch)
    except BaseException:
        await asyncio.to_thread(DBOS.destroy)
        raise
    launch.settled.set()
    await launch.store.executor_registered(launch.executor_id)
    launch.tasks.append(asyncio.ensure_future(_every(launch.store.heartbeat_s, launch, _heartbeat)))
    launch.tasks.append(asyncio.ensure_future(_every(launch.store.sweep_s, launch, _sweep)))


async def _destroy(launch: Launch, stopped: bool) -> None:
    if stopped:
        with contextlib.suppress(Exception):
            await launch.store.executor_stopped(launch.executor_id)
    await asyncio.to_thread(DBOS.destroy)
    for r in launch.due:
        if not r.future.done():
            r.future.cancel()
    launch.due.clear()


async def _every(period_s: float, launch: Launch, job: Callable[[Launch], Awaitable[None]]) -> None:
    while True:
        await asyncio.sleep(period_s)
        try:
            await job(launch)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("dbos_workflows: %s failed; trying again", job.__name__)


async def _heartbeat(launch: Launch) -> None:
    await launch.store.executor_heartbeat(launch.executor_id)


async def _sweep(launch: Launch) -> None:
    """Hand the pending workflows of stopped or silent executors back to the queue."""
    gone = await launch.store.executors_gone(launch.executor_id)
    if not gone:
        return
    launch.settled.clear()
    try:
        handles = await asyncio.to_thread(DBOS._recover_pending_workflows, gone)
        launch.recovered += len(handles)
        for h in handles:  # their next live poll redelivers the fire they were polling, if any
            launch.first_attempts[h.get_workflow_id()] = 2
    finally:
        launch.settled.set()
    await launch.store.executors_forget(gone)
    log.info("dbos_workflows: recovered %d workflows of executors %s", len(handles), ", ".join(gone))


class _DropExpectedCancellations(logging.Filter):
    """DBOS warns for every workflow task cancelled by DBOS.destroy; here that is how an
    executor stops or crashes, thousands at a time."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Asyncio task cancelled for workflow or step")


logging.getLogger("dbos").addFilter(_DropExpectedCancellations())
