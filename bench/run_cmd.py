"""``bench run``: replay a workload against one scheduler and record everything.

Order of a run: resolve the workload and the scheduler's options (bad input fails here, exit 2),
connect to (or start) the servers the scheduler needs, create the run directory and write
``config.json``, set the scheduler up in a fresh schema, take the sampler's baseline, arm the
population (sorted by first fire time, in batches, while the scheduler already runs), warm up,
measure, drain (up to a grace period, until every fire due in the window has arrived), stop
gracefully, write the missed fires, the samples and ``summary.json``, tear down
(unless ``--keep``) and print the summary.

Ctrl-C or a crash of the scheduler still ends with a readable run directory: whatever was
recorded is written and the summary says ``complete: false`` with the reason.
"""

from __future__ import annotations

import asyncio
import gc
import importlib.metadata
import os
import platform
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import click
import numpy as np

from bench.cli import resolve_servers, scheduler_options, stack_options
from bench.errors import UsageError

ARM_LEAD_S = 0.5  # first fires start this long after arming begins
STATUS_EVERY_S = 3.0
FLUSH_EVERY_S = 1.0
GRACEFUL_STOP_S = 15.0  # after this, a run loop that ignores ``stop`` is cancelled
MIN_GRACE_S = 2.0  # the grace period: at least this, and at least 2x the backend's max lag


@click.command("run")
@click.option("--scheduler", "scheduler_name", required=True, help="A registered scheduler (see `bench schedulers`).")
@click.option("--workload", "workload_spec", default=None, help="A preset name or a YAML file (default: production).")
@click.option("--rate", default=None, help="Steady-state fire rate: 556/s, 33360/min or 556. The population follows it.")
@click.option("--triggers", default=None, help="Population size (the rate follows it).")
@click.option("--interval", default=None, help="Poll interval range, e.g. 60s..120s.")
@click.option("--tenants", default=None, help="Number of tenants.")
@click.option("--tenant-skew", default=None, help="Zipf exponent of triggers per tenant (0 = uniform).")
@click.option("--state-size", default=None, help="Poll state per trigger, bytes.")
@click.option("--duration", default=None, help="Measured window, e.g. 10m.")
@click.option("--warmup", default=None, help="Warm-up before the measured window, e.g. 60s.")
@click.option("--seed", default=None, help="Random seed of the population and the provider.")
@click.option("--trace", default=None, help="CSV to replay: trigger_id,tenant_id,interval_s,first_fire_s.")
@click.option("--opt", "opts", multiple=True, help="Scheduler option key=value (repeatable).")
@click.option("--keep", is_flag=True, help="Keep the run's schema instead of dropping it.")
@click.option("--out", default="runs", show_default=True, help="Parent directory of run directories.")
@click.option("--fault", "faults", multiple=True,
              help="Inject a fault (repeatable): kill-worker@30s, pause-worker@30s:20s, restart-postgres@60s, "
                   "restart-temporal@60s, hold-snapshot@10s:120s, slow-provider@30s:60s:5s (see bench/faults.py).")
@click.option("--nodes", type=int, default=None,
              help="Run the claim loops in N `bench serve` processes on one store (see bench/nodes.py).")
@click.option("--arm-load", default=None,
              help="Arm this many extra timers/s through PUT /timers with locust beside the run, e.g. 200/s "
                   "(implies --nodes 1 at least).")
