"""A scheduler node (``bench serve``): claim loop, polling processor, HTTP API (:mod:`harness.node_api`).

The node sets the scheduler up in ``--schema`` (idempotent: several nodes share one store),
runs its claim loop with the polling processor of ``--workload`` (the population is rebuilt
from the workload and its seed, so every node and ``bench run`` agree on trigger ids), and
serves :mod:`harness.node_api`'s API.

Signals: SIGTERM / SIGINT stop gracefully (the loop releases its batch, records are written);
SIGUSR1 kills the claim loop as a crash would, leaving the API up so that ``/health/ready``
can be seen to turn 503 (health-endpoints: a dead tick loop behind a green API). A node started by
``bench run --nodes`` (``TIMERBENCH_PARENT_PID`` in its environment) also stops gracefully when
that run process is gone, so a run killed with SIGKILL leaves no node claiming behind it.

``--record DIR`` writes, for ``bench run --nodes N`` to merge (``<W>`` is the worker id):

* ``fires-<W>.<seq>.parquet``: every fire this node received (:data:`metrics.rundir.FIRES_SCHEMA`;
  :mod:`metrics.parts` writes and merges them), in parts written whole as the node goes (a killed
  node keeps what it wrote), and ``late-<W>.npy``: rows (numbered across the parts) whose effect
  was committed after they were written;
* ``holds-<W>.parquet``: when the node held each fire (received, committed), for the
  double-hold check;
* ``state-<W>.npz``: the polling processor's ``armed_due``, ``armed_at``, ``received_due``,
  ``skipped_due`` and the scheduler's ``claimed_timers`` at graceful stop (the run's accounting);
* ``node-<W>.json``: worker id, pid, start and stop times, counters.

Neither the DSN's password nor the token is ever printed.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import numpy as np

from harness.errors import BenchError
from metrics import rundir

REARM_UNTIL_ENV = "TIMERBENCH_REARM_UNTIL"  # epoch s from which fires are finished, not re-armed
GRACEFUL_STOP_S = 15.0  # a claim loop that ignores ``stop`` this long is cancelled
PARENT_PID_ENV = "TIMERBENCH_PARENT_PID"  # set by bench run for its children: stop when this pid is gone
PARENT_CHECK_S = 0.5
FLUSH_EVERY_S = 1.0
PROBE_TIMEOUT_S = 2


def _say(msg: str) -> None:
    print(msg, flush=True)


async def serve_node(
    cls,
    options: dict[str, Any],
    w,
    dsn: str | None,
    temporal_address: str | None,
    schema: str,
    host: str,
    port: int,
    token: str | None,
    worker_id: str,
    record: Path | None,
) -> int:
    from aiohttp import web

    from harness import stack
    from harness.node_api import LoadSink, Node
    from loadgen.population import build
    from loadgen.processor import PollingProcessor, progress_snapshot
    from metrics.parts import DiscardingRecorder, HoldLog, PartRecorder
    from schedulers.base import StoreContext, create

    started_at = time.time()
    ctx = StoreContext(dsn=dsn, schema=schema, temporal_address=temporal_address, state_bytes=w.state_bytes)
    scheduler = create(cls.name, ctx, **options)
    where = f"schema {schema}" + (f" on {stack.redact_dsn(dsn)}" if dsn else "")
    _say(f"setting up {cls.name} in {where} ...")
    await scheduler.setup()
    population = build(w)
    recorder = PartRecorder(record, worker_id) if record is not None else DiscardingRecorder()
    processor = PollingProcessor(w, population, recorder)
    sink = LoadSink()
    holds = HoldLog() if record is not None else None
    index = processor.index

    def on_armed(timers, armed_at: float) -> None:
        # population ids armed over HTTP count for the undelivered-fire accounting like the run's own arms
        idx = [index.get(t.id, -1) for t in timers]
        known = [(i, t.fire_at) for i, t in zip(idx, timers) if i >= 0]
        if not known:
            return
        ii = np.array([i for i, _ in known], np.int64)
        due = np.array([np.nan if f is None else f for _, f in known])  # None: the backend's clock decides
        processor.note_armed(ii, due, armed_at)

    def progress() -> bytes:
        buf = io.BytesIO()
        np.savez(
            buf,
            **progress_snapshot(processor),
            rows=np.array([recorder.rows]),
            claimed_timers=np.array([int(scheduler.claimed_timers)]),
        )
        return buf.getvalue()

    def on_rearm_until(at: float) -> None:
        processor.rearm_until = at

    # a node started during the run (a fault's replacement) learns where re-arming stops here
    if os.environ.get(REARM_UNTIL_ENV):
        on_rearm_until(float(os.environ[REARM_UNTIL_ENV]))
    node = Node(
        scheduler,
        {"poll": processor, "load": sink},
        worker_id,
        probes=_probes(dsn, temporal_address),
        token=token,
        holds=holds,
        on_armed=on_armed,
        progress=progress,
        on_rearm_until=on_rearm_until,
    )
    shutdown = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, shutdown.set)
    loop.add_signal_handler(signal.SIGUSR1, node.kill_loop)

    runner = web.AppRunner(node.app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        await scheduler.teardown(drop=False)
        raise BenchError(f"cannot listen on {host}:{port}: {exc.strerror or exc}", exit_code=2) from None
    bound = runner.addresses[0][1] if runner.addresses else port
    if not token and host not in ("127.0.0.1", "localhost", "::1"):
        _say(f"warning: listening on {host} without a token: anyone who can reach it can arm timers")
    node.start_loop()
    _say(
        f"serving http://{host}:{bound} worker={worker_id} scheduler={cls.name} schema={schema} "
        f"triggers={len(population)} token={'required' if token else 'none'}"
    )

    flusher = asyncio.create_task(_flush(recorder, shutdown))
    watchdog = asyncio.create_task(exit_with_parent(shutdown))
    await shutdown.wait()
    watchdog.cancel()
    _say("stopping: finishing the claim loop's batch ...")
    node.stop.set()
    graceful = True
    if node.loop_task is not None and not node.loop_task.done():
        try:
            await asyncio.wait_for(asyncio.shield(node.loop_task), GRACEFUL_STOP_S)
        except TimeoutError:
            node.loop_task.cancel()
            graceful = False
            _say(f"warning: the claim loop did not stop within {GRACEFUL_STOP_S:g} s; cancelled it")
        except BaseException:
            pass
    if node.loop_task is not None:
        await asyncio.gather(node.loop_task, return_exceptions=True)
    await asyncio.gather(flusher, return_exceptions=True)
    recorder.close()
    if record is not None:
        np.savez(
            rundir.node_state(record, worker_id),
            **progress_snapshot(processor),
            claimed_timers=np.array([int(scheduler.claimed_timers)]),
        )
        holds.write(record, worker_id)
        meta = {
            "worker": worker_id,
            "pid": os.getpid(),
            "started_at": started_at,
            "stopped_at": time.time(),
            "graceful": graceful,
            "loop_error": node.loop_error,
            "fires": recorder.rows,
            "load_fires": sink.fires,
            "unknown_fires": processor.unknown,
            "late_effects": recorder.late_effects,
            "unmatched_commits": recorder.unmatched_commits,
        }
        rundir.node_meta(record, worker_id).write_text(json.dumps(meta, indent=2) + "\n")
    await runner.cleanup()
    try:
        await asyncio.wait_for(scheduler.teardown(drop=False), 30)
    except Exception as exc:
        _say(f"warning: teardown failed: {type(exc).__name__}")
    _say(f"stopped (fires received: {recorder.rows})")
    return 0


def _probes(dsn: str | None, temporal_address: str | None):
    probes = []
    if dsn:

        async def postgres() -> None:
            import psycopg

            conn = await psycopg.AsyncConnection.connect(dsn, connect_timeout=PROBE_TIMEOUT_S, autocommit=True)
            try:
                await conn.execute("SELECT 1")
            finally:
                await conn.close()

        probes.append(postgres)
    if temporal_address:
        host, _, port = temporal_address.rpartition(":")

        async def temporal() -> None:
            # reachability of the frontend; a full client handshake per probe would cost more
            # than the check is worth
            _, writer = await asyncio.open_connection(host or "127.0.0.1", int(port))
            writer.close()
            await writer.wait_closed()

        probes.append(temporal)
    return probes


def parent_pid() -> int | None:
    """The run process this one belongs to (``TIMERBENCH_PARENT_PID``), if any."""
    text = os.environ.get(PARENT_PID_ENV, "")
    return int(text) if text.isdigit() else None


async def exit_with_parent(shutdown: asyncio.Event) -> None:
    """Set ``shutdown`` once the run process that started this one is gone (this process is then
    re-parented, so ``getppid`` changes: exact, unlike a pid that may be reused)."""
    parent = parent_pid()
    if parent is None:
        return
    while not shutdown.is_set():
        if os.getppid() != parent:
            _say(f"the run process {parent} is gone: stopping")
            shutdown.set()
            return
        await asyncio.sleep(PARENT_CHECK_S)


async def _flush(recorder, stop: asyncio.Event) -> None:
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), FLUSH_EVERY_S)
        except TimeoutError:
            pass
        try:
            await recorder.maybe_flush(time.time())
        except Exception as exc:
            _say(f"warning: writing fires failed: {type(exc).__name__}: {exc}")
