"""The migration rehearsal (``bench migrate dry-run``): moving timers from one scheduler to another.

The rehearsal is a ``bench run`` whose scheduler is a :class:`~migration.dual.DualWriteScheduler`
(the old store ``--from``, the new one ``--to``), each in its own schema (``<schema>_p`` and
``<schema>_s``, printed at the start for ``bench migrate reconcile``):

1. half of the population is armed in the old store alone (the system as it is today), including
   its long-horizon timers (30-60 days out; a rehearsal adds them when the workload has none);
2. the plan's steps run at their times (:mod:`migration.plan`: dual-write, backfill,
   switch-execution, stop-old-writes, rollback, reconcile), each timed and followed by a check
   of the stores (:class:`migration.rehearsal.Rehearsal`); the rest of the population is armed
   through the dual writer, and the application keeps writing (it moves long-horizon timers,
   ``--app-writes``) so that a fault meets real dual writes;
3. faults (``--fault``) hit the new store's side: ``kill-worker`` crashes its claim loop (a
   replacement starts a second later), ``pause-worker@T:D`` stalls it for D, ``restart-temporal``
   and ``restart-postgres`` restart the embedded servers (the latter hits both stores);
4. after the measured window and its drain, while both stores still run, a last reconcile
   compares them and repairs drift;
5. the verdict (:func:`migration.compare.verdict`): **GO** only if nothing is missing, lost or
   executed twice, no effect is duplicated, the shadow's lag p99 is within ``--max-lag-p99``
   (default: its declared bound) and its regression over the primary within
   ``--max-lag-regression`` (when given), every step's checks held and the stores agree at the
   end.

The run directory is an ordinary one (``fires.parquet`` holds the executed fires) plus
``migration.json``: the verdict with its reasons, the lag comparison (per side, the regression,
the worst tenants), each step (planned and actual time, what it did, its store checks, the fate
of the fires due in its period), the divergence windows, the last reconcile, the fire-by-fire
counts with example timer ids, and each side's resources (dead tuples, writes per fire).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from harness.inputs import RunPlan
from harness.session import RunSession
from harness.workers import Killed, Workers
from reports import fmt

PRIMARY_SUFFIX, SHADOW_SUFFIX = "_p", "_s"  # schema of the old / new store: <run schema><suffix>
LONG_HORIZON_SHARE = 0.05  # share of long-horizon timers added to a workload that has none
APP_WRITES_PER_S = 10.0  # default application writes (long-horizon moves) per second


def dry_run(
    primary_cls,
    shadow_cls,
    opts: dict[str, dict],
    workload,
    dsn,
    temporal_address,
    out: Path,
    keep: bool,
    argv: list[str],
    *,
    control: bool,
    say,
    **rehearsal,
) -> int:
    """The whole rehearsal (a control run first with ``control``); the exit code: 0 GO, 3 NO-GO
    (distinct from usage, 2, and a crash, 1, for scripts), else the failed run's own code.
    ``rehearsal``: the keyword arguments of :class:`MigrationRun`."""
    noise_floor = None
    if control:
        say(f"control: {primary_cls.name} against itself first, to measure the noise floor")
        ctl_opts = {**rehearsal, "fault_specs": ()}
        ctl = MigrationRun(
            primary_cls,
            primary_cls,
            {"from": opts["from"], "to": opts["from"]},
            replace(workload),
            dsn,
            temporal_address,
            out,
            keep,
            argv,
            **ctl_opts,
        )
        code = asyncio.run(ctl.main())
        if code:
            return code
        m = getattr(ctl, "migration", None) or {}
        noise_floor = {
            "run_dir": str(ctl.run_dir),
            "verdict": m.get("verdict"),
            "counts": m.get("counts"),
            "lag_diff_ms": m.get("lag_diff_ms"),
            "lag": m.get("lag"),
        }
    runner = MigrationRun(primary_cls, shadow_cls, opts, workload, dsn, temporal_address, out, keep, argv, **rehearsal)
    runner.noise_floor = noise_floor
    code = asyncio.run(runner.main())
    if code:
        return code
    return 0 if runner.go else 3


def with_long_horizon(w, share: float = LONG_HORIZON_SHARE):
    """The workload with long-horizon timers in its population: unchanged when it has some, else
    ``share`` of the triggers armed 30-60 days out on top of the periodic ones (same rate)."""
    if w.long_horizon_share > 0 or w.trace or share <= 0:
        return w
    periodic = int(w.triggers)
    return replace(w, long_horizon_share=share, triggers=int(round(periodic / (1.0 - share))))


class _DualClass:
    """Stands in for a scheduler class so :class:`RunSession` can drive the dual writer unchanged."""

    def __init__(self, primary_cls, shadow_cls) -> None:
        self.primary_cls = primary_cls
        self.shadow_cls = shadow_cls
        self.name = f"migrate-{primary_cls.name}-to-{shadow_cls.name}"
        self.needs_postgres = primary_cls.needs_postgres or shadow_cls.needs_postgres
        self.needs_temporal = primary_cls.needs_temporal or shadow_cls.needs_temporal
        self.default_options: dict[str, Any] = {}


class DualWorkers(Workers):
    """The dual writer's claim loops, in this process. Faults reach the **new store's** side:
    a kill crashes its loop (nothing released), a restart starts a replacement, a pause stalls
    its processing (:meth:`migration.dual.DualWriteScheduler.stall`)."""

    can_pause = True

    def __init__(self) -> None:
        self.dw = None
        self.processor = None

    async def start(self, scheduler, processor) -> None:
        self.dw = scheduler
        self.processor = processor

    async def run(self, stop: asyncio.Event) -> None:
        await self.dw.run({"poll": self.processor}, stop, worker_id="w0")

    async def kill(self, mid_batch_wait_s: float = 0.0) -> Killed:
        from migration.dual import SHADOW

        await self.dw.crash_loop(SHADOW)
        return Killed(f"w0-{SHADOW}")

    async def restart(self, killed: Killed) -> str:
        from migration.dual import SHADOW

        self.dw.start_loop(SHADOW)
        return f"w0-{SHADOW}-r{self.dw.loops[SHADOW].starts - 1}"

    async def pause(self, seconds: float, done: asyncio.Event) -> Killed:
        from migration.dual import SHADOW

        await self.dw.stall(SHADOW, seconds, done)
        return Killed(f"w0-{SHADOW}")

    def claimed_timers(self) -> int:
        """Both stores' claims (the dual writer runs a claim loop per store)."""
        return 0 if self.dw is None else int(self.dw.claimed_timers)

    def status(self) -> str:
        if self.dw is None:
            return ""
        states = self.dw.loop_states()
        return f"  | loops: old {states['primary']}, new {states['shadow']}"


