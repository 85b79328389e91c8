"""``bench run --nodes N`` (and ``--arm-load RATE``): the run with its claim loops in N ``bench serve``
processes on one store.

The run process sets the scheduler up and arms the population **through its own scheduler
instance**, as a single-process run does: the polling processor's missed-fire accounting needs
the exact fire time and arm time of every initial arm, and arming 300k timers over HTTP would
measure JSON encoding rather than the store. ``PUT /timers`` is exercised by ``--arm-load``
(locust) instead.

Before arming starts, N nodes (``bench serve --port P --record <run>/nodes``, worker ids
``n0..n{N-1}``, free loopback ports, the run's schema, the run's resolved workload written to
``<run>/nodes/workload.yaml``, DSN and token passed in the environment, never in argv) are
started and waited for until every ``/health/ready`` is 200. While the run measures, their
``/progress`` is pulled once a second (and while draining) and merged into the run's own
processor, so the status line and the drain see fires received anywhere. At the end the nodes
are stopped with SIGTERM (graceful), their final state files are merged the same way (a node
that died keeps its last pulled state), their fire logs become the run's ``fires.parquet``
(``warmup`` re-derived from the run's window), and their hold logs are checked for
**double holds**: two intervals [received, committed] of one timer id on different workers
that overlap (a node holds a timer only while it is alive, so an overlap means two live nodes
held it at once). The count is ``double_held`` in ``summary.json``; above 0 it is also a warning.

Fault injection (``bench/faults.py``) finds the node processes in :attr:`NodesRun.node_procs`
(worker id -> :class:`asyncio.subprocess.Process`, alive or not) and can start a replacement with
:meth:`NodesRun.restart_node`.
"""

from __future__ import annotations

import asyncio
import io
import json
import math
import os
import secrets
import signal
import socket
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from bench.run_cmd import Run

READY_TIMEOUT_S = 60.0  # nodes set up, import and bind within this, or the run fails
READY_POLL_S = 0.2
PROGRESS_EVERY_S = 1.0  # how often /progress is pulled while measuring
NODES_GONE_S = 5.0  # every node dead this long (a fault's replacement did not come): the run fails
NODE_STOP_S = 25.0  # SIGTERM, then this long (the node's own graceful stop is 15 s), then SIGKILL
LOCUST_STOP_S = 15.0
ARM_LOAD_BATCH = 10  # timers per PUT /timers from locust
LOCUST_SUMMARY = "locust_summary.json"  # exact totals, written by the locustfile at exit
NODES_DIR = "nodes"


