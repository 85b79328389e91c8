"""``bench serve``: one long-running scheduler node (claim loop, polling processor, HTTP API).

The node sets the scheduler up in ``--schema`` (idempotent: several nodes share one store),
runs its claim loop with the polling processor of ``--workload`` (the population is rebuilt
from the workload and its seed, so every node and ``bench run`` agree on trigger ids), and
serves :mod:`bench.serve`'s API.

Signals: SIGTERM / SIGINT stop gracefully (the loop releases its batch, records are written);
SIGUSR1 kills the claim loop as a crash would, leaving the API up so that ``/health/ready``
can be seen to turn 503 (seeds/000: a dead tick loop behind a green API).

``--record DIR`` writes, for ``bench run --nodes N`` to merge (``<W>`` is the worker id):

* ``fires-<W>.<seq>.parquet``: every fire this node received (:data:`metrics.rundir.FIRES_SCHEMA`),
  in parts written whole as the node goes (a killed node keeps what it wrote), and
  ``late-<W>.npy``: rows (numbered across the parts) whose effect was committed after they were
  written;
* ``holds-<W>.parquet``: when the node held each fire (received, committed), for the
  double-hold check;
* ``state-<W>.npz``: the polling processor's ``armed_due``, ``armed_at``, ``received_due``
  at graceful stop (missed-fire accounting);
* ``node-<W>.json``: worker id, pid, start and stop times, counters.

Neither the DSN's password nor the token is ever printed.
"""

from __future__ import annotations

import asyncio
import io
import json
import math
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import click
import numpy as np
import pyarrow.parquet as pq

from bench.cli import resolve_servers, scheduler_options, stack_options
from bench.errors import BenchError, UsageError
from metrics.recorder import FLUSH_AFTER_S, FireRecorder

GRACEFUL_STOP_S = 15.0  # a claim loop that ignores ``stop`` this long is cancelled
FLUSH_EVERY_S = 1.0
PART_EVERY_S = 2.0  # a recording node writes a fire-log part about this often
PROBE_TIMEOUT_S = 2


@click.command("serve")
@click.option("--scheduler", "scheduler_name", required=True, help="A registered scheduler (see `bench schedulers`).")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind (loopback unless told).")
@click.option("--port", default=8080, show_default=True, type=int, help="TCP port; 0 picks a free one.")
@click.option("--token", envvar="TIMERBENCH_TOKEN", default=None,
              help="Require 'Authorization: Bearer <token>' on /timers, /metrics, /progress (env TIMERBENCH_TOKEN).")
@click.option("--schema", default="timerbench", show_default=True, help="Postgres schema of the store.")
@click.option("--workload", "workload_spec", default="smoke", show_default=True,
              help="Preset or YAML file: the population the polling processor knows.")
@click.option("--opt", "opts", multiple=True, help="Scheduler option key=value (repeatable).")
@click.option("--worker-id", default=None, help="Owner id of this node's claims (default: serve-<host>-<pid>).")
@click.option("--record", "record_dir", default=None, help="Directory for this node's fire log and state.")
@stack_options
def serve(scheduler_name, host, port, token, schema, workload_spec, opts, worker_id, record_dir, dsn,
          temporal_address) -> None:
    """Run one scheduler node with an HTTP API (PUT /timers, /health/live, /health/ready, /metrics)."""
    from loadgen import workload as wl
    from schedulers.base import UnknownScheduler, scheduler_class

    try:
        cls = scheduler_class(scheduler_name)
    except UnknownScheduler as exc:
        raise UsageError(str(exc)) from None
    try:
        w = wl.load(workload_spec).resolved()
    except (ValueError, TypeError) as exc:
        raise UsageError(str(exc)) from None
    options = scheduler_options(cls, opts)
    if not (0 <= port < 65536):
        raise UsageError(f"bad --port {port}; use 0..65535 (0 picks a free port)")


    resolved_dsn, address = resolve_servers([cls], dsn, temporal_address)
    worker_id = worker_id or f"serve-{os.uname().nodename}-{os.getpid()}"
    record = Path(record_dir) if record_dir else None
    if record is not None:
        record.mkdir(parents=True, exist_ok=True)
    code = asyncio.run(serve_node(cls, options, w, resolved_dsn, address, schema, host, port, token or None,
                                  worker_id, record))
    if code:
        sys.exit(code)


def _say(msg: str) -> None:
    click.echo(msg)
    sys.stdout.flush()


