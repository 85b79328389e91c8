"""Temporal plumbing shared by the Temporal-backed designs, as :mod:`schedulers.pg` is for
Postgres: the client, the workflow runner with its sandbox settings, and a worker's lifecycle
inside ``run()``. Each design keeps its workflows, activities and tables in its own folder.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import Awaitable, Callable
from typing import Any

from temporalio.client import Client
from temporalio.converter import (
    AdvancedJSONEncoder,
    CompositePayloadConverter,
    DataConverter,
    DefaultPayloadConverter,
    JSONPlainPayloadConverter,
)
from temporalio.worker import UnsandboxedWorkflowRunner, Worker, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from schedulers.base import RunLoop, StoreContext

ALIVE_EVERY_S = 0.5  # how often a running worker's loop reports itself alive (last_tick_at)


class FieldsJSONEncoder(AdvancedJSONEncoder):
    """The SDK's JSON encoder, except that a dataclass becomes a mapping of its own fields and
    the C encoder walks the rest. ``dataclasses.asdict`` first copies every nested list in
    Python: with a batch of timers in a workflow input, that copy cost more than the encoding
    (temporal_shards' MEASUREMENTS.md). The JSON is the same."""

    def default(self, o: Any) -> Any:
        if dataclasses.is_dataclass(o) and not isinstance(o, type):
            return {f.name: getattr(o, f.name) for f in dataclasses.fields(o)}
        return super().default(o)


class PayloadConverter(CompositePayloadConverter):
    """The SDK's default payload converters, the JSON one with :class:`FieldsJSONEncoder`."""

    def __init__(self) -> None:
        super().__init__(
            *(
                JSONPlainPayloadConverter(encoder=FieldsJSONEncoder) if isinstance(c, JSONPlainPayloadConverter) else c
                for c in DefaultPayloadConverter.default_encoding_payload_converters
            )
        )


DATA_CONVERTER = dataclasses.replace(DataConverter.default, payload_converter_class=PayloadConverter)


async def connect(ctx: StoreContext) -> Client:
    """A client of the run's Temporal namespace. One per worker: the SDK refuses two workers
    for one task queue on one client, and several run() loops may share a scheduler."""
    return await Client.connect(ctx.temporal_address, namespace=ctx.temporal_namespace, data_converter=DATA_CONVERTER)


def workflow_runner(sandbox: bool = True) -> WorkflowRunner:
    """The SDK's sandbox, with this package passed through (workflow modules import their
    dataclasses from it, and re-importing it per workflow would cost every activation), or none."""
    if not sandbox:
        return UnsandboxedWorkflowRunner()
    return SandboxedWorkflowRunner(restrictions=SandboxRestrictions.default.with_passthrough_modules("schedulers"))


async def serve(
    worker: Worker,
    stop: asyncio.Event,
    stopping: asyncio.Event,
    in_flight: Callable[[], int],
    drain_s: float,
    alive: Callable[[float], None],
    started: Callable[[], Awaitable[None]] | None = None,
    every_tick: Callable[[], Awaitable[None]] | None = None,
) -> bool:
    """Run ``worker`` until ``stop`` is set or the worker dies, the way every design's ``run()``
    ends (:class:`schedulers.base.RunLoop`): cancelling is a crash (the worker goes away
    mid-batch, awaited so it is gone when this returns, and nothing is released); a stop is
    graceful (``stopping`` is set so activities take no new work, in-flight ones get up to
    ``drain_s`` to commit, then the worker shuts down). The worker polling its task queue is the
    design's tick: ``alive(now)`` is called every :data:`ALIVE_EVERY_S` while it runs (health
    checks read it), and ``every_tick`` after each. Returns True after a graceful stop, False
    when the worker ended on its own; raises the worker's error if it died of one."""
    async with RunLoop() as loop:
        worker_task = loop.keep(worker.run(), join=True)
        if started is not None:
            await started()
        stop_task = asyncio.create_task(stop.wait())
        try:
            while True:
                alive(time.time())
                done, _ = await asyncio.wait(
                    {worker_task, stop_task}, timeout=ALIVE_EVERY_S, return_when=asyncio.FIRST_COMPLETED
                )
                if done:
                    break
                if every_tick is not None:
                    await every_tick()
        finally:
            stop_task.cancel()
        if worker_task.done():
            worker_task.result()  # the worker died: say why
            return False
        stopping.set()
        deadline = time.time() + drain_s
        while in_flight() and time.time() < deadline:
            await asyncio.sleep(0.05)
        await worker.shutdown()
        with contextlib.suppress(asyncio.CancelledError):
            await worker_task
        return True
