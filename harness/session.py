"""One run: replay a workload against one scheduler and record everything (``bench run``).

Order of a run: the caller has resolved the workload, the scheduler's options and the servers
(bad input fails before this, exit 2). The session creates the run directory and writes
``config.json``, sets the scheduler up in a fresh schema, starts its workers
(:mod:`harness.workers`: in this process, or ``bench serve`` nodes), takes the sampler's
baseline, arms the population (sorted by first fire time, in batches, while the workers already
claim), warms up, measures, then **drains**: arming stops (fires received after the window are
finished, not re-armed) and the run waits until every fire due before the window's end has
arrived, or ``drain_limit_s`` (one value for every backend) has passed. It stops the workers
gracefully, asks the backend what it still holds (``export_armed``) so that every fire that
never arrived is written as pending (still held: a backlog) or lost (not held: the run fails),
writes the samples and ``summary.json``, tears down (unless ``keep``) and prints the summary.
A complete run that lost a fire or duplicated a keyed effect exits with
:data:`metrics.accounting.EXIT_INCORRECT`.

Ctrl-C or a crash of the scheduler still ends with a readable run directory: whatever was
recorded is written and the summary says ``complete: false`` with the reason. A SIGKILL cannot
be handled, so nothing waits for the end: fires and samples go to closed segments as the run goes
(:mod:`metrics.recorder`, :mod:`metrics.rundir`), the run holds ``run.lock`` while it lives, and
its schema is leased (:mod:`harness.schemas`) so that ``bench env gc`` can tell its leftover from a
live run's.

Subclasses (the migration rehearsal, :mod:`harness.migration_run`) hook in through
:meth:`make_scheduler`, :meth:`prepare`, :meth:`background`, :meth:`status_extra`,
:meth:`before_stop`, :meth:`after_run` and :meth:`print_summary`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import importlib.metadata
import math
import os
import platform
import secrets
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console

from harness import console as out
from harness.inputs import RunPlan
from metrics import accounting, rundir

ARM_LEAD_S = 0.5  # first fires start this long after arming begins
CHECKPOINT_LEAD_S = 5.0  # the CHECKPOINT before the window starts this long before it (at most half the warm-up)
STATUS_EVERY_S = 3.0
FLUSH_EVERY_S = 1.0
GRACEFUL_STOP_S = 15.0  # after this, a run loop that ignores ``stop`` is cancelled
EXPORT_TIMEOUT_S = 120.0  # asking the backend what it still holds; past this, lost is not judged
DRAIN_STALL_S = 5.0  # a drain with no arrival for this long asks the backend whether it still holds the rest


class RunSession:
    def __init__(self, plan: RunPlan) -> None:
        self.plan = plan
        self.cls = plan.cls
        self.options = plan.options
        self.w = plan.workload
        self.dsn = plan.dsn
        self.temporal_address = plan.temporal_address
        self.out = plan.out
        self.keep = plan.keep
        self.argv = plan.argv
        self.nodes = plan.nodes
        self.arm_load_per_s = plan.arm_load_per_s
        self.fault_specs = list(plan.fault_specs)
        self.expected_timers = 0  # the population's size, once built (a backend may size itself by it)
        self.label = plan.label
        self.sample_every_s = plan.sample_every_s
        self.temporal_metrics = plan.temporal_metrics
        self.checkpoint = plan.checkpoint
        self.calibrates = plan.calibrates
        self.measurement: dict[str, Any] = {"unavailable": {}}  # config.json: what could not be measured, why
        self._window_opened = self._window_closed = False  # the sampler's window edges (see _window_edges)
        self.console = Console(highlight=False, soft_wrap=True)
        self.interrupted = asyncio.Event()
        self.incomplete_reason: str | None = None
        self.workers = None  # harness.workers.Workers
        self._lock_fd: int | None = None  # run.lock, held while the run lives
        self._lease = None  # harness.schemas.SchemaLease: the schema is a live run's
        self.arm_load = None  # harness.arm_load.ArmLoad, with --arm-load
        self.faults = None  # harness.faults.FaultInjector, with --fault
        self.neighbour_spec = plan.neighbour
        self.readers_spec = plan.readers
        self.soak_bin_s = plan.soak_bin_s
        self.claims = None  # harness.soak.ClaimStatements, in a soak
        self.neighbour_dsn = plan.neighbour_dsn or plan.dsn
        self.neighbour = None  # harness.neighbour.Neighbour, with --neighbour
        self.readers = None  # harness.neighbour.Readers, with --readers
        self._neighbour_lease = None  # the neighbour's schema on a Postgres the scheduler does not use
        self.arming: dict[str, Any] | None = None  # summary.json's "arming": the population's arm, timed
        self.moves_done: list[tuple] = []  # long-horizon moves made (loadgen.moves), written to moves.parquet

    def say(self, message: str) -> None:
        self.console.print(message)

    # -- hooks for runs built on this one (bench migrate dry-run) ---------------------------

    def make_scheduler(self, ctx):
        from schedulers.base import create

        return create(self.cls.name, ctx, **self.options)

    async def prepare(self, scheduler, population, arm_start: float) -> np.ndarray | None:
        """Before the workers start claiming; returns the population indices :meth:`_arm` still
        arms (None: all of them)."""
        return None

    def background(self, scheduler, stop: asyncio.Event) -> list:
        """Coroutines run beside the workers from the start of arming until ``stop``."""
        return []

    def status_extra(self) -> str:
        """Appended to the live status line."""
        return ""

    async def before_stop(self, scheduler) -> None:
        """After a complete run's drain, while the workers still run."""
        return None

    async def after_run(self, scheduler, summary: dict[str, Any]) -> None:
        """After summary.json is written, before teardown."""
        return None

    def print_summary(self, s: dict[str, Any]) -> None:
        self.console.print(out.summary_table(s))
        for line in out.problem_lines(s):
            self.say(line)
        if s.get("neighbour"):
            from metrics.neighbour import ratio_text

            self.say(ratio_text(s["neighbour"]))
        if s.get("soak"):
            from metrics.soak import verdict_lines

            so = s["soak"]
            self.say(f"soak ({so['state']}), trends over {so['trend_span']['what']}, {so['bin_s']:g} s bins:")
            for line in verdict_lines(so):
                self.say(f"  {line}")
        if s.get("readers"):
            r = s["readers"]
            self.say(f"readers: {len(r['holds'])} REPEATABLE READ snapshots of {r['hold_s']:g} s held by {r['count']}")
        if s.get("faults"):
            from harness.faults import summary_lines

            for line in summary_lines(s):
                self.say(line)
        self.say(f"run directory: {self.run_dir}")

    # -- the run directory ----------------------------------------------------------------

    def _make_workers(self):
        from harness.workers import InProcessWorkers, NodeWorkers

        if not self.nodes:
            return InProcessWorkers()
        return NodeWorkers(
            self.nodes,
            self.cls.name,
            self.options,
            self.cls.default_options,
            self.w,
            self.schema,
            self.dsn,
            self.temporal_address,
            self.run_dir,
            self.say,
        )

    def _environment(self, pg: dict[str, Any]) -> dict[str, Any]:
        import psutil

        try:
            version = importlib.metadata.version("timerbench")
        except importlib.metadata.PackageNotFoundError:
            version = "?"
        env = {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "memory_bytes": psutil.virtual_memory().total,
            "postgres_version": pg.get("postgres_version"),
            "postgres_settings": pg.get("postgres_settings"),
            "temporal_version": None,
            "timerbench_version": version,
            "git_commit": _git_commit(),
        }
        if self.temporal_address:
            from harness import stack

            env["temporal_version"] = stack.temporal_version()
        return env

    def _config(self) -> dict[str, Any]:
        from dataclasses import asdict

        from harness import stack

        return {
            "scheduler": self.cls.name,
            "label": self.label,
            "options": self.options,
            "capabilities": getattr(self, "capabilities", None),
            "workload": asdict(self.w),
            "environment": self.environment,
            "dsn": stack.redact_dsn(self.dsn) if self.dsn else None,
            "temporal_address": self.temporal_address,
            "started_at": self.started_at,
            "argv": stack.redact_argv(self.argv),  # no password or token in the run directory
            "schema": self.schema,
            "window": self.window,
            "measurement": self.measurement,
            "load": self.load,
            "neighbour": None if self.neighbour is None else self.neighbour.record,
            "readers": None if self.readers_spec is None else self._readers_record(),
            "soak": None
            if self.soak_bin_s is None
            else {"bin_s": self.soak_bin_s, "claim_statements": self.claims.describe() if self.claims else None},
            # bench calibrate: this memory run is the harness's own ceiling for runs of the same
            # workload shape at ``for_rate`` (reports.harness_ceiling)
            "calibration": None
            if self.calibrates is None
            else {"for_rate": self.calibrates, "factor": round((self.w.rate_per_s or 0.0) / self.calibrates, 3)},
        }

    def _readers_record(self) -> dict[str, Any]:
        return {
            **self.readers_spec.to_json(),
            "start_at": self.window.get("readers_start_at"),
            "stop_at": self.window.get("readers_stop_at"),
        }

    def _write_config(self) -> None:
        rundir.write_json(self.run_dir / rundir.CONFIG, self._config())

    # -- the run ----------------------------------------------------------------------------

    async def main(self) -> int:
        from loadgen.population import build
        from metrics.sampler import describe_postgres
        from schedulers.base import StoreContext, with_expected_timers

        loop = asyncio.get_running_loop()
        self._install_sigint(loop)
        self.started_at = time.time()
        self.run_dir = rundir.new_run_dir(self.out, self.cls.name, self.started_at)
        self._lock_fd = rundir.hold_run_lock(self.run_dir)
        stamp = time.strftime("%Y%m%d_%H%M%S", time.gmtime(self.started_at))
        self.schema = f"run_{stamp}_{secrets.token_hex(3)}"
        self.window = {
            "arm_start": self.started_at,
            "measure_start": self.started_at + (self.w.warmup_s or 0.0),
            "measure_end": self.started_at + (self.w.warmup_s or 0.0) + self.w.duration_s,
            "drain_limit_s": self.w.drain_limit_s,
        }
        self.load: dict[str, Any] = {}
        self.environment = self._environment({})
        self._write_config()
        self.recorder = self.processor = self.sampler = None
        scheduler = None
        exit_code = 0
        try:
            pg = await describe_postgres(self.dsn) if self.dsn else {}
            self.environment = self._environment(pg)
            population = build(self.w)
            periodic = ~population.long_horizon
            interval_max_s = float(population.interval_s[periodic].max()) if periodic.any() else 0.0
            if self.w.trace:  # the trace fixes the population, and so the rate
                self.w.triggers = len(population)
                self.w.rate_per_s = population.rate_per_s()
                self.w.fill_concurrency()
            if self.w.warmup_s is None:  # one maximum interval: every trigger re-arms before the window
                self.w.warmup_s = interval_max_s
            self.load.update(periodic_triggers=int(periodic.sum()), interval_max_s=interval_max_s)
            ctx = StoreContext(
                dsn=self.dsn, schema=self.schema, temporal_address=self.temporal_address, state_bytes=self.w.state_bytes
            )
            # a backend that sizes itself (temporal_shards' initial shard count) learns the population
            self.expected_timers = len(population)
            self.options = with_expected_timers(getattr(self.cls, "default_options", {}), self.options, len(population))
            scheduler = self.make_scheduler(ctx)
            self.options = dict(getattr(scheduler, "options", self.options))  # as the backend resolved them
            # what the design promises with these options (its lag bound is the report's default SLO)
            self.capabilities = dataclasses.asdict(scheduler.capabilities)
            self._write_config()
            if self.dsn:
                from harness.schemas import SchemaLease

                self._lease = await SchemaLease.take(self.dsn, self.schema)  # before the schema exists
            if self.neighbour_spec is not None:
                await self._until_interrupted(self._prepare_neighbour())
            self.say(f"setting up {self.cls.name} in schema {self.schema} ...")
            await self._until_interrupted(scheduler.setup())
            exit_code = await self._measure(scheduler, population)
        except _Interrupted:
            self.incomplete_reason = self.incomplete_reason or "interrupted (SIGINT)"
            exit_code = 130
        except Exception as exc:
            self.incomplete_reason = f"crashed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            exit_code = 1
            if os.environ.get("TIMERBENCH_DEBUG"):
                import traceback

                traceback.print_exc()
        finally:
            await self._finish(scheduler)
        summary = getattr(self, "summary", None)
        if exit_code == 0 and summary is not None and not summary.get("correct", True):
            self.say("run FAILED its correctness promise: " + "; ".join(summary["failures"]))
            exit_code = accounting.EXIT_INCORRECT
        return exit_code

    async def _prepare_neighbour(self) -> None:
        from harness.neighbour import SUFFIX, Neighbour
        from harness.schemas import SchemaLease

        if self._lease is None:  # the scheduler uses no Postgres: the neighbour's schema is leased here
            self._neighbour_lease = await SchemaLease.take(self.neighbour_dsn, self.schema)
        self.neighbour = Neighbour(
            self.neighbour_spec, self.neighbour_dsn, self.run_dir, self.schema + SUFFIX, self.say
        )
        self._write_config()
        await self.neighbour.prepare()

    async def _until_interrupted(self, coro):
        """Await ``coro`` unless Ctrl-C comes first."""
        task = asyncio.ensure_future(coro)
        waiter = asyncio.ensure_future(self.interrupted.wait())
        done, _ = await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            waiter.cancel()
            return task.result()
        task.cancel()
        raise _Interrupted()

    async def _measure(self, scheduler, population) -> int:
        from loadgen.processor import PollingProcessor
        from metrics.recorder import FireRecorder

        w = self.w
        # The processor exists before the workers (nodes report their progress into it); its
        # recorder's window is fixed once the workers are ready, just before arming.
        self.recorder = FireRecorder(
            self.run_dir / rundir.SEGMENTS_DIR, self.window["measure_start"], self.window["measure_end"]
        )
        self.processor = PollingProcessor(w, population, self.recorder)
        self.workers = self._make_workers()
        if self.neighbour is not None:  # alone, before any worker claims: the baseline
            await self._until_interrupted(self.neighbour.baseline(w.duration_s))
            self._write_config()
        await self._until_interrupted(self.workers.start(scheduler, self.processor))
        if self.arm_load_per_s:
            from harness.arm_load import ArmLoad

            self.arm_load = ArmLoad(self.run_dir, self.arm_load_per_s, self.workers.env(), self.say)
            await self.arm_load.start(self.workers.url(), w.warmup_s + w.duration_s)
        now = time.time()
        arm_start = now + ARM_LEAD_S
        self.window.update(
            arm_start=arm_start, measure_start=arm_start + w.warmup_s, measure_end=arm_start + w.warmup_s + w.duration_s
        )
        self.recorder.measure_start = self.window["measure_start"]
        self.recorder.measure_end = self.window["measure_end"]
        await self.workers.stop_rearming_at(self.window["measure_end"])  # the drain re-arms nothing
        if self.readers_spec is not None and self.soak_bin_s is not None:
            from harness.soak import READERS_FROM, READERS_UNTIL

            # a soak: the level before, the readers' load, then the recovery, a third each
            self.window["readers_start_at"] = self.window["measure_start"] + READERS_FROM * w.duration_s
            self.window["readers_stop_at"] = self.window["measure_start"] + READERS_UNTIL * w.duration_s
        elif self.readers_spec is not None:
            self.window["readers_start_at"] = self.window["arm_start"]
            self.window["readers_stop_at"] = self.window["measure_end"]
        self._write_config()
        if self.neighbour is not None:
            await self.neighbour.start(self.window["measure_end"] - time.time())
        self.sampler = await self._make_sampler(scheduler)
        await self.sampler.open()
        self.measurement["unavailable"].update(self.sampler.unavailable)

        stop = asyncio.Event()
        tasks: dict[str, asyncio.Task] = {}
        remaining = await self.prepare(scheduler, population, arm_start)
        if self.fault_specs:
            from harness.faults import FaultInjector

            self.faults = FaultInjector(
                self.fault_specs,
                workers=self.workers,
                processor=self.processor,
                window=self.window,
                run_dir=self.run_dir,
                dsn=self.dsn,
                temporal_address=self.temporal_address,
                max_lag_s=scheduler.capabilities.max_lag_s,
                say=self.say,
                relations=list(scheduler.relations()) if hasattr(scheduler, "relations") else [],
            )
        tasks["run"] = asyncio.create_task(self.workers.run(stop))
        tasks["arm"] = asyncio.create_task(self._arm(scheduler, population, arm_start, remaining))
        sampler_stop = asyncio.Event()
        helpers = [
            asyncio.create_task(self.sampler.loop(sampler_stop)),
            asyncio.create_task(self._status(sampler_stop)),
            asyncio.create_task(self._flush(sampler_stop)),
        ]
        edges = asyncio.create_task(self._window_edges())
        if self.faults is not None:
            helpers.append(asyncio.create_task(self.faults.loop(stop)))
        if self.readers_spec is not None:
            from harness.neighbour import Readers

            schema = None if self.neighbour is None else self.neighbour.schema
            self.readers = Readers(self.readers_spec, self.neighbour_dsn, self.run_dir, schema, self.say)
            helpers.append(
                asyncio.create_task(
                    self.readers.run(self.window["readers_start_at"], self.window["readers_stop_at"], stop)
                )
            )
        if self.soak_bin_s is not None:
            from harness.soak import ClaimStatements

            self.claims = ClaimStatements(self.cls, self.dsn, self.run_dir, self.soak_bin_s)
            helpers.append(
                asyncio.create_task(
                    self.claims.run(
                        self.sampler.extensions.get("pg_stat_statements"),
                        self.window,
                        lambda: self._window_opened,
                        stop,
                    )
                )
            )
        if w.long_horizon_move_share > 0:
            helpers.append(asyncio.create_task(self._move_long_horizon(scheduler, population, tasks["arm"], stop)))
        helpers += [asyncio.create_task(c) for c in self.background(scheduler, stop)]
        self.say(
            f"run {self.run_dir.name}: {len(population):,} triggers, target {w.rate_per_s:,.1f} fires/s, "
            f"{w.cadence} cadence, warm-up {w.warmup_s:g} s, measured {w.duration_s:g} s, "
            f"then a drain of at most {w.drain_limit_s:g} s"
        )
        code = 0
        try:
            deadline = asyncio.ensure_future(asyncio.sleep(max(0.0, self.window["measure_end"] - time.time())))
            interrupt = asyncio.ensure_future(self.interrupted.wait())
            watch = {deadline, interrupt, tasks["run"], tasks["arm"]}
            while True:
                done, _ = await asyncio.wait(watch, return_when=asyncio.FIRST_COMPLETED)
                if tasks["arm"] in done and tasks["arm"].exception() is None:
                    watch.discard(tasks["arm"])  # arming finished; keep running
                    if not (done - {tasks["arm"]}):
                        continue
                break
            for f in (deadline, interrupt):
                f.cancel()
            if interrupt in done or self.interrupted.is_set():
                self.incomplete_reason = "interrupted (SIGINT)"
                code = 130
            for name in ("run", "arm"):
                t = tasks[name]
                if t in done and t.exception() is not None:
                    exc = t.exception()
                    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                    self.incomplete_reason = (
                        f"{'scheduler' if name == 'run' else 'arming'} crashed: {type(exc).__name__}: {first}"
                    )
                    code = 1
                elif name == "run" and t in done:
                    self.incomplete_reason = "the scheduler's run loop returned before stop was set"
                    code = 1
            if self.incomplete_reason:
                self.window["measure_end"] = min(self.window["measure_end"], time.time())
                self.recorder.measure_end = self.window["measure_end"]
                # no drain: fires due before the stop that never came are pending or lost, as the
                # backend says (it still holds them, or it does not)
                self.window["undelivered_before"] = self.window["measure_end"]
                self.window["drained_s"] = 0.0
            else:
                await self._drain(tasks["run"], scheduler)
                await self.before_stop(scheduler)
        finally:
            stop.set()
            tasks["arm"].cancel()
            if self.arm_load is not None:
                await self.arm_load.stop()  # before the nodes it arms through stop
            try:
                await asyncio.wait_for(asyncio.shield(tasks["run"]), GRACEFUL_STOP_S)
            except TimeoutError:
                tasks["run"].cancel()
                self.say(f"warning: the run loop did not stop within {GRACEFUL_STOP_S:g} s; cancelled it")
            except BaseException:
                pass
            await asyncio.gather(tasks["run"], tasks["arm"], return_exceptions=True)
            await self._close_window(edges)
            await self.workers.stop()
            sampler_stop.set()
            await asyncio.gather(*helpers, return_exceptions=True)
            try:
                await self.sampler.sample()  # the state at the end
            except Exception:
                pass
        return code

    async def _make_sampler(self, scheduler):
        """The sampler, told which measurement extensions and servers this run can use."""
        from harness import stack
        from metrics.extensions import extensions
        from metrics.sampler import Sampler

        unavailable = self.measurement["unavailable"]
        usable: dict[str, str] = {}
        embedded_pg = False
        if self.dsn:
            try:
                found = await asyncio.to_thread(extensions, self.dsn)
            except Exception as exc:
                found = {}
                unavailable["statements"] = unavailable["bloat"] = f"the extensions could not be probed ({exc})"
            for figure, name in (("statements", "pg_stat_statements"), ("bloat", "pgstattuple")):
                ext = found.get(name)
                if ext is not None and ext.usable:
                    usable[name] = ext.schema
                elif ext is not None:
                    unavailable[figure] = ext.missing
            pg = stack.postgres()
            embedded_pg = pg.running() and self.dsn == pg.dsn()
        servers = [self._temporal_watch()] if self.temporal_address else []
        return Sampler(
            scheduler,
            self.recorder,
            self.dsn,
            self.run_dir,
            claimed=self.workers.claimed_timers,
            extensions=usable,
            servers=servers,
            gauges=self._gauges,
            reset_statements=embedded_pg,
            **({} if self.sample_every_s is None else {"every_s": self.sample_every_s}),
        )

    def _temporal_watch(self):
        """The Temporal server as the sampler watches it: the embedded dev server's process, its
        SQLite files and its metrics port; a cluster's metrics only through --temporal-metrics."""
        from harness import stack
        from metrics.stores import ServerWatch

        dev = stack.temporal()
        if dev.running() and self.temporal_address == dev.address():
            # the pid file is read each time: a restart (a fault) starts a new process
            return ServerWatch(
                "temporal",
                roots=lambda: [p for p in (dev.pid(),) if p],
                files=dev.db_files(),
                metrics_url=self.temporal_metrics or dev.metrics_url(),
            )
        why = (
            f"the Temporal server at {self.temporal_address} is not the embedded dev server, so its processes' "
            f"disk writes and its files are not measured"
        )
        unavailable = {"process": why}
        if not self.temporal_metrics:
            unavailable["metrics"] = (
                "no metrics endpoint for the Temporal server at "
                f"{self.temporal_address}; pass --temporal-metrics http://host:port/metrics"
            )
        return ServerWatch("temporal", metrics_url=self.temporal_metrics, unavailable=unavailable)

    def _gauges(self, t: float) -> dict[str, float]:
        """The engine's own gauges, from its bookkeeping (no design is asked to count its queue):
        timers due and not yet received, and how long the oldest of them has waited."""
        late = self.processor.outstanding(t)
        oldest = float(t - self.processor.armed_due[late].min()) if len(late) else 0.0
        return {"backlog": float(len(late)), "oldest_due_age_s": oldest}

    async def _window_edges(self) -> None:
        """CHECKPOINT a little before the measured window (``--checkpoint window``; ``warmup``: as
        the load starts; ``off``: never), then the sampler's edge samples and statement reads at its
        start and end (the end is also closed by :meth:`_close_window` when the run stops early)."""
        start = self.window["measure_start"]
        if self.checkpoint == "window":
            lead = min(CHECKPOINT_LEAD_S, max(0.0, self.w.warmup_s) / 2)
            await asyncio.sleep(max(0.0, start - lead - time.time()))
        if self.dsn and self.checkpoint == "off":
            self.window["checkpoint"] = {"mode": "off"}
        elif self.dsn:
            self.window["checkpoint"] = {
                "mode": self.checkpoint,
                "requested_at": time.time(),
                **await self.sampler.checkpoint(),
            }
            if self.window["checkpoint"]["error"]:
                self.measurement["unavailable"]["checkpoint"] = self.window["checkpoint"]["error"]
        await asyncio.sleep(max(0.0, start - time.time()))
        await self.sampler.window_start()
        self._window_opened = True
        # False on a database where another run's window was open: its statements were not reset
        # (the window's figures are the difference of two reads either way)
        self.window["statements_reset"] = self.sampler.statements_reset
        # the run process's own CPU over the window (every thread: claim loops in-process, the
        # simulated provider, the recorder): what the harness spends per fire (the summary's
        # ``harness``)
        self.window["harness_cpu_start_s"] = time.process_time()
        self.window["nodes"] = self.nodes or 0
        await asyncio.sleep(max(0.0, self.window["measure_end"] - time.time()))
        self._window_closed = True
        self.window["harness_cpu_end_s"] = time.process_time()
        await self.sampler.window_end()

    async def _close_window(self, edges: asyncio.Task) -> None:
        if not edges.done() and self._window_closed:
            await asyncio.gather(edges, return_exceptions=True)  # the end edge is under way
            return
        edges.cancel()
        await asyncio.gather(edges, return_exceptions=True)
        if self._window_opened and not self._window_closed:
            self._window_closed = True
            self.window["harness_cpu_end_s"] = time.process_time()
            try:
                await self.sampler.window_end()  # stopped early: the window ends here
            except Exception as exc:
                self.say(f"warning: the window's end could not be read: {type(exc).__name__}: {exc}")
        self.measurement["unavailable"].update(self.sampler.unavailable)

    async def _drain(self, run_task: asyncio.Task, scheduler) -> None:
        """After the measured window: arming has stopped (the processor finishes what it receives
        from ``measure_end`` on); wait until every fire due before the window's end has arrived,
        or ``drain_limit_s`` has passed. The scheduler keeps running; fires received now are
        recorded (with their real lag) but lie outside the window. A healthy backend ends it
        within its own lag; what is still outstanding at the limit is pending or lost, as the
        backend says at the end of the run. When nothing has arrived for ``DRAIN_STALL_S`` and
        the backend holds none of what is missing, the drain ends there: those fires are lost,
        and waiting out the limit cannot bring them.
        """
        end = self.window["measure_end"]
        limit = end + self.window["drain_limit_s"]
        last_count, stalled_since = -1, time.time()
        while time.time() < limit and not self.interrupted.is_set() and not run_task.done():
            await self.workers.progress()
            waiting = self.processor.outstanding(end)
            if len(waiting) == 0:
                break
            if len(waiting) != last_count:
                last_count, stalled_since = len(waiting), time.time()
            elif time.time() - stalled_since >= DRAIN_STALL_S and not await self._holds_any(scheduler, waiting):
                # nothing arrived for a while and the backend holds none of what is missing:
                # those fires are lost, and waiting out the limit cannot bring them
                self.window["drain_ended"] = "the backend holds none of the fires still missing"
                break
            elif time.time() - stalled_since >= DRAIN_STALL_S:
                stalled_since = time.time()  # still held: a backlog, keep draining
            await asyncio.sleep(0.1)
        self.window["drained_s"] = max(0.0, time.time() - end)
        self.window["undelivered_before"] = end

    async def _holds_any(self, scheduler, idx: np.ndarray) -> bool:
        """Whether the backend still holds any of these triggers' missing fires (see :meth:`_held`);
        True when it cannot say."""
        held = await self._held(scheduler)
        if held is None:
            return True
        due = self.processor.armed_due[idx]
        at = np.array([held.get(self.processor.pop.ids[i], np.nan) for i in idx.tolist()])
        with np.errstate(invalid="ignore"):
            return bool((at <= due + 2e-6).any())

    async def _arm(self, scheduler, population, arm_start: float, only: np.ndarray | None = None) -> None:
        from schedulers.base import Timer

        due = arm_start + population.first_fire_s
        order = np.argsort(due, kind="stable")
        if only is not None:  # prepare() armed the others already
            order = only[np.argsort(due[only], kind="stable")]
        ids, tenants = population.ids, population.tenants
        step = max(1, int(self.w.arm_batch))
        began = time.time()
        # Long-horizon timers (last in due order) are callbacks with a small state: a design makes a
        # timer's state at its first arm from its context, so the context says the smaller size while
        # they are armed (only a design that keeps its context as ``ctx`` can be told).
        lh_state = self.w.long_horizon_state_bytes
        small = lh_state is not None and population.long_horizon.any() and hasattr(scheduler, "ctx")
        parts = [order[~population.long_horizon[order]], order[population.long_horizon[order]]] if small else [order]
        ctx = getattr(scheduler, "ctx", None)
        for k, part in enumerate(parts):
            if k == 1:
                scheduler.ctx = dataclasses.replace(ctx, state_bytes=int(lh_state))
                self.load["long_horizon_state_bytes"] = int(lh_state)
            for lo in range(0, len(part), step):
                idx = part[lo : lo + step]
                fire_at = np.round(due[idx], 6)
                timers = [Timer(ids[i], f, "poll", tenants[i]) for i, f in zip(idx.tolist(), fire_at.tolist())]
                armed_at = time.time()
                self.processor.note_armed(idx, fire_at, armed_at)
                await scheduler.arm(timers)
                await asyncio.sleep(0)  # let the run loop claim between arm batches
        if small:
            scheduler.ctx = ctx
        seconds = max(1e-9, time.time() - began)
        self.arming = {"timers": int(len(order)), "seconds": seconds, "timers_per_s": len(order) / seconds}
        self.window["arming_end"] = time.time()
        # The population and the store's entries live for the whole run: move them out of the
        # collector's sight, or each full collection walks them all (100+ ms pauses at 300k
        # timers, which would show up as lag).
        gc.collect()
        gc.freeze()

    async def _move_long_horizon(self, scheduler, population, arm_task: asyncio.Task, stop: asyncio.Event) -> None:
        """The application moves armed long-horizon timers during the window (:mod:`loadgen.moves`),
        once the population is armed (a move before its timer's first arm would be undone by it)."""
        from loadgen.moves import plan_moves, unique_batches
        from schedulers.base import Timer

        w = self.w
        plan = plan_moves(
            population,
            w.long_horizon_move_share,
            self.window["measure_start"],
            self.window["measure_end"],
            w.seed,
            (w.long_horizon_min_days, w.long_horizon_max_days),
        )
        await asyncio.wait({arm_task, asyncio.ensure_future(stop.wait())}, return_when=asyncio.FIRST_COMPLETED)
        if stop.is_set() or arm_task.cancelled() or arm_task.exception() is not None:
            return
        ids, tenants = population.ids, population.tenants
        i, n = 0, len(plan)
        while i < n and not stop.is_set():
            delay = float(plan.at[i]) - time.time()
            if delay > 0:
                try:
                    await asyncio.wait_for(stop.wait(), delay)
                    return
                except TimeoutError:
                    pass
            j = max(i + 1, int(np.searchsorted(plan.at, time.time(), side="right")))
            for sl in unique_batches(plan.idx[i:j], max(1, int(w.arm_batch))):
                idx, due, kind = plan.idx[i:j][sl], plan.new_due[i:j][sl], plan.kind[i:j][sl]
                old = self.processor.armed_due[idx].copy()
                armed_at = time.time()
                self.processor.note_armed(idx, due, armed_at)
                await scheduler.arm([Timer(ids[k], f, "poll", tenants[k]) for k, f in zip(idx.tolist(), due.tolist())])
                self.moves_done.append(([ids[k] for k in idx.tolist()], kind, armed_at, old, due))
            i = j

    def _write_moves(self) -> dict[str, Any] | None:
        """``moves.parquet`` and the moved timers' figures (None: nothing was moved)."""
        if not self.moves_done:
            return None
        import pandas as pd

        from metrics.moves import move_figures

        moves = pd.DataFrame(
            {
                "timer_id": [t for ids, *_ in self.moves_done for t in ids],
                "kind": np.concatenate([m[1] for m in self.moves_done]).astype(str),
                "moved_at": np.concatenate([np.full(len(m[0]), m[2]) for m in self.moves_done]),
                "old_due": np.concatenate([m[3] for m in self.moves_done]),
                "new_due": np.concatenate([m[4] for m in self.moves_done]),
            }
        )
        moves.to_parquet(self.run_dir / rundir.MOVES, index=False)
        return move_figures(rundir.read_fires(self.run_dir).to_pandas(), moves)

    async def _flush(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), FLUSH_EVERY_S)
            except TimeoutError:
                pass
            await self.recorder.maybe_flush(time.time())

    async def _status(self, stop: asyncio.Event) -> None:
        last_rows, last_t = self.recorder.rows, time.time()
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), STATUS_EVERY_S)
                return
            except TimeoutError:
                pass
            await self.workers.progress()
            now = time.time()
            rows = self.recorder.rows
            rate = (rows - last_rows) / max(1e-6, now - last_t)
            last_rows, last_t = rows, now
            latest = self.sampler.latest
            line = out.status_line(
                elapsed_s=now - self.window["arm_start"],
                measuring=now >= self.window["measure_start"],
                target=self.w.rate_per_s,
                achieved=rate,
                lag_p50_ms=latest.get(("run", "lag_p50_ms")),
                lag_p99_ms=latest.get(("run", "lag_p99_ms")),
                overdue=len(self.processor.outstanding(now - self.w.on_time_s)),
                dead=self.sampler.relation_total("n_dead_tup"),
                toast_dead=self.sampler.relation_total("n_dead_tup", toast=True),
                hot=self.sampler.relation_ratio(),
            )
            self.say(line + self.workers.status() + self.status_extra())

    async def _finish(self, scheduler) -> None:
        complete = self.incomplete_reason is None
        if not complete:  # stopped early, wherever that happened
            self.window["measure_end"] = min(self.window["measure_end"], time.time())
        # a run that failed before its workers ran (a node never got ready, Ctrl-C while
        # waiting) must leave no node or locust process behind; a no-op after _measure
        if self.arm_load is not None:
            await self.arm_load.stop()
        if self.neighbour is not None:
            await self.neighbour.stop(graceful=complete)
        if self.workers is not None:
            await self.workers.stop()
        extra: dict[str, Any] = {}
        undelivered = None
        if self.recorder is not None:
            self.recorder.close()
        if self.sampler is not None:  # the run measured (a recorder without a sampler never armed)
            cutoff = self.window.setdefault("undelivered_before", self.window["measure_end"])
            held = await self._held(scheduler) if self.processor.outstanding(cutoff).size else {}
            self.window["held_asked"] = held is not None
            undelivered = self.processor.undelivered_table(cutoff, self.window["measure_start"], held)
            skipped = self.workers.skipped_due()
            self.load.update(
                skipped_periods=int(len(skipped)),
                skipped_periods_in_window=int(
                    ((skipped >= self.window["measure_start"]) & (skipped < self.window["measure_end"])).sum()
                ),
            )
            try:
                await self.sampler.bloat()  # pgstattuple, before the schema goes
            except Exception as exc:
                self.measurement["unavailable"].setdefault("bloat", f"pgstattuple failed: {type(exc).__name__}: {exc}")
            try:
                await self.sampler.close()
            except Exception:
                pass
            self.measurement["unavailable"].update(self.sampler.unavailable)
            self.sampler.save()
            extra = await self.workers.collect(self.run_dir, self.window["measure_start"], self.say)
            if self.arm_load is not None:
                extra["arm_load"], warnings = self.arm_load.summary()
                extra.setdefault("warnings", []).extend(warnings)
        else:
            self.window["measure_end"] = self.window["measure_start"] = self.window["arm_start"]
        await asyncio.to_thread(rundir.compact, self.run_dir, undelivered)  # segments -> fires/samples.parquet
        self._write_config()
        summary = accounting.compute_summary(self.run_dir, complete=complete, incomplete_reason=self.incomplete_reason)
        summary["warnings"].extend(extra.pop("warnings", []))
        summary.update(extra)
        if self.faults is not None:
            from metrics.faults import fault_summary

            self.faults.write()
            summary["faults"] = fault_summary(self.run_dir)
        if self.sampler is not None:
            summary["warnings"].extend(self._recording_warnings())
        await self._scale_figures(scheduler, summary)
        rundir.write_json(self.run_dir / rundir.SUMMARY, summary)
        self.summary = summary
        if scheduler is not None and self.sampler is not None:
            try:
                await self.after_run(scheduler, summary)
            except Exception as exc:
                self.say(f"warning: after-run step failed: {type(exc).__name__}: {exc}")
                if os.environ.get("TIMERBENCH_DEBUG"):
                    raise
        if scheduler is not None:
            try:
                await asyncio.wait_for(scheduler.teardown(drop=not self.keep), 60)
                if self.keep and self.dsn:
                    from harness.schemas import mark_kept

                    await mark_kept(self.dsn, self.schema)  # bench env gc leaves it
                    self.say(f"kept schema {self.schema}")
            except Exception as exc:
                self.say(f"warning: teardown failed: {type(exc).__name__}: {exc}")
        if self.neighbour is not None and not self.keep:
            try:
                await asyncio.wait_for(self.neighbour.teardown(), 60)
            except Exception as exc:
                self.say(f"warning: the neighbour's teardown failed: {type(exc).__name__}: {exc}")
        await self._let_go()
        self.print_summary(summary)

    async def _scale_figures(self, scheduler, summary: dict[str, Any]) -> None:
        """What ``bench scale`` reads beside the usual figures: the arming (unless the design
        recorded its own), the run process's peak RSS (``harness``), the moved long-horizon timers, and a
        design's own report of its shards when it has one (temporal_shards' ``shard_report``)."""
        import resource

        if self.arming is not None:
            summary.setdefault("arming", self.arming)
        if isinstance(summary.get("harness"), dict):  # the run process: its peak RSS beside its CPU
            summary["harness"]["rss_peak_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        try:
            moved = self._write_moves()
        except Exception as exc:
            moved = None
            summary["warnings"].append(f"the moved timers could not be read: {type(exc).__name__}: {exc}")
        if moved is not None:
            from metrics.moves import failure_line

            summary["moves"] = moved
            line = failure_line(moved)
            if line:
                summary["failures"].append(line)
                summary["correct"] = False
        report = getattr(scheduler, "shard_report", None)
        if report is not None and self.sampler is not None:
            try:
                summary["scheduler_report"] = await asyncio.wait_for(report(), 30)
            except Exception as exc:
                summary["warnings"].append(f"{self.cls.name}'s shard report failed: {type(exc).__name__}: {exc}")

    async def _let_go(self) -> None:
        """The run is over: its schema lease and its directory's lock go."""
        if self._neighbour_lease is not None:
            try:
                await self._neighbour_lease.release()
            except Exception:
                pass
            self._neighbour_lease = None
        if self._lease is not None:
            try:
                await self._lease.release()
            except Exception:
                pass
            self._lease = None
        if self._lock_fd is not None:
            rundir.release_run_lock(self.run_dir, self._lock_fd)
            self._lock_fd = None

    async def _held(self, scheduler) -> dict[str, float] | None:
        """What the backend still holds after the drain (timer id -> fire time), or None when it
        cannot say (its store is gone, or it takes too long): lost is then not judged."""
        if scheduler is None:
            return None
        try:
            timers = await asyncio.wait_for(scheduler.export_armed(), EXPORT_TIMEOUT_S)
        except Exception as exc:
            self.say(
                f"warning: could not ask {self.cls.name} what it still holds ({type(exc).__name__}: {exc}); "
                f"undelivered fires count as pending, lost is not judged"
            )
            return None
        # a timer armed with fire_at None is held as due now: any undelivered due is at or after it
        return {t.id: (-math.inf if t.fire_at is None else float(t.fire_at)) for t in timers}

    def _recording_warnings(self) -> list[str]:
        out_: list[str] = []
        if self.recorder.late_effects:
            out_.append(f"{self.recorder.late_effects} effects were committed more than a few seconds after their fire")
        if self.recorder.unmatched_commits:
            out_.append(f"{self.recorder.unmatched_commits} committed effects could not be matched to a received fire")
        if self.processor.unknown:
            out_.append(f"{self.processor.unknown} fires for timer ids outside the population")
        if self.sampler.errors:
            out_.append(f"{self.sampler.errors} samples incomplete (last: {self.sampler.last_error})")
        return out_

    def _install_sigint(self, loop: asyncio.AbstractEventLoop) -> None:
        def on_sigint() -> None:
            if self.interrupted.is_set():  # a second Ctrl-C: stop waiting for a clean finish
                loop.remove_signal_handler(signal.SIGINT)
                signal.raise_signal(signal.SIGINT)
                return
            self.say("interrupted: stopping and writing the run directory (Ctrl-C again to abandon)")
            self.interrupted.set()

        try:
            loop.add_signal_handler(signal.SIGINT, on_sigint)
        except (NotImplementedError, RuntimeError):
            pass


class _Interrupted(Exception):
    pass


def _git_commit() -> str | None:
    here = Path(__file__).resolve().parent.parent
    try:
        res = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
        return res.stdout.strip() or None
    except Exception:
        return None