def free_port(host: str = "127.0.0.1") -> int:
    """A port free right now on loopback (the node binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class NodesRun(Run):
    """A :class:`~bench.run_cmd.Run` whose claim loops run in ``nodes`` serve processes."""

    def __init__(self, *args, nodes: int, arm_load: float | None = None, locust_users: int = 4, **kw) -> None:
        super().__init__(*args, **kw)
        self.nodes = nodes
        self.arm_load = arm_load
        self.locust_users = locust_users
        self.token = secrets.token_urlsafe(16)
        self.node_procs: dict[str, asyncio.subprocess.Process] = {}
        self.node_urls: dict[str, str] = {}
        self.locust: asyncio.subprocess.Process | None = None
        self._snapshots: dict[str, dict[str, np.ndarray]] = {}
        self._last_pull = 0.0
        self._session = None
        self._restarts = 0

    # -- the nodes -----------------------------------------------------------------------------

    @property
    def nodes_dir(self) -> Path:
        return self.run_dir / NODES_DIR

    def _node_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["TIMERBENCH_TOKEN"] = self.token
        if self.dsn:
            env["TIMERBENCH_DSN"] = self.dsn  # the environment, not argv: ps shows argv to everyone
        env.pop("TIMERBENCH_DEBUG", None)
        return env

    async def _spawn(self, worker_id: str) -> None:
        port = free_port()
        argv = [sys.executable, "-m", "bench.cli", "serve", "--scheduler", self.cls.name, "--port", str(port),
                "--schema", self.schema, "--workload", str(self.nodes_dir / "workload.yaml"),
                "--worker-id", worker_id, "--record", str(self.nodes_dir)]
        for k, v in self.options.items():
            if k in self.cls.default_options:
                argv += ["--opt", f"{k}={v}"]
        if self.temporal_address:
            argv += ["--temporal-address", self.temporal_address]
        log = open(self.nodes_dir / f"node-{worker_id}.log", "ab")
        try:
            proc = await asyncio.create_subprocess_exec(*argv, stdout=log, stderr=asyncio.subprocess.STDOUT,
                                                        env=self._node_env(), start_new_session=True)
        finally:
            log.close()
        self.node_procs[worker_id] = proc
        self.node_urls[worker_id] = f"http://127.0.0.1:{port}"

    async def _wait_ready(self, worker_ids: list[str]) -> None:
        deadline = time.time() + READY_TIMEOUT_S
        pending = set(worker_ids)
        while pending:
            for wid in sorted(pending):
                proc = self.node_procs[wid]
                if proc.returncode is not None:
                    tail = self._log_tail(wid)
                    raise RuntimeError(f"node {wid} exited with {proc.returncode} before it was ready: {tail}")
                try:
                    async with self._session.get(f"{self.node_urls[wid]}/health/ready") as r:
                        if r.status == 200:
                            pending.discard(wid)
                except Exception:
                    pass
            if not pending:
                return
            if time.time() > deadline:
                raise RuntimeError(f"nodes {sorted(pending)} not ready after {READY_TIMEOUT_S:g} s "
                                   f"(see {self.nodes_dir}/node-*.log)")
            await asyncio.sleep(READY_POLL_S)

    def _log_tail(self, wid: str) -> str:
        try:
            lines = (self.nodes_dir / f"node-{wid}.log").read_text(errors="replace").strip().splitlines()
            return lines[-1] if lines else "(no output)"
        except OSError:
            return "(no log)"

    async def restart_node(self, worker_id: str) -> str:
        """Start a replacement for a node (a fault killed it): a new worker id, a new port."""
        self._restarts += 1
        new_id = f"{worker_id}r{self._restarts}"
        await self._spawn(new_id)
        return new_id

    async def start_workers(self, scheduler) -> None:
        import aiohttp

        self.nodes_dir.mkdir(exist_ok=True)
        # the resolved workload: every node rebuilds the same population (ids, intervals) from it
        (self.nodes_dir / "workload.yaml").write_text(yaml.safe_dump(asdict(self.w), sort_keys=False))
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10))
        ids = [f"n{i}" for i in range(self.nodes)]
        self.console.print(f"starting {self.nodes} bench serve node(s) on schema {self.schema} ...")
        for wid in ids:
            await self._spawn(wid)
        await self._until_interrupted(self._wait_ready(ids))
        self.console.print("nodes ready: " + ", ".join(f"{w} {self.node_urls[w]}" for w in ids))
        if self.arm_load:
            await self._start_locust()

    async def run_loop(self, scheduler, stop: asyncio.Event) -> None:
        """Watch the nodes until ``stop``; then stop them gracefully and merge their state."""
        all_gone_since: float | None = None
        try:
            while not stop.is_set():
                try:
                    await asyncio.wait_for(stop.wait(), PROGRESS_EVERY_S)
                except (TimeoutError, asyncio.TimeoutError):
                    pass
                await self.refresh_progress(force=True)
                if any(p.returncode is None for p in self.node_procs.values()):
                    all_gone_since = None
                elif all_gone_since is None:
                    all_gone_since = time.time()
                elif time.time() - all_gone_since > NODES_GONE_S:
                    raise RuntimeError(f"all {len(self.node_procs)} nodes exited "
                                       f"(last: {self._log_tail(list(self.node_procs)[-1])})")
        finally:
            await self._stop_locust()
            await self.refresh_progress(force=True)  # the last live view, for nodes that die on stop
            await self._stop_nodes()
            self._merge_final_states()
            if self._session is not None:
                await self._session.close()
                self._session = None

    async def _stop_nodes(self) -> None:
        live = [p for p in self.node_procs.values() if p.returncode is None]
        for p in live:
            try:
                os.kill(p.pid, signal.SIGCONT)  # a paused node (fault) must run to stop
                p.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass
        for wid, p in self.node_procs.items():
            if p.returncode is not None:
                continue
            try:
                await asyncio.wait_for(p.wait(), NODE_STOP_S)
            except (TimeoutError, asyncio.TimeoutError):
                self.console.print(f"warning: node {wid} did not stop within {NODE_STOP_S:g} s; killed it")
                p.kill()
                await p.wait()

    # -- progress: which fires arrived where ---------------------------------------------------

    async def refresh_progress(self, force: bool = False) -> None:
        """Pull every live node's processor state and merge it into the run's processor."""
        if self._session is None or self.processor is None:
            return
        if not force and time.time() - self._last_pull < PROGRESS_EVERY_S / 2:
            return
        self._last_pull = time.time()
        headers = {"Authorization": f"Bearer {self.token}"}

        async def pull(wid: str) -> None:
            try:
                async with self._session.get(f"{self.node_urls[wid]}/progress", headers=headers) as r:
                    if r.status == 200:
                        data = np.load(io.BytesIO(await r.read()))
                        self._snapshots[wid] = {k: data[k] for k in data.files}
            except Exception:
                pass  # a dead or paused node keeps its last snapshot

        live = [w for w, p in self.node_procs.items() if p.returncode is None]
        await asyncio.gather(*(pull(w) for w in live))
        for snap in self._snapshots.values():
            merge_state(self.processor, snap)
        if self.recorder is not None:
            # The run's own recorder receives nothing here; its row count is what the status
            # line's achieved rate and the sampler's fires_per_s / claims_per_s read, so it
            # counts the nodes' fires (the rows themselves come from the nodes' logs at the end).
            self.recorder.rows = max(self.recorder.rows, self._node_rows())

    def _node_rows(self) -> int:
        return sum(int(s["rows"][0]) for s in self._snapshots.values() if "rows" in s)

    def _merge_final_states(self) -> None:
        for wid in self.node_procs:
            path = self.nodes_dir / f"state-{wid}.npz"
            if path.exists():
                with np.load(path) as data:
                    self._snapshots[wid] = {k: data[k] for k in data.files}
        if self.processor is not None:
            for snap in self._snapshots.values():
                merge_state(self.processor, snap)

    def status_extra(self) -> str:
        fires = self._node_rows()
        live = sum(1 for p in self.node_procs.values() if p.returncode is None)
        return f"  nodes {live}/{len(self.node_procs)} live, {fires:,} fires"

    # -- locust -----------------------------------------------------------------------------------

    async def _start_locust(self) -> None:
        from loadgen import population

        locustfile = Path(population.__file__).parent / "locustfile.py"
        run_time_s = max(1, int(math.ceil(self.w.warmup_s + self.w.duration_s)))
        url = self.node_urls["n0"]
        argv = [sys.executable, "-m", "locust", "-f", str(locustfile), "--headless", "-H", url,
                "--csv", str(self.run_dir / "locust"), "-u", str(self.locust_users), "-r", str(self.locust_users),
                "-t", f"{run_time_s}s", "--only-summary", "--stop-timeout", "2",
                "--arm-rate", f"{self.arm_load:g}", "--arm-batch", str(ARM_LOAD_BATCH),
                "--arm-summary", str(self.run_dir / LOCUST_SUMMARY)]
        env = self._node_env()
        env.pop("TIMERBENCH_DSN", None)  # locust talks HTTP only
        log = open(self.run_dir / "locust.log", "ab")
        try:
            self.locust = await asyncio.create_subprocess_exec(*argv, stdout=log, stderr=asyncio.subprocess.STDOUT,
                                                               env=env, start_new_session=True)
        finally:
            log.close()
        self.console.print(f"locust: arming {self.arm_load:g} timers/s through {url}/timers "
                           f"({self.locust_users} users, pid {self.locust.pid})")

    async def _stop_locust(self) -> None:
        p = self.locust
        if p is None or p.returncode is not None:
            return
        try:
            await asyncio.wait_for(asyncio.shield(p.wait()), 1.0)  # its -t usually ends it first
        except (TimeoutError, asyncio.TimeoutError):
            p.send_signal(signal.SIGTERM)  # locust quits cleanly on SIGTERM and writes its CSVs
            try:
                await asyncio.wait_for(p.wait(), LOCUST_STOP_S)
            except (TimeoutError, asyncio.TimeoutError):
                p.kill()
                await p.wait()

    # -- the run directory ---------------------------------------------------------------------

    async def _finish(self, scheduler) -> None:
        # a run that failed before its run loop started (a node never got ready, Ctrl-C while
        # waiting) must not leave node or locust processes behind; a no-op after run_loop
        await self._stop_locust()
        await self._stop_nodes()
        if self._session is not None:
            await self._session.close()
            self._session = None
        await super()._finish(scheduler)

    async def merge_records(self) -> dict[str, Any]:
        """Fold the nodes' fire logs into fires.parquet, count double holds, read locust's stats."""
        extra: dict[str, Any] = {"nodes": self.nodes, "node_workers": sorted(self.node_procs), "warnings": []}
        if not self.node_procs:
            return extra
        measure_start = self.window["measure_start"]
        await asyncio.to_thread(merge_fires, self.run_dir / "fires.parquet", self.nodes_dir, measure_start)
        holds = read_holds(self.nodes_dir)
        extra["double_held"] = count_double_held(holds)
        extra["uncommitted_holds"] = int(np.isnan(holds["committed_at"]).sum()) if len(holds["timer_id"]) else 0
        if extra["double_held"]:
            extra["warnings"].append(f"{extra['double_held']} times a timer was held by two live nodes at once")
        for wid, p in self.node_procs.items():
            meta_path = self.nodes_dir / f"node-{wid}.json"
            if not meta_path.exists():
                extra["warnings"].append(f"node {wid} left no final state (exit code {p.returncode}); "
                                         f"its last pulled progress and written fire parts were used")
                continue
            meta = json.loads(meta_path.read_text())
            if meta.get("unknown_fires"):
                extra["warnings"].append(f"node {wid}: {meta['unknown_fires']} fires for ids outside the population")
            if meta.get("loop_error"):
                extra["warnings"].append(f"node {wid}: {meta['loop_error']}")
        self.console.print(f"nodes {', '.join(sorted(self.node_procs))}: double held {extra['double_held']}, "
                           f"holds without a commit {extra['uncommitted_holds']}")
        if self.locust is not None:
            arm = extra["arm_load"] = locust_summary(self.run_dir, self.arm_load, ARM_LOAD_BATCH)
            if arm.get("failures"):
                extra["warnings"].append(f"locust: {arm['failures']} failed PUT /timers requests")
            if "error" in arm:
                extra["warnings"].append(f"locust: {arm['error']}")
            else:
                rate = "-" if arm["timers_per_s"] is None else f"{arm['timers_per_s']:,.0f}"
                self.console.print(f"arm load (locust): {arm['timers_armed']:,} timers in {arm['requests']:,} "
                                   f"PUT /timers, {rate}/s against {self.arm_load:g}/s, p99 {arm['p99_ms']} ms")
        return extra


# -- merging, pure functions (unit-testable) -----------------------------------------------------------


def merge_state(processor, snap: dict[str, np.ndarray]) -> None:
    """Merge one node's ``armed_due/armed_at/received_due`` into ``processor``, in place.

    The latest arm of a trigger wins (its ``armed_at`` is the largest: initial arms happen in
    the run process, re-arms in whichever node polled last). A trigger counts as received when
    any node received exactly its latest armed fire time. Idempotent, so snapshots can be merged
    again and again.
    """
    a_due, a_at, r_due = processor.armed_due, processor.armed_at, processor.received_due
    s_due, s_at, s_recv = snap["armed_due"], snap["armed_at"], snap["received_due"]
    if len(s_due) != len(a_due):
        raise ValueError(f"a node's population has {len(s_due)} triggers, the run's {len(a_due)}: "
                         f"they did not build the same workload")
    with np.errstate(invalid="ignore"):
        newer = np.isnan(a_at) | (s_at > a_at)
        newer &= ~np.isnan(s_at)
        a_due[newer] = s_due[newer]
        a_at[newer] = s_at[newer]
        got = np.abs(s_recv - a_due) < 2e-6
        r_due[got] = a_due[got]
        # keep the latest receipt otherwise, as the processor itself would
        later = ~got & ~np.isnan(s_recv) & (np.isnan(r_due) | (s_recv > r_due))
        r_due[later] = s_recv[later]


def _node_fire_tables(nodes_dir: Path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from metrics.rundir import FIRES_SCHEMA

    workers = sorted({p.name[len("fires-"):].split(".")[0] for p in nodes_dir.glob("fires-*.*.parquet")})
    for wid in workers:
        parts = sorted(nodes_dir.glob(f"fires-{wid}.*.parquet"))
        tables = [pq.read_table(p).cast(FIRES_SCHEMA) for p in parts]
        if not tables:
            continue
        t = pa.concat_tables(tables)
        late = nodes_dir / f"late-{wid}.npy"
        if late.exists():
            rows = np.load(late)
            rows = rows[rows < len(t)]
            flags = t.column("effect_delivered").to_numpy(zero_copy_only=False).copy()
            flags[rows] = True
            t = t.set_column(t.schema.get_field_index("effect_delivered"), "effect_delivered", pa.array(flags))
        yield t


def merge_fires(fires_path: Path, nodes_dir: Path, measure_start: float) -> int:
    """Append every node's fires to ``fires_path`` (which holds the missed rows); returns rows added."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from metrics.rundir import FIRES_SCHEMA

    base = pq.read_table(fires_path).cast(FIRES_SCHEMA) if fires_path.exists() else FIRES_SCHEMA.empty_table()
    added = 0
    tables = [base]
    for t in _node_fire_tables(nodes_dir):
        warm = pc.less(t.column("fired_at"), pa.scalar(measure_start))
        t = t.set_column(t.schema.get_field_index("warmup"), "warmup", warm)
        tables.append(t)
        added += len(t)
    merged = pa.concat_tables(tables)
    if len(merged):
        merged = merged.sort_by([("fired_at", "ascending")])
    tmp = fires_path.with_suffix(".parquet.tmp")
    pq.write_table(merged, tmp, compression="zstd")
    os.replace(tmp, fires_path)
    return added