class MigrationRun(RunSession):
    def __init__(
        self,
        primary_cls,
        shadow_cls,
        opts,
        workload,
        dsn,
        temporal_address,
        out,
        keep,
        argv,
        *,
        steps,
        tolerance_s: float,
        max_extra_ratio: float,
        max_lag_p99_s: float | None = None,
        max_lag_regression_s: float | None = None,
        settle_s: float | None = None,
        app_writes_per_s: float = APP_WRITES_PER_S,
        write_timeout_s: float | None = None,
        fault_specs=(),
    ) -> None:
        super().__init__(
            RunPlan(
                _DualClass(primary_cls, shadow_cls),
                opts,
                with_long_horizon(workload),
                out,
                fault_specs=list(fault_specs),
                dsn=dsn,
                temporal_address=temporal_address,
                keep=keep,
                argv=argv,
            )
        )
        self.steps = list(steps)
        self.tolerance_s = tolerance_s
        self.max_extra_ratio = max_extra_ratio
        self.max_lag_p99_s = max_lag_p99_s
        self.max_lag_regression_s = max_lag_regression_s
        self.settle_s = settle_s
        self.app_writes_per_s = app_writes_per_s
        self.write_timeout_s = write_timeout_s
        self.go = False
        self.dual = None
        self.rehearsal = None
        self.app_writer = None
        self.migration: dict[str, Any] | None = None
        self.noise_floor: dict[str, Any] | None = None  # the control run's comparison, if one ran

    # -- hooks of RunSession -------------------------------------------------------------------

    def make_scheduler(self, ctx):
        from migration.dual import DualState, DualWriteScheduler
        from schedulers.base import create, with_expected_timers

        # each side holds the whole population by the end: a backend that sizes itself learns it
        frm = with_expected_timers(self.cls.primary_cls.default_options, self.options["from"], self.expected_timers)
        to = with_expected_timers(self.cls.shadow_cls.default_options, self.options["to"], self.expected_timers)
        primary = create(self.cls.primary_cls.name, replace(ctx, schema=ctx.schema + PRIMARY_SUFFIX), **frm)
        shadow = create(self.cls.shadow_cls.name, replace(ctx, schema=ctx.schema + SHADOW_SUFFIX), **to)
        self.dual = DualState(decision_wait_s=self.tolerance_s)
        timeout = {} if self.write_timeout_s is None else {"write_timeout_s": self.write_timeout_s}
        dw = DualWriteScheduler(primary, shadow, self.dual, **timeout)
        dw.options = {"from": dict(getattr(primary, "options", {})), "to": dict(getattr(shadow, "options", {}))}
        return dw

    def _make_workers(self):
        return DualWorkers()

    async def prepare(self, scheduler, population, arm_start: float) -> np.ndarray:
        """Arm the 'existing' half in the old store alone, set the plan up (dual writing from the
        start when the plan says so). Returns the indices still to arm (through the dual writer)."""
        from migration import plan as plan_mod
        from migration.rehearsal import AppWriter, Rehearsal
        from schedulers.base import Timer

        w = self.w
        plan = plan_mod.schedule(self.steps, w.warmup_s + w.duration_s)
        settle = self.settle_s if self.settle_s is not None else 2 * scheduler.capabilities.max_lag_s + 2.0
        ids, tenants = population.ids, population.tenants
        lh_idx = np.flatnonzero(population.long_horizon)
        self.rehearsal = Rehearsal(
            scheduler, plan, arm_start, settle_s=settle, long_horizon=[ids[i] for i in lh_idx.tolist()], say=self.say
        )
        due = np.round(arm_start + population.first_fire_s, 6)
        existing = np.arange(0, len(population), 2)
        step = max(1, int(w.arm_batch))
        for lo in range(0, len(existing), step):
            idx = existing[lo : lo + step]
            timers = [Timer(ids[i], f, "poll", tenants[i]) for i, f in zip(idx.tolist(), due[idx].tolist())]
            self.processor.note_armed(idx, due[idx], time.time())
            await scheduler.arm(timers)  # before dual writing: the old store alone
        self.say(
            f"stores: {scheduler.primary.name} in schema {self.schema}{PRIMARY_SUFFIX}, {scheduler.shadow.name} "
            f"in schema {self.schema}{SHADOW_SUFFIX} (bench migrate reconcile --from {scheduler.primary.name} "
            f"--to {scheduler.shadow.name} --schema {self.schema}); {len(existing):,} timers armed in "
            f"{scheduler.primary.name} alone, {len(lh_idx):,} long-horizon in all"
        )
        self.say(f"plan: {plan_mod.describe(plan)}; store checks confirmed over {settle:g} s")
        await self.rehearsal.apply_immediate()
        index = population.index()
        lh_timers = [Timer(ids[i], float(due[i]), "poll", tenants[i]) for i in lh_idx.tolist()]

        def noted(timers, now: float) -> None:
            idx = np.fromiter((index[t.id] for t in timers), np.int64, len(timers))
            self.processor.note_armed(idx, np.asarray([t.fire_at for t in timers]), now)

        self.app_writer = AppWriter(
            scheduler,
            lh_timers,
            self.app_writes_per_s,
            seed=w.seed,
            min_days=w.long_horizon_min_days,
            max_days=w.long_horizon_max_days,
            on_armed=noted,
        )
        return np.arange(1, len(population), 2)

    def background(self, scheduler, stop: asyncio.Event) -> list:
        return [self.rehearsal.walk(stop), self.app_writer.run(stop)]

    def status_extra(self) -> str:
        from migration.dual import PRIMARY, SHADOW

        if self.dual is None or self.rehearsal is None:
            return ""
        names = {PRIMARY: self.cls.primary_cls.name, SHADOW: self.cls.shadow_cls.name}
        queued = {s: len(self.rehearsal.dw.outbox[s].pending) for s in (PRIMARY, SHADOW)}
        extra = f"  | {names[self.dual.executor(time.time())]} executes"
        if any(queued.values()):
            extra += "; queued writes " + ", ".join(f"{names[s]} {n:,}" for s, n in queued.items() if n)
        return extra

    async def before_stop(self, scheduler) -> None:
        try:
            await self.rehearsal.finish()
        except Exception as exc:  # reported by the verdict, never a crash of the run
            self.rehearsal.final_reconcile = {"error": f"{type(exc).__name__}: {exc}"}

    async def after_run(self, scheduler, summary: dict[str, Any]) -> None:
        from metrics import rundir
        from migration.dual import PRIMARY, SHADOW
        from migration.resources import side_resources

        reh = self.rehearsal
        await reh.cancel()  # a check still waiting (the run ended early) is not awaited
        faults = [
            (span["start"], span.get("end") or span["start"])
            for span in (self.faults.spans if self.faults is not None else [])
            if span.get("fired") and span.get("start") is not None
        ]
        result = reh.judge(
            tolerance_s=self.tolerance_s,
            ended_at=self.window["measure_end"],
            max_extra_ratio=self.max_extra_ratio,
            max_lag_p99_s=self.max_lag_p99_s,
            max_lag_regression_s=self.max_lag_regression_s,
            lag_from=self.window["measure_start"],
            faults=faults,
        )
        if self.incomplete_reason:  # a rehearsal cut short proves nothing about the move
            result.verdict.reasons.insert(0, f"the rehearsal did not complete: {self.incomplete_reason}")
            result.verdict.go = False
        origin = reh.origin
        c = result.comparison
        lag = result.lag
        migration = {
            "verdict": result.verdict.word,
            "from": scheduler.primary.name,
            "to": scheduler.shadow.name,
            "tolerance_s": self.tolerance_s,
            "switch_at_s": None if self.dual.switch_at is None else self.dual.switch_at - origin,
            "origin": origin,
            "reasons": result.verdict.reasons,
            "slo": result.verdict.checks,
            "lag": lag,
            "plan": [{"step": r.kind, "text": r.text, "at_s": r.planned_s} for r in reh.records],
            "steps": [_step_dict(r) for r in result.steps],
            "windows_s": [[a - origin, b - origin] for a, b in result.windows],
            "switches_s": [
                [t - origin, {PRIMARY: scheduler.primary.name, SHADOW: scheduler.shadow.name}[s]]
                for t, s in result.switches
            ],
            "counts": {
                "matched": c.matched,
                "missing_in_shadow": c.missing_in_shadow,
                "extra_in_shadow": c.extra_in_shadow,
                "duplicates_primary": c.duplicates_primary,
                "duplicates_shadow": c.duplicates_shadow,
                "duplicate_effects": result.duplicate_effects,
                "lost": result.lost,
                "executed_by_both": result.double_executed,
                "backfilled": result.backfilled,
                "undecided": result.undecided,
                "parked": self.dual.parks,
                "parks_followed": self.dual.followed,
                "executed_by_primary": result.executed_by.get(PRIMARY, 0),
                "executed_by_shadow": result.executed_by.get(SHADOW, 0),
                "long_horizon_timers": len(reh.long_horizon),
            },
            "lag_ms": {"primary": lag["primary"], "shadow": lag["shadow"]},
            "lag_diff_ms": c.lag_diff_ms,
            "divergence": result.divergence,
            "reconcile": result.reconcile,
            "app_writes": self.app_writer.report() if self.app_writer is not None else None,
            "samples": {**c.samples, "lost": result.lost_samples},
            "schemas": {"from": self.schema + PRIMARY_SUFFIX, "to": self.schema + SHADOW_SUFFIX},
            "resources": side_resources(self.run_dir, scheduler),
            "noise_floor": self.noise_floor,
        }
        rundir.write_json(self.run_dir / rundir.MIGRATION, migration)
        self.go = result.verdict.go
        self.migration = migration

    def print_summary(self, s: dict[str, Any]) -> None:
        super().print_summary(s)
        if self.migration:
            for line in verdict_lines(self.migration):
                self.console.print(line, highlight=False)


