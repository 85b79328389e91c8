"""Where a run's claim loops live: in this process, or in N ``bench serve`` node processes.

Both sit behind one :class:`Workers` interface (as OpenMessaging Benchmark keeps a local worker
and a distributed ensemble behind one ``Worker``): the run session starts them, lets them run
until its ``stop`` event, asks them for progress while measuring and draining, stops them and
collects what they recorded. Faults (:mod:`harness.faults`) kill, restart and pause workers
through the same interface, never by looking inside it.

**In-process** (:class:`InProcessWorkers`): one ``scheduler.run`` task, worker id ``w0``. A
kill is a crash as ``schedulers/base.py`` defines it (the task is cancelled and releases
nothing); a restart starts a replacement loop with a new worker id (``w1``, ...).

**Nodes** (:class:`NodeWorkers`, ``bench run --nodes N``): N ``bench serve --record`` processes
(worker ids ``n0..n{N-1}``, free loopback ports, the run's schema, the run's resolved workload in
``nodes/workload.yaml``, DSN and token in the environment, never in argv), started before arming
and waited for until every ``/health/ready`` is 200. The run process still arms the population
through its own scheduler instance (the undelivered-fire accounting needs the exact fire and arm time of
every initial arm; arming 300k timers over HTTP would measure JSON encoding rather than the
store). While the run measures, each node's ``/progress`` is pulled once a second and merged
into the run's polling processor, so the status line and the drain see fires received anywhere.
At the end the nodes get SIGTERM (graceful), their final state files are merged the same way (a
node that died keeps its last pulled state), their fire logs become the run's fire log, and
their hold logs are checked for **double holds** (:func:`metrics.parts.count_double_held`).
Nodes stop by themselves when the run process is gone (``TIMERBENCH_PARENT_PID``: a run killed
with SIGKILL leaves no node claiming behind it), and so does the ``--arm-load`` locust.
A kill is SIGKILL, a restart a new node (``<id>r<n>``), a pause SIGSTOP then SIGCONT.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import secrets
import signal
import sys
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from harness.node import PARENT_PID_ENV, REARM_UNTIL_ENV
from harness.stack import free_port
from loadgen.processor import merge_state
from metrics import rundir

READY_TIMEOUT_S = 60.0  # nodes set up, import and bind within this, or the run fails
READY_POLL_S = 0.2
PROGRESS_EVERY_S = 1.0  # how often /progress is pulled while measuring
NODES_GONE_S = 5.0  # every node dead this long (a fault's replacement did not come): the run fails
NODE_STOP_S = 25.0  # SIGTERM, then this long (the node's own graceful stop is 15 s), then SIGKILL
KILL_UNWIND_S = 10.0  # a cancelled in-process run loop unwinds within this (the contract of schedulers/base.py)


@dataclass
class Killed:
    """What a kill did: which worker, its process (nodes), whether a batch was in flight."""

    worker: str
    pid: int | None = None
    mid_batch: bool | None = None


class Workers(ABC):
    """The claim loops of one run. Methods are called in this order: :meth:`start`, then
    :meth:`run` as the run's task (with :meth:`progress`, :meth:`kill`, :meth:`restart` and
    :meth:`pause` while it runs), then :meth:`stop` (idempotent, also after a failed start), then
    :meth:`collect`."""

    can_pause = False

    @abstractmethod
    async def start(self, scheduler, processor) -> None:
        """Get ready to claim (the scheduler is set up; arming has not started)."""

    @abstractmethod
    async def run(self, stop: asyncio.Event) -> None:
        """Claim and process until ``stop`` is set; raise if the claim loops crash."""

    async def progress(self) -> None:  # noqa: B027 (a no-op where the workers share the run's processor)
        """Fold what workers elsewhere received into the run's processor (status line, drain)."""

    async def stop_rearming_at(self, at: float) -> None:
        """Fires received from ``at`` on are finished instead of re-armed (the run's drain)."""
        self.processor.rearm_until = at

    def claimed_timers(self) -> int:
        """Timers every worker's scheduler claimed so far (``schedulers.base``: re-claims included)."""
        return int(self.scheduler.claimed_timers)

    def skipped_due(self) -> np.ndarray:
        """Grid times the workers' processors jumped over (fixed cadence, fires more than one interval late)."""
        return self.processor.skipped_due

    @abstractmethod
    async def kill(self, mid_batch_wait_s: float = 0.0) -> Killed:
        """Crash one worker: nothing is released; its timers come back when its leases lapse."""

    @abstractmethod
    async def restart(self, killed: Killed) -> str:
        """Start a replacement for a killed worker; returns the replacement's worker id."""

    async def pause(self, seconds: float, done: asyncio.Event) -> Killed:
        """Freeze one worker for ``seconds`` (or until ``done``), then let it continue."""
        raise RuntimeError("this run's workers cannot be paused (needs --nodes: separate processes)")

    async def stop(self) -> None:  # noqa: B027 (a no-op for workers that stop with the run's event)
        """Stop every worker gracefully, whatever state the run is in. Idempotent."""

    async def collect(self, run_dir: Path, measure_start: float, say: Callable[[str], None]) -> dict[str, Any]:
        """After the run's own fire log is closed: fields for the summary (and its ``warnings``)."""
        return {}

    def status(self) -> str:
        """Appended to the run's live status line."""
        return ""

    def url(self) -> str | None:
        """An HTTP API that arms timers (``PUT /timers``), if the workers serve one."""
        return None