def read_holds(nodes_dir: Path) -> dict[str, np.ndarray]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    tables = [pq.read_table(p) for p in sorted(nodes_dir.glob("holds-*.parquet"))]
    if not tables:
        return {"timer_id": np.array([], object), "received_at": np.array([]), "committed_at": np.array([]),
                "worker": np.array([], object)}
    t = pa.concat_tables(tables)
    return {
        "timer_id": np.asarray(t.column("timer_id").to_pylist(), object),
        "received_at": t.column("received_at").to_numpy(zero_copy_only=False),
        "committed_at": t.column("committed_at").to_numpy(zero_copy_only=False),
        "worker": np.asarray(t.column("worker").to_pylist(), object),
    }


def count_double_held(holds: dict[str, np.ndarray]) -> int:
    """Holds that began while another worker still held the same timer id.

    A hold is [received_at, committed_at]; one without a commit (its node stopped or died
    first) proves nothing and is left out. Per id, holds are walked in start order keeping, per
    worker, the latest end seen: a hold that starts before another worker's latest end overlaps
    it.
    """
    ids, start, end, worker = holds["timer_id"], holds["received_at"], holds["committed_at"], holds["worker"]
    keep = ~np.isnan(end)
    ids, start, end, worker = ids[keep], start[keep], end[keep], worker[keep]
    if len(ids) == 0:
        return 0
    order = np.lexsort((start, ids))
    count = 0
    current = None
    ends: dict[str, float] = {}
    for i in order.tolist():
        if ids[i] != current:
            current = ids[i]
            ends = {}
        w, s = worker[i], start[i]
        if any(e > s for other, e in ends.items() if other != w):
            count += 1
        ends[w] = max(ends.get(w, -math.inf), end[i])
    return count


def locust_summary(run_dir: Path, target_rate: float | None, batch: int) -> dict[str, Any]:
    """What locust armed: its exit totals (``locust_summary.json``), and where its CSVs are."""
    out: dict[str, Any] = {"target_timers_per_s": target_rate, "batch": batch,
                           "csv_files": sorted(p.name for p in run_dir.glob("locust_*.csv"))}
    path = run_dir / LOCUST_SUMMARY
    if not path.exists():
        out["error"] = f"locust wrote no {LOCUST_SUMMARY} (see locust.log)"
        return out
    data = json.loads(path.read_text())
    out.update({k: data.get(k) for k in ("requests", "failures", "timers_armed", "elapsed_s", "median_ms",
                                         "p99_ms", "max_ms")})
    elapsed = data.get("elapsed_s") or 0.0
    out["timers_per_s"] = data["timers_armed"] / elapsed if elapsed > 0 else None
    return out