def _step_dict(r) -> dict[str, Any]:
    from dataclasses import asdict

    d = asdict(r)
    if isinstance(d.get("did"), dict):
        d["did"] = {k: v for k, v in d["did"].items() if k != "report"}  # the reconcile report is kept whole below
        if "report" in r.did:
            d["reconcile"] = r.did["report"]
    return d


def verdict_lines(m: dict[str, Any]) -> list[str]:
    """The verdict as printed (README "Rehearse a move" explains each line)."""
    c = m["counts"]
    lag = m["lag"]
    colour = "green" if m["verdict"] == "GO" else "red"
    out = [
        f"[bold {colour}]{m['verdict']}[/]: {m['from']} -> {m['to']}   plan: "
        + ", ".join(f"{p['step']}@{p['at_s']:g}s" for p in m["plan"])
    ]
    out.append(
        f"  fires      matched {c['matched']:,}  missing in shadow {c['missing_in_shadow']:,}  extra in shadow "
        f"{c['extra_in_shadow']:,}  lost {c['lost']:,}  executed by both {c['executed_by_both']:,}  "
        f"duplicate effects {c['duplicate_effects']:,}  (executed: {m['from']} {c['executed_by_primary']:,}, "
        f"{m['to']} {c['executed_by_shadow']:,})"
    )
    slo = m["slo"]
    p99, reg = slo["shadow_lag_p99"], slo["lag_regression_p99"]
    reg_limit = "no limit" if reg["limit"] is None else f"limit {fmt.lag(reg['limit'])}"
    origin = m.get("origin") or 0.0
    worst = lag.get("regression_period")
    out.append(
        f"  lag p99    {m['from']} {_store_lag(lag['primary'], origin)}, {m['to']} {_store_lag(lag['shadow'], origin)} "
        f"(limit {fmt.lag(p99['limit'])}, {p99['limit_from']}: {'ok' if p99['ok'] else 'EXCEEDED'}); "
        f"regression {_signed_lag(lag['regression_p99'])}"
        + ("" if worst is None else f" (period {worst + 1} below)")
        + f" ({reg_limit}: {'ok' if reg['ok'] else 'EXCEEDED'})"
    )
    for i, q in enumerate(lag.get("periods") or []):
        out.append(f"  lag {i + 1:<6} " + _period_line(q, m, origin))
    for f in lag.get("faults") or []:
        rec = ", ".join(
            f"{store} {'never late' if s is None else f'{s:.1f} s'}" for store, s in f["recovered_s"].items()
        )
        out.append(
            f"  fault      {f['start']:.1f}-{f['end']:.1f} s; back within the declared bound after it ended: "
            f"{rec}; lag figures leave out fires due {f['start']:.1f}-{f['excluded_until']:.1f} s"
        )
    wt = lag.get("worst_tenant")
    if wt:
        out.append(
            f"  tenant     worst of {lag['tenants']}: {wt['tenant']} p99 {fmt.lag(wt['primary_p99'])} -> "
            f"{fmt.lag(wt['shadow_p99'])} ({_signed_lag(wt['regression_p99'])}) over "
            f"{wt['fires_primary']:,}/{wt['fires_shadow']:,} fires"
        )
    for st in m["steps"]:
        out.append("  " + _step_line(st, m))
    lh = _long_horizon_line(m)
    if lh:
        out.append(lh)
    d = m["divergence"]
    if d["windows"]:
        for w in d["windows"]:
            end = "still open" if w["end_s"] is None else f"{w['end_s']:.1f} s ({w['length_s']:.1f} s)"
            out.append(
                f"  divergence {w['store']}: writes failing from {w['start_s']:.1f} s to {end}; "
                f"{w['failed_writes']:,} failed writes ({w['failed_timers']:,} timers), {w['replayed']:,} replayed, "
                f"{w['dropped']:,} dropped; first error: {w['first_error']}"
            )
    else:
        out.append(
            f"  divergence none: no write to either store failed ({d['record_store_failures']} refused by the "
            f"store of record)"
        )
    r = m.get("reconcile") or {}
    if "drift" in r:
        from migration.reconcile import summary_line

        out.append("  reconcile  " + summary_line(r))
    elif r:
        out.append(f"  reconcile  {r.get('skipped') or 'FAILED: ' + str(r.get('error'))}")
    for side in ("primary", "shadow"):
        res = (m.get("resources") or {}).get(side) or {}
        if res:
            out.append(
                f"  {side:<9}  {m['from'] if side == 'primary' else m['to']}: writes/fire "
                f"{_figure(res.get('writes_per_fire'))}, dead tuples peak {_figure(res.get('dead_peak'))} "
                f"(TOAST {_figure(res.get('toast_dead_peak'))})"
            )
    nf = m.get("noise_floor")
    if nf and nf.get("counts"):
        nc = nf["counts"]
        out.append(
            f"  noise      {m['from']} vs itself: missing {nc['missing_in_shadow']:,}, extra "
            f"{nc['extra_in_shadow']:,}, lag regression {_signed_lag((nf.get('lag') or {}).get('regression_p99'))}"
        )
    for reason in m["reasons"]:
        out.append(f"  - {reason}")
    return out