# -- in this process -------------------------------------------------------------------------------


class InProcessWorkers(Workers):
    def __init__(self) -> None:
        self.worker_id = "w0"
        self._number = 0
        self._inner: asyncio.Task | None = None
        self._killing = False
        self._restart = asyncio.Event()
        self._replaced = asyncio.Event()
        self.scheduler = None
        self.processor = None

    async def start(self, scheduler, processor) -> None:
        self.scheduler = scheduler
        self.processor = processor

    async def run(self, stop: asyncio.Event) -> None:
        """The scheduler's run loop; after a kill, waits for :meth:`restart` (or ``stop``) and
        starts the replacement. Returns or raises as the run loop does otherwise."""
        processors = {"poll": self.processor}
        try:
            while True:
                self.worker_id = f"w{self._number}"
                self._inner = asyncio.create_task(self.scheduler.run(processors, stop, worker_id=self.worker_id))
                self._replaced.set()
                await asyncio.wait({self._inner})
                if not (self._killing and self._inner.cancelled()):
                    return self._inner.result()
                self._killing = False
                await _first(self._restart.wait(), stop.wait())
                self._restart.clear()
                if stop.is_set():
                    return None
                self._number += 1
        except asyncio.CancelledError:
            if self._inner is not None:
                self._inner.cancel()
                await asyncio.wait({self._inner})
            raise

    async def kill(self, mid_batch_wait_s: float = 0.0) -> Killed:
        if self._inner is None or self._inner.done():
            raise RuntimeError("no worker to kill")
        # mid-batch: wait (briefly) until the processor has polls in flight, so work is lost
        lanes = self.processor.lanes
        busy = lambda: bool(len(lanes) and float(lanes.max()) > time.time())  # noqa: E731
        deadline = time.time() + mid_batch_wait_s
        while time.time() < deadline and not busy():
            await asyncio.sleep(0.005)
        killed = Killed(self.worker_id, None, busy())
        self._replaced.clear()
        self._killing = True
        self._inner.cancel()  # a crash: the backend releases nothing, its heartbeats stop
        # cancel() only asks: until the task has unwound, a batch whose claim just returned can
        # still reach the processor. The crash is the moment it has unwound (a SIGKILLed process
        # delivers nothing after its death either).
        await asyncio.wait({self._inner}, timeout=KILL_UNWIND_S)
        return killed

    async def restart(self, killed: Killed) -> str:
        self._restart.set()
        await self._replaced.wait()
        return self.worker_id