async def serve_node(cls, options: dict[str, Any], w, dsn: str | None, temporal_address: str | None, schema: str,
                     host: str, port: int, token: str | None, worker_id: str, record: Path | None) -> int:
    from aiohttp import web

    from bench import stack
    from bench.serve import HoldLog, LoadSink, Node
    from loadgen.population import build
    from loadgen.processor import PollingProcessor
    from schedulers.base import StoreContext, create

    started_at = time.time()
    ctx = StoreContext(dsn=dsn, schema=schema, temporal_address=temporal_address, state_bytes=w.state_bytes)
    scheduler = create(cls.name, ctx, **options)
    where = f"schema {schema}" + (f" on {stack.redact_dsn(dsn)}" if dsn else "")
    _say(f"setting up {cls.name} in {where} ...")
    await scheduler.setup()
    population = build(w)
    recorder = _recorder(record, worker_id)
    processor = PollingProcessor(w, population, recorder)
    sink = LoadSink()
    holds = HoldLog() if record is not None else None
    index = processor.index

    def on_armed(timers, armed_at: float) -> None:
        # population ids armed over HTTP count for missed-fire accounting like the run's own arms
        idx = [index.get(t.id, -1) for t in timers]
        known = [(i, t.fire_at) for i, t in zip(idx, timers) if i >= 0]
        if not known:
            return
        ii = np.array([i for i, _ in known], np.int64)
        due = np.array([np.nan if f is None else f for _, f in known])  # None: the backend's clock decides
        processor.note_armed(ii, due, armed_at)

    def progress() -> bytes:
        buf = io.BytesIO()
        np.savez(buf, armed_due=processor.armed_due, armed_at=processor.armed_at,
                 received_due=processor.received_due, rows=np.array([recorder.rows]))
        return buf.getvalue()

    node = Node(scheduler, {"poll": processor, "load": sink}, worker_id, probes=_probes(dsn, temporal_address),
                token=token, holds=holds, on_armed=on_armed, progress=progress)
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
    _say(f"serving http://{host}:{bound} worker={worker_id} scheduler={cls.name} schema={schema} "
         f"triggers={len(population)} token={'required' if token else 'none'}")

    flusher = asyncio.create_task(_flush(recorder, shutdown))
    await shutdown.wait()
    _say("stopping: finishing the claim loop's batch ...")
    node.stop.set()
    graceful = True
    if node.loop_task is not None and not node.loop_task.done():
        try:
            await asyncio.wait_for(asyncio.shield(node.loop_task), GRACEFUL_STOP_S)
        except (TimeoutError, asyncio.TimeoutError):
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
        np.savez(record / f"state-{worker_id}.npz", armed_due=processor.armed_due, armed_at=processor.armed_at,
                 received_due=processor.received_due)
        pq.write_table(holds.table(worker_id), record / f"holds-{worker_id}.parquet")
        meta = {"worker": worker_id, "pid": os.getpid(), "started_at": started_at, "stopped_at": time.time(),
                "graceful": graceful, "loop_error": node.loop_error, "fires": recorder.rows,
                "load_fires": sink.fires, "unknown_fires": processor.unknown,
                "late_effects": recorder.late_effects, "unmatched_commits": recorder.unmatched_commits}
        (record / f"node-{worker_id}.json").write_text(json.dumps(meta, indent=2) + "\n")
    await runner.cleanup()
    try:
        await asyncio.wait_for(scheduler.teardown(drop=False), 30)
    except Exception as exc:
        _say(f"warning: teardown failed: {type(exc).__name__}")
    _say(f"stopped (fires received: {recorder.rows})")
    return 0


def _recorder(record: Path | None, worker_id: str):
    if record is not None:
        return PartRecorder(record, worker_id)

    class DiscardingRecorder(FireRecorder):
        """Nothing to record to: keep the live histograms, drop rows once committed."""

        async def maybe_flush(self, now: float) -> None:
            self._take(now - FLUSH_AFTER_S)

        def close(self, missed=None) -> None:
            self._take(None)
            self.closed = True

    return DiscardingRecorder(os.devnull, 0.0, math.inf)


class PartRecorder(FireRecorder):
    """The fire recorder, writing each row group as its own complete file.

    ``fires-<W>.<seq>.parquet``, written whole and renamed into place, so a node killed
    with SIGKILL (``--fault kill-worker``) leaves every part it finished readable, where one
    open parquet file would be lost without its footer. Effects committed after their rows
    were written are listed by row number in ``late-<W>.npy``. The node has no measured
    window: ``bench run`` re-derives ``warmup`` from its own.
    """

    def __init__(self, directory: Path, worker_id: str) -> None:
        super().__init__(directory / f"fires-{worker_id}.parquet", 0.0, math.inf)
        self.directory = directory
        self.worker_id = worker_id
        self.parts = 0

    async def maybe_flush(self, now: float) -> None:
        """A part every ``PART_EVERY_S`` or so, of the rows old enough to have committed: a
        killed node loses only its last few seconds of fires."""
        if not self._pending or self._pending[0].fired_at > now - FLUSH_AFTER_S - PART_EVERY_S:
            return
        chunks = self._take(now - FLUSH_AFTER_S)
        lo = chunks[0].row0
        self._written = hi = chunks[-1].row0 + len(chunks[-1].ids)
        effects = bytes(self._effects[lo:hi])  # later commits of these rows go to late-<W>.npy
        await asyncio.to_thread(lambda: self._write(self._table(chunks, effects)))

    def _write(self, table) -> None:
        if not len(table):
            return
        path = self.directory / f"fires-{self.worker_id}.{self.parts:05d}.parquet"
        tmp = path.with_suffix(".tmp")
        pq.write_table(table, tmp, compression="zstd")
        os.replace(tmp, path)
        self.parts += 1

    def close(self, missed=None) -> None:
        if self.closed:
            return
        chunks = self._take(None)
        if chunks:
            self._written = chunks[-1].row0 + len(chunks[-1].ids)
            self._write(self._table(chunks))
        self.closed = True
        if self._late:
            np.save(self.directory / f"late-{self.worker_id}.npy", np.asarray(self._late, np.int64))


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


async def _flush(recorder, stop: asyncio.Event) -> None:
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), FLUSH_EVERY_S)
        except (TimeoutError, asyncio.TimeoutError):
            pass
        try:
            await recorder.maybe_flush(time.time())
        except Exception as exc:
            _say(f"warning: writing fires failed: {type(exc).__name__}: {exc}")