def _step_line(st: dict[str, Any], m: dict[str, Any]) -> str:
    started = "not run" if st["started_s"] is None else f"at {st['started_s']:.1f} s, took {st['took_s']:.1f} s"
    did = st.get("did") or {}
    what = []
    if st["kind"] == "backfill":
        what.append(f"copied {did.get('copied', 0):,} of {did.get('source_armed', 0):,}")
    elif st["kind"] in ("switch-execution", "rollback"):
        what.append(f"{did.get('executes')} executes fires due from {did.get('fires_due_from_s', 0):.1f} s")
        if "resync" in did:
            what.append(f"re-synced {did['resync']['copied']:,} into the old store")
    elif st["kind"] == "stop-old-writes":
        what.append(f"old store drained in {did.get('drained_before_stop_s', 0):.1f} s, stopped")
    elif st["kind"] == "reconcile" and "drift" in did:
        what.append(f"drift {did['drift']['total']:,}")
    f = st.get("fires") or {}
    fires = (
        (
            f"fires due {f.get('due', 0):,}: lost {f.get('lost', 0)}, by both {f.get('executed_by_both', 0)}, "
            f"dup effects {f.get('duplicate_effects', 0)}"
        )
        if f
        else ""
    )
    ok = "ok" if not st["problems"] else f"{len(st['problems'])} problem(s)"
    return f"step {st['kind']:<16} {started}; " + "; ".join(x for x in what + [fires] if x) + f"; checks {ok}"