@stack_options
def run(scheduler_name, workload_spec, rate, triggers, interval, tenants, tenant_skew, state_size,
        duration, warmup, seed, trace, opts, keep, out, dsn, temporal_address, faults=(), nodes=None,
        arm_load=None) -> None:
    """Run one workload against one scheduler; write runs/<timestamp>-<scheduler>/."""
    from loadgen import workload as wl
    from schedulers.base import UnknownScheduler, scheduler_class

    try:
        cls = scheduler_class(scheduler_name)
    except UnknownScheduler as exc:
        raise UsageError(str(exc)) from None
    if rate is not None and triggers is not None:
        raise UsageError(f"give --rate or --triggers, not both (got --rate {rate} and --triggers {triggers})")
    try:
        w = wl.load(workload_spec)
        overrides = {"rate": rate, "triggers": triggers, "interval": interval, "tenants": tenants,
                     "tenant_skew": tenant_skew, "state_size": state_size, "duration": duration,
                     "warmup": warmup, "seed": seed, "trace": trace}
        w = wl.Overrides(overrides).apply(w).resolved()
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    except TypeError as exc:
        raise UsageError(f"bad workload value: {exc}") from None
    options = scheduler_options(cls, opts)
    arm_load_per_s = None
    if arm_load is not None:
        from loadgen.rates import parse_rate

        try:
            arm_load_per_s = parse_rate(arm_load)
        except ValueError as exc:
            raise UsageError(f"--arm-load: {exc}") from None
        nodes = max(1, nodes or 1)  # locust needs a node's HTTP API to arm through
    if nodes is not None:
        if nodes < 1:
            raise UsageError(f"bad --nodes {nodes}; give a count of at least 1")
        if not (getattr(cls, "needs_postgres", False) or getattr(cls, "needs_temporal", False)):
            raise UsageError(f"--nodes/--arm-load need a shared store; {cls.name} keeps its timers inside one "
                             f"process (use pg_queue, pg_leased or temporal_shards)")
    from bench import faults as faults_mod

    try:
        fault_specs = faults_mod.parse_all(faults)
    except ValueError as exc:
        raise UsageError(str(exc)) from None

    resolved_dsn, address = resolve_servers([cls], dsn, temporal_address)

    if fault_specs:
        faults_mod.check(fault_specs, dsn=resolved_dsn, temporal_address=address, nodes=nodes)
    if nodes:
        from bench.nodes import NodesRun

        runner = NodesRun(cls, options, w, resolved_dsn, address, Path(out), keep, list(sys.argv), nodes=nodes,
                          arm_load=arm_load_per_s)
    else:
        runner = Run(cls, options, w, resolved_dsn, address, Path(out), keep, list(sys.argv))
    runner.fault_specs = fault_specs
    code = asyncio.run(runner.main())
    if code:
        sys.exit(code)