async def _first(*aws) -> None:
    tasks = [asyncio.ensure_future(a) for a in aws]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in tasks:
            t.cancel()


# -- in bench serve node processes -----------------------------------------------------------------


class NodeWorkers(Workers):
    can_pause = True

    scheduler = None  # the claims are the nodes' own (claimed_timers below)

    def __init__(
        self,
        count: int,
        scheduler_name: str,
        options: dict[str, Any],
        default_options: dict[str, Any],
        workload,
        schema: str,
        dsn: str | None,
        temporal_address: str | None,
        run_dir: Path,
        say: Callable[[str], None],
    ) -> None:
        self.count = count
        self.scheduler_name = scheduler_name
        self.options = {k: v for k, v in options.items() if k in default_options}
        self.w = workload
        self.schema = schema
        self.dsn = dsn
        self.temporal_address = temporal_address
        self.nodes_dir = run_dir / rundir.NODES_DIR
        self.say = say
        self.token = secrets.token_urlsafe(16)
        self.procs: dict[str, asyncio.subprocess.Process] = {}
        self.urls: dict[str, str] = {}
        self.processor = None
        self._snapshots: dict[str, dict[str, np.ndarray]] = {}
        self._last_pull = 0.0
        self._session = None
        self._restarts = 0
        self._stopped = False
        self._rearm_until: float | None = None

    def env(self) -> dict[str, str]:
        """The environment of processes the nodes' run starts: the token and DSN travel here,
        never in argv (``ps`` shows argv to everyone)."""
        env = dict(os.environ)
        env["TIMERBENCH_TOKEN"] = self.token
        env[PARENT_PID_ENV] = str(os.getpid())  # they stop when this process is gone
        if self.dsn:
            env["TIMERBENCH_DSN"] = self.dsn
        env.pop("TIMERBENCH_DEBUG", None)
        if self._rearm_until is not None:  # a node started during the run (a replacement) learns it here
            env[REARM_UNTIL_ENV] = repr(self._rearm_until)
        return env

    def url(self) -> str | None:
        return self.urls.get("n0")

    def _alive(self) -> list[tuple[str, asyncio.subprocess.Process]]:
        return [(w, p) for w, p in self.procs.items() if p.returncode is None]

    async def _spawn(self, worker_id: str) -> None:
        port = free_port()
        argv = [
            sys.executable,
            "-m",
            "bench.cli",
            "serve",
            "--scheduler",
            self.scheduler_name,
            "--port",
            str(port),
            "--schema",
            self.schema,
            "--workload",
            str(rundir.node_workload(self.nodes_dir)),
            "--worker-id",
            worker_id,
            "--record",
            str(self.nodes_dir),
        ]
        for k, v in self.options.items():
            argv += ["--opt", f"{k}={v}"]
        if self.temporal_address:
            argv += ["--temporal-address", self.temporal_address]
        with open(rundir.node_log(self.nodes_dir, worker_id), "ab") as log:
            proc = await asyncio.create_subprocess_exec(
                *argv, stdout=log, stderr=asyncio.subprocess.STDOUT, env=self.env(), start_new_session=True
            )
        self.procs[worker_id] = proc
        self.urls[worker_id] = f"http://127.0.0.1:{port}"

    def _log_tail(self, wid: str) -> str:
        try:
            lines = rundir.node_log(self.nodes_dir, wid).read_text(errors="replace").strip().splitlines()
            return lines[-1] if lines else "(no output)"
        except OSError:
            return "(no log)"

    async def start(self, scheduler, processor) -> None:
        import aiohttp

        self.processor = processor
        self.nodes_dir.mkdir(exist_ok=True)
        # the resolved workload: every node rebuilds the same population (ids, intervals) from it
        rundir.node_workload(self.nodes_dir).write_text(yaml.safe_dump(asdict(self.w), sort_keys=False))
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10))
        ids = [f"n{i}" for i in range(self.count)]
        self.say(f"starting {self.count} bench serve node(s) on schema {self.schema} ...")
        for wid in ids:
            await self._spawn(wid)
        await self._wait_ready(ids)
        self.say("nodes ready: " + ", ".join(f"{w} {self.urls[w]}" for w in ids))

    async def _wait_ready(self, worker_ids: list[str]) -> None:
        deadline = time.time() + READY_TIMEOUT_S
        pending = set(worker_ids)
        while pending:
            for wid in sorted(pending):
                proc = self.procs[wid]
                if proc.returncode is not None:
                    raise RuntimeError(
                        f"node {wid} exited with {proc.returncode} before it was ready: {self._log_tail(wid)}"
                    )
                try:
                    async with self._session.get(f"{self.urls[wid]}/health/ready") as r:
                        if r.status == 200:
                            pending.discard(wid)
                except Exception:
                    pass
            if not pending:
                return
            if time.time() > deadline:
                raise RuntimeError(
                    f"nodes {sorted(pending)} not ready after {READY_TIMEOUT_S:g} s (see {self.nodes_dir}/node-*.log)"
                )
            await asyncio.sleep(READY_POLL_S)

    async def run(self, stop: asyncio.Event) -> None:
        """Watch the nodes until ``stop``; fail when every node has been gone a while."""
        all_gone_since: float | None = None
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), PROGRESS_EVERY_S)
            except TimeoutError:
                pass
            await self.progress(force=True)
            if self._alive():
                all_gone_since = None
            elif all_gone_since is None:
                all_gone_since = time.time()
            elif time.time() - all_gone_since > NODES_GONE_S:
                raise RuntimeError(f"all {len(self.procs)} nodes exited (last: {self._log_tail(list(self.procs)[-1])})")
        await self.progress(force=True)  # the last live view, for nodes that die on stop

    async def kill(self, mid_batch_wait_s: float = 0.0) -> Killed:
        alive = self._alive()
        if not alive:
            raise RuntimeError("no live node to kill")
        wid, proc = alive[0]
        os.kill(proc.pid, signal.SIGKILL)
        return Killed(wid, proc.pid, None)

    async def restart(self, killed: Killed) -> str:
        self._restarts += 1
        new_id = f"{killed.worker}r{self._restarts}"
        await self._spawn(new_id)
        return new_id

    async def pause(self, seconds: float, done: asyncio.Event) -> Killed:
        alive = self._alive()
        if not alive:
            raise RuntimeError("no live node to pause")
        wid, proc = alive[0]
        os.kill(proc.pid, signal.SIGSTOP)
        try:
            await asyncio.wait_for(done.wait(), seconds)
        except TimeoutError:
            pass
        finally:
            os.kill(proc.pid, signal.SIGCONT)
        return Killed(wid, proc.pid, None)

    async def progress(self, force: bool = False) -> None:
        """Pull every live node's processor state and merge it into the run's processor."""
        if self._session is None or self.processor is None:
            return
        if not force and time.time() - self._last_pull < PROGRESS_EVERY_S / 2:
            return
        self._last_pull = time.time()
        headers = {"Authorization": f"Bearer {self.token}"}

        async def pull(wid: str) -> None:
            try:
                async with self._session.get(f"{self.urls[wid]}/progress", headers=headers) as r:
                    if r.status == 200:
                        data = np.load(io.BytesIO(await r.read()))
                        self._snapshots[wid] = {k: data[k] for k in data.files}
            except Exception:
                pass  # a dead or paused node keeps its last snapshot

        await asyncio.gather(*(pull(w) for w, _ in self._alive()))
        self._merge_snapshots()

    async def stop_rearming_at(self, at: float) -> None:
        self._rearm_until = at
        headers = {"Authorization": f"Bearer {self.token}"}

        async def tell(wid: str) -> None:
            async with self._session.put(f"{self.urls[wid]}/rearm-until", json={"at": at}, headers=headers) as r:
                if r.status != 200:
                    raise RuntimeError(f"node {wid} refused /rearm-until: {r.status} {await r.text()}")

        await asyncio.gather(*(tell(w) for w, _ in self._alive()))

    def claimed_timers(self) -> int:
        return sum(int(s["claimed_timers"][0]) for s in self._snapshots.values() if "claimed_timers" in s)

    def skipped_due(self) -> np.ndarray:
        parts = [s["skipped_due"] for s in self._snapshots.values() if "skipped_due" in s]
        return np.concatenate(parts) if parts else np.zeros(0)

    def _merge_snapshots(self) -> None:
        for snap in self._snapshots.values():
            merge_state(self.processor, snap)
        # The run's own recorder receives nothing here; its row count is what the status line's
        # achieved rate and the sampler's fires_per_s / claims_per_s read, so it counts the
        # nodes' fires (the rows themselves come from the nodes' logs at the end).
        recorder = self.processor.recorder
        recorder.rows = max(recorder.rows, self._node_rows())

    def _node_rows(self) -> int:
        return sum(int(s["rows"][0]) for s in self._snapshots.values() if "rows" in s)

    def status(self) -> str:
        return f"  nodes {len(self._alive())}/{len(self.procs)} live, {self._node_rows():,} fires"

    async def stop(self) -> None:
        if not self._stopped:
            self._stopped = True
            for _, p in self._alive():
                try:
                    os.kill(p.pid, signal.SIGCONT)  # a paused node (fault) must run to stop
                    p.send_signal(signal.SIGTERM)
                except ProcessLookupError:
                    pass
            for wid, p in self.procs.items():
                if p.returncode is not None:
                    continue
                try:
                    await asyncio.wait_for(p.wait(), NODE_STOP_S)
                except TimeoutError:
                    self.say(f"warning: node {wid} did not stop within {NODE_STOP_S:g} s; killed it")
                    p.kill()
                    await p.wait()
            if self.processor is not None:
                for wid in self.procs:  # the final states written at a graceful stop
                    path = rundir.node_state(self.nodes_dir, wid)
                    if path.exists():
                        with np.load(path) as data:
                            self._snapshots[wid] = {k: data[k] for k in data.files}
                self._merge_snapshots()
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def collect(self, run_dir: Path, measure_start: float, say: Callable[[str], None]) -> dict[str, Any]:
        """Count double holds and read the nodes' final notes (their fire segments are read with
        the run's own: :func:`metrics.rundir.read_segmented_fires`)."""
        from metrics.parts import count_double_held, read_holds

        extra: dict[str, Any] = {"nodes": self.count, "node_workers": sorted(self.procs), "warnings": []}
        if not self.procs:
            return extra
        holds = read_holds(self.nodes_dir)
        extra["double_held"] = count_double_held(holds)
        extra["uncommitted_holds"] = int(np.isnan(holds["committed_at"]).sum()) if len(holds["timer_id"]) else 0
        if extra["double_held"]:
            extra["warnings"].append(f"{extra['double_held']} times a timer was held by two live nodes at once")
        for wid, p in self.procs.items():
            meta_path = rundir.node_meta(self.nodes_dir, wid)
            if not meta_path.exists():
                extra["warnings"].append(
                    f"node {wid} left no final state (exit code {p.returncode}); "
                    f"its last pulled progress and written fire parts were used"
                )
                continue
            meta = json.loads(meta_path.read_text())
            if meta.get("unknown_fires"):
                extra["warnings"].append(f"node {wid}: {meta['unknown_fires']} fires for ids outside the population")
            if meta.get("loop_error"):
                extra["warnings"].append(f"node {wid}: {meta['loop_error']}")
        say(
            f"nodes {', '.join(sorted(self.procs))}: double held {extra['double_held']}, "
            f"holds without a commit {extra['uncommitted_holds']}"
        )
        return extra