def _long_horizon_line(m: dict[str, Any]) -> str | None:
    """Where the long-horizon timers were checked, per store: all at their fire time, or how many."""
    per_store: dict[str, list[str]] = {}
    total = None
    for st in m["steps"]:
        for c in ((st.get("checks") or {}).get("stores") or {}).values():
            lh = c.get("long_horizon")
            if lh:
                total = lh["of"]
                ok = lh["right"] == lh["of"]
                per_store.setdefault(c["store"], []).append(
                    st["kind"] if ok else f"{st['kind']} ({lh['right']:,} right)"
                )
    if not per_store:
        return None
    where = "; ".join(f"{store} after {', '.join(kinds)}" for store, kinds in per_store.items())
    return f"  horizon    {total:,} long-horizon timers checked at their fire time: {where}"


def _fires(d: dict, origin: float) -> str:
    """How many fires a figure covers and their due times."""
    if not d.get("fires") or d.get("due_from") is None:
        return "no fires judged"
    return f"{d['fires']:,} fires due {d['due_from'] - origin:.1f}-{d['due_to'] - origin:.1f} s"


def _store_lag(d: dict, origin: float) -> str:
    """A store's headline p99: executed (or, never having executed, observed), over which fires."""
    if not d.get("fires"):
        return f"{fmt.MISSING} (executed and observed no fires judged)"
    return f"{fmt.lag(d.get('p99'))} {d.get('role', '')} ({_fires(d, origin)})"


