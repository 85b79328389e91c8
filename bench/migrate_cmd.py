"""``bench migrate dry-run``: rehearse moving timers from one scheduler to another.

The rehearsal is a ``bench run`` whose scheduler is a :class:`~migration.dual.DualWriteScheduler`
(the primary ``--from`` in charge, the shadow ``--to`` observed), each side in its own schema:

1. half of the population is armed in the primary alone (the system as it is today);
2. **backfill** copies the primary's armed timers into the shadow, before dual writing starts;
3. **dual write**: the rest of the population is armed through both, and every re-arm the
   executing side decides is written to both stores;
4. **compare** continuously: every fire of either side is matched by (timer id, due time) within
   ``--tolerance``; the live line shows matched / missing / extra;
5. **switch reads** at ``--switch-at`` (optional): the shadow executes from then on and the old
   primary becomes the observed side;
6. the verdict: **GO** only if nothing is missing or lost, no effect is duplicated, extras are
   within ``--max-extra``, and the shadow's p99 lag stays within its declared bound.

The run directory is an ordinary one (``fires.parquet`` holds the executed fires) plus
``migration.json``: the comparison, the verdict with its reasons and example timer ids, and the
resource side, before vs after (dead tuples, writes per fire) from each side's own tables.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any

import click
import numpy as np

from bench.cli import resolve_servers, scheduler_options, stack_options
from bench.errors import UsageError
from bench.run_cmd import Run

SAMPLE_IDS = 10


@click.group("migrate")
def migrate() -> None:
    """Rehearse a migration between two schedulers."""


@migrate.command("dry-run")
@click.option("--from", "from_name", required=True, help="The scheduler in charge today (the primary).")
@click.option("--to", "to_name", required=True, help="The scheduler to move to (the shadow).")
@click.option("--workload", "workload_spec", default="smoke", show_default=True, help="A preset name or a YAML file.")
@click.option("--rate", default=None, help="Steady-state fire rate: 556/s, 33360/min or 556.")
@click.option("--triggers", default=None, help="Population size (the rate follows it).")
@click.option("--interval", default=None, help="Poll interval range, e.g. 60s..120s.")
@click.option("--duration", default=None, help="Measured window, e.g. 2m.")
@click.option("--warmup", default=None, help="Warm-up before the measured window.")
@click.option("--seed", default=None, help="Random seed.")
@click.option("--tolerance", default="15s", show_default=True, help="Due times within this match.")
@click.option("--switch-at", default=None, help="Switch reads this long after the start (e.g. 30s).")
@click.option("--max-extra", default=0.001, show_default=True, type=float,
              help="Extra shadow fires allowed, as a share of matched fires.")
@click.option("--opt-from", "opts_from", multiple=True, help="Primary scheduler option key=value.")
@click.option("--opt-to", "opts_to", multiple=True, help="Shadow scheduler option key=value.")
@click.option("--control", is_flag=True,
              help="First rehearse --from against itself (separate stores) to measure the noise floor.")
@click.option("--keep", is_flag=True, help="Keep both schemas.")
@click.option("--out", default="runs", show_default=True, help="Parent directory of run directories.")
@stack_options
def dry_run(from_name, to_name, workload_spec, rate, triggers, interval, duration, warmup, seed, tolerance,
            switch_at, max_extra, opts_from, opts_to, control, keep, out, dsn, temporal_address) -> None:
    """Dual-write rehearsal from one scheduler to another, with a GO / NO-GO verdict."""
    from loadgen import workload as wl
    from loadgen.rates import parse_duration
    from schedulers.base import UnknownScheduler, scheduler_class

    try:
        primary_cls = scheduler_class(from_name)
        shadow_cls = scheduler_class(to_name)
    except UnknownScheduler as exc:
        raise UsageError(str(exc)) from None
    try:
        w = wl.load(workload_spec)
        overrides = {"rate": rate, "triggers": triggers, "interval": interval, "duration": duration,
                     "warmup": warmup, "seed": seed}
        w = wl.Overrides(overrides).apply(w).resolved()
        tolerance_s = parse_duration(tolerance)
        switch_after_s = parse_duration(switch_at) if switch_at is not None else None
    except (ValueError, TypeError) as exc:
        raise UsageError(str(exc)) from None
    if switch_after_s is not None and not (0 < switch_after_s < w.warmup_s + w.duration_s):
        raise UsageError(
            f"--switch-at {switch_at} is outside the run (0 .. {w.warmup_s + w.duration_s:g} s); pick a time inside it"
        )
    opts = {"from": scheduler_options(primary_cls, opts_from), "to": scheduler_options(shadow_cls, opts_to)}

    resolved_dsn, address = resolve_servers([primary_cls, shadow_cls], dsn, temporal_address)

    noise_floor = None
    if control:
        from dataclasses import replace

        click.echo(f"control: {from_name} against itself first, to measure the noise floor")
        ctl = MigrationRun(
            primary_cls, primary_cls, {"from": opts["from"], "to": opts["from"]}, replace(w), resolved_dsn, address,
            Path(out), keep, list(sys.argv), tolerance_s=tolerance_s, switch_after_s=None, max_extra_ratio=max_extra,
        )
        code = asyncio.run(ctl.main())
        if code:
            sys.exit(code)
        m = getattr(ctl, "migration", None) or {}
        noise_floor = {"run_dir": str(ctl.run_dir), "verdict": m.get("verdict"), "counts": m.get("counts"),
                       "lag_diff_ms": m.get("lag_diff_ms")}
    runner = MigrationRun(
        primary_cls, shadow_cls, opts, w, resolved_dsn, address, Path(out), keep, list(sys.argv),
        tolerance_s=tolerance_s, switch_after_s=switch_after_s, max_extra_ratio=max_extra,
    )
    runner.noise_floor = noise_floor
    code = asyncio.run(runner.main())
    if code:
        sys.exit(code)
    if not runner.go:
        sys.exit(3)  # NO-GO: distinct from usage (2) and crash (1) for scripts


class _DualClass:
    """Stands in for a scheduler class so :class:`Run` can drive the dual writer unchanged."""

    def __init__(self, primary_cls, shadow_cls) -> None:
        self.primary_cls = primary_cls
        self.shadow_cls = shadow_cls
        self.name = f"migrate-{primary_cls.name}-to-{shadow_cls.name}"
        self.needs_postgres = primary_cls.needs_postgres or shadow_cls.needs_postgres
        self.needs_temporal = primary_cls.needs_temporal or shadow_cls.needs_temporal
        self.default_options: dict[str, Any] = {}


class MigrationRun(Run):
    def __init__(self, primary_cls, shadow_cls, opts, workload, dsn, temporal_address, out, keep, argv, *,
                 tolerance_s: float, switch_after_s: float | None, max_extra_ratio: float) -> None:
        super().__init__(_DualClass(primary_cls, shadow_cls), opts, workload, dsn, temporal_address, out, keep, argv)
        self.tolerance_s = tolerance_s
        self.switch_after_s = switch_after_s
        self.max_extra_ratio = max_extra_ratio
        self.go = False
        self.dual = None
        self.backfilled = 0
        self.noise_floor: dict[str, Any] | None = None  # the control run's comparison, if one ran

    # -- hooks of Run --------------------------------------------------------------------

    def make_scheduler(self, ctx):
        from dataclasses import replace

        from migration.dual import DualState, DualWriteScheduler
        from schedulers.base import create

        primary = create(self.cls.primary_cls.name, replace(ctx, schema=f"{ctx.schema}_p"), **self.options["from"])
        shadow = create(self.cls.shadow_cls.name, replace(ctx, schema=f"{ctx.schema}_s"), **self.options["to"])
        self.dual = DualState(decision_wait_s=self.tolerance_s)
        dw = DualWriteScheduler(primary, shadow, self.dual)
        dw.options = {"from": dict(getattr(primary, "options", {})), "to": dict(getattr(shadow, "options", {}))}
        return dw

    async def prepare(self, scheduler, population, arm_start: float) -> np.ndarray:
        """Arm the 'existing' half in the primary alone, then backfill the shadow from it.
        Returns the indices still to arm (through the dual writer)."""
        from schedulers.base import Timer

        due = np.round(arm_start + population.first_fire_s, 6)
        existing = np.arange(0, len(population), 2)
        ids, tenants = population.ids, population.tenants
        step = max(1, int(self.w.arm_batch))
        for lo in range(0, len(existing), step):
            idx = existing[lo:lo + step]
            timers = [Timer(ids[i], f, "poll", tenants[i]) for i, f in zip(idx.tolist(), due[idx].tolist())]
            self.processor.note_armed(idx, due[idx], time.time())
            await scheduler.primary.arm(timers)
        self.backfilled = await scheduler.backfill()
        self.console.print(f"backfill: copied {self.backfilled:,} armed timers from {scheduler.primary.name} "
                           f"into {scheduler.shadow.name}; dual writing from now")
        if self.switch_after_s is not None:
            self.dual.switch_at = arm_start + self.switch_after_s
        return np.arange(1, len(population), 2)

    def status_extra(self) -> str:
        from migration.compare import compare
        from migration.dual import PRIMARY, SHADOW

        if self.dual is None:
            return ""
        now = time.time()
        c = compare(self.dual.fires[PRIMARY], self.dual.fires[SHADOW], self.tolerance_s,
                    judged_until=now - self.tolerance_s - 2.0)
        executor = self.dual.executor(now)
        return (f"  | {executor} executes what is due now; matched {c.matched:,} missing {c.missing_in_shadow:,} "
                f"extra {c.extra_in_shadow:,}")

    async def after_run(self, scheduler, summary: dict[str, Any]) -> None:
        from metrics import rundir
        from migration.rehearsal import judge

        result = judge(
            scheduler, self.dual, self.tolerance_s, self.max_extra_ratio,
            started_at=self.window["measure_start"] - self.w.warmup_s, ended_at=self.window["measure_end"],
            backfilled=self.backfilled,
        )
        resources = _resources(self.run_dir, scheduler)
        migration = {
            "verdict": result.verdict.word,
            "from": scheduler.primary.name,
            "to": scheduler.shadow.name,
            "tolerance_s": self.tolerance_s,
            "switch_at_s": self.switch_after_s,
            "reasons": result.verdict.reasons,
            "counts": {
                "matched": result.comparison.matched,
                "missing_in_shadow": result.comparison.missing_in_shadow,
                "extra_in_shadow": result.comparison.extra_in_shadow,
                "duplicates_primary": result.comparison.duplicates_primary,
                "duplicates_shadow": result.comparison.duplicates_shadow,
                "duplicate_effects": result.duplicate_effects,
                "lost": result.lost,
                "backfilled": result.backfilled,
                "undecided": result.undecided,
                "executed_by_primary": result.executed_by.get("primary", 0),
                "executed_by_shadow": result.executed_by.get("shadow", 0),
            },
            "lag_ms": result.lag_ms,
            "lag_diff_ms": result.comparison.lag_diff_ms,
            "samples": {**result.comparison.samples, "lost": result.lost_samples},
            "resources": resources,
            "noise_floor": self.noise_floor,
        }
        rundir.write_json(self.run_dir / "migration.json", migration)
        self.go = result.verdict.go
        self.migration = migration

    def _print_summary(self, s: dict[str, Any]) -> None:
        super()._print_summary(s)
        if getattr(self, "migration", None):
            self._print_verdict(self.migration)

    def _print_verdict(self, m: dict[str, Any]) -> None:
        c = m["counts"]
        colour = "green" if m["verdict"] == "GO" else "red"
        self.console.print(f"[bold {colour}]{m['verdict']}[/]: {m['from']} -> {m['to']}")
        self.console.print(
            f"  matched {c['matched']:,}  missing in shadow {c['missing_in_shadow']:,}  extra in shadow "
            f"{c['extra_in_shadow']:,}  duplicates {c['duplicates_primary']:,}/{c['duplicates_shadow']:,}  "
            f"duplicate effects {c['duplicate_effects']:,}  lost {c['lost']:,}  backfilled {c['backfilled']:,}"
        )
        lag = m["lag_ms"]
        d = m["lag_diff_ms"]
        self.console.print(
            f"  lag p99: primary {_ms(lag['primary']['p99'])}, shadow {_ms(lag['shadow']['p99'])}; "
            f"shadow - primary: p50 {_ms(d.get('p50'))}, p99 {_ms(d.get('p99'))}"
        )
        for side in ("primary", "shadow"):
            r = m["resources"].get(side) or {}
            if r:
                self.console.print(
                    f"  {side} ({m['from'] if side == 'primary' else m['to']}): writes/fire "
                    f"{_fmt(r.get('writes_per_fire'))}, dead tuples peak {_fmt(r.get('dead_peak'))} "
                    f"(TOAST {_fmt(r.get('toast_dead_peak'))})"
                )
        nf = m.get("noise_floor")
        if nf and nf.get("counts"):
            nc = nf["counts"]
            self.console.print(
                f"  noise floor ({m['from']} vs itself): missing {nc['missing_in_shadow']:,}, extra "
                f"{nc['extra_in_shadow']:,}, lag difference p99 {_ms((nf.get('lag_diff_ms') or {}).get('p99'))}"
            )
        for reason in m["reasons"]:
            self.console.print(f"  - {reason}")


def _resources(run_dir: Path, scheduler) -> dict[str, Any]:
    """Per side, from the samples of its own relations: writes per fire, dead-tuple peaks.
    WAL is server-wide, so it cannot be split per side and is left out here."""
    from metrics import rundir
    from migration.dual import PRIMARY, SHADOW

    try:
        samples = rundir.read_samples(run_dir).to_pandas()
    except Exception:
        return {}
    out: dict[str, Any] = {}
    for side, sched in ((PRIMARY, scheduler.primary), (SHADOW, scheduler.shadow)):
        rels = set(sched.relations())
        if not rels:
            out[side] = {}
            continue
        fires = scheduler.dual.fires[side].count
        mine = samples[samples["scope"].str.replace(rundir.TOAST_SUFFIX, "", regex=False).isin(rels)]
        last = mine.sort_values("t").groupby(["scope", "metric"]).last()["value"]
        writes = sum(float(last.get((scope, m), 0.0)) for scope in mine["scope"].unique()
                     for m in ("n_tup_ins", "n_tup_upd", "n_tup_del"))
        dead = mine[mine["metric"] == "n_dead_tup"]
        heap = dead[~dead["scope"].str.endswith(rundir.TOAST_SUFFIX)].groupby("t")["value"].sum()
        toast = dead[dead["scope"].str.endswith(rundir.TOAST_SUFFIX)].groupby("t")["value"].sum()
        out[side] = {
            "scheduler": sched.name,
            "fires_seen": fires,
            "writes_per_fire": writes / fires if fires else None,
            "dead_peak": float(heap.max()) if len(heap) else None,
            "toast_dead_peak": float(toast.max()) if len(toast) else None,
        }
    return out


def _ms(v) -> str:
    return "-" if v is None else f"{v:,.0f} ms"


def _fmt(v) -> str:
    if v is None:
        return "-"
    return f"{v:,.2f}" if v < 100 else f"{v:,.0f}"