class Run:
    def __init__(self, cls, options, workload, dsn, temporal_address, out: Path, keep: bool, argv: list[str]) -> None:
        from rich.console import Console

        self.cls = cls
        self.options = options
        self.w = workload
        self.dsn = dsn
        self.temporal_address = temporal_address
        self.out = out
        self.keep = keep
        self.argv = argv
        self.console = Console(highlight=False, soft_wrap=True)
        self.interrupted = asyncio.Event()
        self.incomplete_reason: str | None = None
        self.fault_specs: list = []  # bench.faults.FaultSpec, from --fault
        self.faults = None  # the bench.faults.FaultInjector of this run, if any

    # -- hooks for runs built on this one (bench migrate dry-run) ---------------------------

    def make_scheduler(self, ctx):
        from schedulers.base import create

        return create(self.cls.name, ctx, **self.options)

    async def prepare(self, scheduler, population, arm_start: float) -> np.ndarray | None:
        """Before the run loop starts; returns the population indices ``_arm`` still arms
        (None: all of them)."""
        return None

    def status_extra(self) -> str:
        """Appended to the live status line."""
        return ""

    async def after_run(self, scheduler, summary: dict[str, Any]) -> None:
        """After summary.json is written, before teardown."""
        return None

    # -- hooks for runs whose claim loops live elsewhere (bench run --nodes, bench/nodes.py) --

    async def start_workers(self, scheduler) -> None:
        """After setup, before the window is fixed and arming starts."""
        return None

    def run_loop(self, scheduler, stop: asyncio.Event):
        """The coroutine that claims and processes until ``stop`` (the run's ``run`` task)."""
        if self.faults is not None:  # faults supervise the run loop (kill-worker crashes and replaces it)
            return self.faults.supervise({"poll": self.processor}, stop)
        return scheduler.run({"poll": self.processor}, stop, worker_id="w0")

    async def refresh_progress(self) -> None:
        """Before ``self.processor`` is asked what is outstanding (status line, drain)."""
        return None

    async def merge_records(self) -> dict[str, Any]:
        """After fires.parquet is closed, before the summary: fields to add to it (and its
        ``warnings``, appended)."""
        return {}

    # -- the run directory ----------------------------------------------------------------

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
            from bench import stack

            env["temporal_version"] = stack.temporal_version()
        return env

    def _config(self) -> dict[str, Any]:
        from dataclasses import asdict

        from bench import stack

        return {
            "scheduler": self.cls.name,
            "options": self.options,
            "workload": asdict(self.w),
            "environment": self.environment,
            "dsn": stack.redact_dsn(self.dsn) if self.dsn else None,
            "temporal_address": self.temporal_address,
            "started_at": self.started_at,
            "argv": stack.redact_argv(self.argv),  # no password or token in the run directory
            "schema": self.schema,
            "window": self.window,
        }

    def _write_config(self) -> None:
        from metrics.rundir import CONFIG, write_json

        write_json(self.run_dir / CONFIG, self._config())

    # -- the run ----------------------------------------------------------------------------

    async def main(self) -> int:
        from loadgen.population import build
        from metrics import rundir
        from metrics.recorder import FireRecorder
        from metrics.sampler import describe_postgres
        from schedulers.base import StoreContext

        loop = asyncio.get_running_loop()
        self._install_sigint(loop)
        self.started_at = time.time()
        self.run_dir = rundir.new_run_dir(self.out, self.cls.name, self.started_at)
        stamp = time.strftime("%Y%m%d_%H%M%S", time.gmtime(self.started_at))
        self.schema = f"run_{stamp}_{secrets.token_hex(3)}"
        self.window = {"arm_start": self.started_at, "measure_start": self.started_at + self.w.warmup_s,
                       "measure_end": self.started_at + self.w.warmup_s + self.w.duration_s, "grace_s": None}
        self.environment = self._environment({})
        self._write_config()
        self.recorder = self.processor = self.sampler = None
        scheduler = None
        exit_code = 0
        try:
            pg = await describe_postgres(self.dsn) if self.dsn else {}
            self.environment = self._environment(pg)
            population = build(self.w)
            if self.w.trace:  # the trace fixes the population, and so the rate
                self.w.triggers = len(population)
                self.w.rate_per_s = population.rate_per_s()
                self.w.fill_concurrency()
            ctx = StoreContext(dsn=self.dsn, schema=self.schema, temporal_address=self.temporal_address,
                               state_bytes=self.w.state_bytes)
            scheduler = self.make_scheduler(ctx)
            self.options = dict(getattr(scheduler, "options", self.options))  # as the backend resolved them
            grace = self.w.grace_s
            if grace is None:
                grace = max(MIN_GRACE_S, 2.0 * float(scheduler.capabilities.max_lag_s))
                self.w.grace_s = grace
            self.window["grace_s"] = grace
            self._write_config()
            self.console.print(f"setting up {self.cls.name} in schema {self.schema} ...")
            await self._until_interrupted(scheduler.setup())
            exit_code = await self._measure(scheduler, population, FireRecorder)
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
        return exit_code

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

    async def _measure(self, scheduler, population, FireRecorder) -> int:
        from loadgen.processor import PollingProcessor
        from metrics.sampler import Sampler

        w = self.w
        await self.start_workers(scheduler)
        now = time.time()
        arm_start = now + ARM_LEAD_S
        self.window.update(arm_start=arm_start, measure_start=arm_start + w.warmup_s,
                           measure_end=arm_start + w.warmup_s + w.duration_s)
        self._write_config()
        self.recorder = FireRecorder(self.run_dir / "fires.parquet", self.window["measure_start"],
                                     self.window["measure_end"])
        self.processor = PollingProcessor(w, population, self.recorder)
        self.sampler = Sampler(scheduler, self.recorder, self.dsn, self.run_dir)
        await self.sampler.open()

        stop = asyncio.Event()
        tasks: dict[str, asyncio.Task] = {}
        remaining = await self.prepare(scheduler, population, arm_start)
        if self.fault_specs:
            from bench.faults import FaultInjector

            self.faults = FaultInjector(self.fault_specs, self, scheduler)
        tasks["run"] = asyncio.create_task(self.run_loop(scheduler, stop))
        tasks["arm"] = asyncio.create_task(self._arm(scheduler, population, arm_start, remaining))
        sampler_stop = asyncio.Event()
        helpers = [asyncio.create_task(self.sampler.loop(sampler_stop)),
                   asyncio.create_task(self._status(sampler_stop)),
                   asyncio.create_task(self._flush(sampler_stop))]
        if self.faults is not None:
            helpers.append(asyncio.create_task(self.faults.loop(stop)))
        self.console.print(
            f"run {self.run_dir.name}: {len(population):,} triggers, target {w.rate_per_s:,.1f} fires/s, "
            f"warm-up {w.warmup_s:g} s, measured {w.duration_s:g} s"
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
                    self.incomplete_reason = f"{'scheduler' if name == 'run' else 'arming'} crashed: {type(exc).__name__}: {exc}"
                    code = 1
                elif name == "run" and t in done:
                    self.incomplete_reason = "the scheduler's run loop returned before stop was set"
                    code = 1
            if self.incomplete_reason:
                self.window["measure_end"] = min(self.window["measure_end"], time.time())
                self.recorder.measure_end = self.window["measure_end"]
                # no time to drain: only fires due a grace period before the stop count as missed
                self.window["missed_before"] = self.window["measure_end"] - self.window["grace_s"]
            else:
                await self._drain(tasks["run"])
        finally:
            stop.set()
            tasks["arm"].cancel()
            try:
                await asyncio.wait_for(asyncio.shield(tasks["run"]), GRACEFUL_STOP_S)
            except (TimeoutError, asyncio.TimeoutError):
                tasks["run"].cancel()
                self.console.print(f"warning: the run loop did not stop within {GRACEFUL_STOP_S:g} s; cancelled it")
            except BaseException:
                pass
            await asyncio.gather(tasks["run"], tasks["arm"], return_exceptions=True)
            sampler_stop.set()
            await asyncio.gather(*helpers, return_exceptions=True)
            try:
                await self.sampler.sample()  # the state at the end
            except Exception:
                pass
        return code

    async def _drain(self, run_task: asyncio.Task) -> None:
        """After the measured window, give every fire due in it up to ``grace_s`` to arrive.

        The scheduler keeps running; fires received now are recorded but lie outside the
        window. Ends as soon as nothing due before the window's end is outstanding, so a
        healthy backend adds well under a second; what is still outstanding at the end of the
        grace period is missed.
        """
        end = self.window["measure_end"]
        limit = end + self.window["grace_s"]
        while time.time() < limit and not self.interrupted.is_set() and not run_task.done():
            await self.refresh_progress()
            if len(self.processor.outstanding(end)) == 0:
                break
            await asyncio.sleep(0.1)
        self.window["drained_s"] = max(0.0, time.time() - end)
        if self.interrupted.is_set() or run_task.done():
            # the drain was cut short: judge only fires that had their full grace period
            self.window["missed_before"] = min(end, time.time() - self.window["grace_s"])
        else:
            self.window["missed_before"] = end

    async def _arm(self, scheduler, population, arm_start: float, only: np.ndarray | None = None) -> None:
        from schedulers.base import Timer

        due = arm_start + population.first_fire_s
        order = np.argsort(due, kind="stable")
        if only is not None:  # prepare() armed the others already
            order = only[np.argsort(due[only], kind="stable")]
        ids, tenants = population.ids, population.tenants
        step = max(1, int(self.w.arm_batch))
        for lo in range(0, len(order), step):
            idx = order[lo:lo + step]
            fire_at = np.round(due[idx], 6)
            timers = [Timer(ids[i], f, "poll", tenants[i]) for i, f in zip(idx.tolist(), fire_at.tolist())]
            armed_at = time.time()
            self.processor.note_armed(idx, fire_at, armed_at)
            await scheduler.arm(timers)
            await asyncio.sleep(0)  # let the run loop claim between arm batches
        # The population and the store's entries live for the whole run: move them out of the
        # collector's sight, or each full collection walks them all (100+ ms pauses at 300k
        # timers, which would show up as lag).
        gc.collect()
        gc.freeze()

    async def _flush(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), FLUSH_EVERY_S)
            except (TimeoutError, asyncio.TimeoutError):
                pass
            await self.recorder.maybe_flush(time.time())

    async def _status(self, stop: asyncio.Event) -> None:
        last_rows, last_t = self.recorder.rows, time.time()
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), STATUS_EVERY_S)
                return
            except (TimeoutError, asyncio.TimeoutError):
                pass
            await self.refresh_progress()
            now = time.time()
            rows = self.recorder.rows
            rate = (rows - last_rows) / max(1e-6, now - last_t)
            last_rows, last_t = rows, now
            self.console.print(self._status_line(now, rate))

    def _status_line(self, now: float, rate: float) -> str:
        w = self.window
        phase = "warm-up" if now < w["measure_start"] else "measure"
        elapsed = now - w["arm_start"]
        latest = self.sampler.latest
        p50 = latest.get(("run", "lag_p50_ms"))
        p99 = latest.get(("run", "lag_p99_ms"))
        missed = len(self.processor.outstanding(now - w["grace_s"]))
        parts = [
            f"[{elapsed:6.1f}s {phase:<7}]",
            f"target {self.w.rate_per_s:,.0f}/s achieved {rate:,.0f}/s",
            f"lag p50 {_ms(p50)} p99 {_ms(p99)}",
            f"missed {missed}",
        ]
        dead = self.sampler.relation_total("n_dead_tup")
        if dead is not None:
            toast = self.sampler.relation_total("n_dead_tup", toast=True)
            parts.append(f"dead {dead:,.0f} (toast {toast or 0:,.0f})")
            hot = self.sampler.relation_ratio()
            parts.append(f"HOT {'-' if hot is None else f'{100 * hot:.0f}%'}")
        return "  ".join(parts) + self.status_extra()

    async def _finish(self, scheduler) -> None:
        from metrics import rundir

        complete = self.incomplete_reason is None
        if not complete:  # stopped early, wherever that happened
            self.window["measure_end"] = min(self.window["measure_end"], time.time())
        if self.recorder is not None:
            missed = None
            if self.processor is not None:
                cutoff = self.window.get("missed_before", self.window["measure_end"] - self.window["grace_s"])
                self.window["missed_before"] = cutoff
                missed = self.processor.missed_table(cutoff, self.window["measure_start"])
            self.recorder.close(missed)
            if self.sampler is not None:
                try:
                    await self.sampler.close()
                except Exception:
                    pass
                self.sampler.save()
            extra = await self.merge_records()
        else:
            extra = {}
            self.window["measure_end"] = self.window["measure_start"] = self.window["arm_start"]
        self._write_config()
        summary = rundir.compute_summary(self.run_dir, complete=complete, incomplete_reason=self.incomplete_reason)
        summary["warnings"].extend(extra.pop("warnings", []))
        summary.update(extra)
        if self.faults is not None:
            from metrics.faults import fault_summary

            self.faults.write()
            summary["faults"] = fault_summary(self.run_dir)
        if self.recorder is not None and self.processor is not None and self.sampler is not None:
            if self.recorder.late_effects:
                summary["warnings"].append(
                    f"{self.recorder.late_effects} effects were committed more than a few seconds after their fire")
            if self.recorder.unmatched_commits:
                summary["warnings"].append(
                    f"{self.recorder.unmatched_commits} committed effects could not be matched to a received fire")
            if self.processor.unknown:
                summary["warnings"].append(f"{self.processor.unknown} fires for timer ids outside the population")
            if self.sampler.errors:
                summary["warnings"].append(
                    f"{self.sampler.errors} samples incomplete (last: {self.sampler.last_error})")
        rundir.write_json(self.run_dir / rundir.SUMMARY, summary)
        if scheduler is not None and self.recorder is not None:
            try:
                await self.after_run(scheduler, summary)
            except Exception as exc:
                self.console.print(f"warning: after-run step failed: {type(exc).__name__}: {exc}")
                if os.environ.get("TIMERBENCH_DEBUG"):
                    raise
        if scheduler is not None:
            try:
                await asyncio.wait_for(scheduler.teardown(drop=not self.keep), 60)
                if self.keep and self.dsn:
                    self.console.print(f"kept schema {self.schema}")
            except Exception as exc:
                self.console.print(f"warning: teardown failed: {type(exc).__name__}: {exc}")
        self._print_summary(summary)

    def _print_summary(self, s: dict[str, Any]) -> None:
        from rich.table import Table

        t = Table(title=f"{s['scheduler']} / {s['workload_name']}", show_header=False)
        t.add_column("figure")
        t.add_column("value", justify="right")
        lag = s["lag_ms"]
        dead = s["dead_tuples"]
        pf = s["per_fire"]
        rows = [
            ("complete", "yes" if s["complete"] else f"NO: {s['incomplete_reason']}"),
            ("target rate", _num(s["target_rate"], "/s")),
            ("achieved rate", _num(s["achieved_rate"], "/s")),
            ("claim rate", _num(s["claim_rate"], "/s")),
            ("measured / warm-up", f"{s['measured_s']:.1f} s / {s['warmup_s']:.1f} s"),
            ("lag p50 / p90 / p99", f"{_ms(lag['p50'])} / {_ms(lag['p90'])} / {_ms(lag['p99'])}"),
            ("lag p99.9 / max", f"{_ms(lag['p999'])} / {_ms(lag['max'])}"),
            ("fires", f"{s['fires']:,}"),
            ("missed", f"{s['missed']:,}"),
            ("duplicate fires / effects", f"{s['duplicate_fires']:,} / {s['duplicate_effects']:,}"),
            ("dead tuples peak / end", f"{_num(dead['table_peak'])} / {_num(dead['table_end'])}"),
            ("TOAST dead peak / end", f"{_num(dead['toast_peak'])} / {_num(dead['toast_end'])}"),
            ("HOT ratio", "-" if s["hot_ratio"] is None else f"{100 * s['hot_ratio']:.1f}%"),
            ("ins / upd / del per fire", f"{_num(pf['inserts'], d=2)} / {_num(pf['updates'], d=2)} / {_num(pf['deletes'], d=2)}"),
            ("WAL bytes per fire", _num(pf["wal_bytes"])),
            ("autovacuum runs", _num(s["autovacuum_runs"])),
            ("table / index bytes", f"{_num(s['table_bytes_end'])} / {_num(s['index_bytes_end'])}"),
        ]
        for k, v in rows:
            t.add_row(k, v)
        self.console.print(t)
        for warning in s["warnings"]:
            self.console.print(f"warning: {warning}")
        if s.get("faults"):
            from bench.faults import summary_lines

            for line in summary_lines(s):
                self.console.print(line)
        self.console.print(f"run directory: {self.run_dir}")

    def _install_sigint(self, loop: asyncio.AbstractEventLoop) -> None:
        def on_sigint() -> None:
            if self.interrupted.is_set():  # a second Ctrl-C: stop waiting for a clean finish
                loop.remove_signal_handler(signal.SIGINT)
                signal.raise_signal(signal.SIGINT)
                return
            self.console.print("interrupted: stopping and writing the run directory (Ctrl-C again to abandon)")
            self.interrupted.set()

        try:
            loop.add_signal_handler(signal.SIGINT, on_sigint)
        except (NotImplementedError, RuntimeError):
            pass


class _Interrupted(Exception):
    pass


def _ms(v: float | None) -> str:
    if v is None or v != v:
        return "-"
    return f"{v:,.1f} ms" if v < 10_000 else f"{v / 1000:,.1f} s"


def _num(v: float | None, unit: str = "", d: int | None = None) -> str:
    if v is None:
        return "-"
    if d is not None:
        return f"{v:,.{d}f}{unit}"
    if isinstance(v, float) and abs(v) < 1000 and not v.is_integer():
        return f"{v:,.1f}{unit}"
    return f"{v:,.0f}{unit}"


def _git_commit() -> str | None:
    here = Path(__file__).resolve().parent.parent
    try:
        out = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
        return out.stdout.strip() or None
    except Exception:
        return None