def _period_line(q: dict, m: dict, origin: float) -> str:
    """One period between switches: who executed, each store's p99 in its role, the regression
    and what it compares."""
    names = {"primary": m["from"], "shadow": m["to"]}
    ex, ob = q["executor"], "shadow" if q["executor"] == "primary" else "primary"
    lo = "start" if q["due_from"] is None else f"{q['due_from'] - origin:.1f} s"
    hi = "end" if q["due_to"] is None else f"{q['due_to'] - origin:.1f} s"
    e, o = q[ex], q[ob]
    text = f"fires due {lo} to {hi}: {names[ex]} executes p99 {fmt.lag(e.get('p99'))} ({e['fires']:,} fires judged)"
    text += (
        f", {names[ob]} observes p99 {fmt.lag(o.get('p99'))} ({o['fires']:,} fires)"
        if o.get("fires")
        else f", {names[ob]} observes no fires judged"
    )
    if ex == "primary" and not q.get("same_fires"):
        text += f"; regression {fmt.MISSING} (no fire judged in both stores)"
    elif ex == "primary":
        text += (
            f"; regression {_signed_lag(q['regression_p99'])} on the same {q['same_fires']:,} fires "
            f"({m['to']} observing {fmt.lag(q.get('shadow_p99_same_fires'))} - {m['from']} executing "
            f"{fmt.lag(q.get('primary_p99_same_fires'))})"
        )
    else:
        base = q.get("baseline") or {}
        text += (
            f"; regression {_signed_lag(q['regression_p99'])} against {m['from']}'s own p99 before the switch "
            f"{fmt.lag(base.get('p99'))} ({_fires(base, origin)})"
        )
    return text


def _signed_lag(v) -> str:
    if v is None:
        return fmt.MISSING
    return ("+" if v >= 0 else "-") + fmt.lag(abs(v))


def _figure(v) -> str:
    return fmt.fixed(v, "{:,.2f}") if v is None or v < 100 else fmt.fixed(v)
