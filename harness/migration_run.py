"""The migration rehearsal (``bench migrate dry-run``): moving timers from one scheduler to another.

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
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from harness.session import RunSession
from migration.resources import side_resources
from reports import fmt


def dry_run(primary_cls, shadow_cls, opts: dict[str, dict], workload, dsn, temporal_address, out: Path, keep: bool,
            argv: list[str], *, tolerance_s: float, switch_after_s: float | None, max_extra_ratio: float,
            control: bool, say) -> int:
    """The whole rehearsal (a control run first with ``control``); the exit code: 0 GO, 3 NO-GO
    (distinct from usage, 2, and a crash, 1, for scripts), else the failed run's own code."""
    noise_floor = None
    if control:
        say(f"control: {primary_cls.name} against itself first, to measure the noise floor")
        ctl = MigrationRun(primary_cls, primary_cls, {"from": opts["from"], "to": opts["from"]}, replace(workload), dsn,
                           temporal_address, out, keep, argv, tolerance_s=tolerance_s, switch_after_s=None,
                           max_extra_ratio=max_extra_ratio)
        code = asyncio.run(ctl.main())
        if code:
            return code
        m = getattr(ctl, "migration", None) or {}
        noise_floor = {"run_dir": str(ctl.run_dir), "verdict": m.get("verdict"), "counts": m.get("counts"),
                       "lag_diff_ms": m.get("lag_diff_ms")}
    runner = MigrationRun(primary_cls, shadow_cls, opts, workload, dsn, temporal_address, out, keep, argv,
                          tolerance_s=tolerance_s, switch_after_s=switch_after_s, max_extra_ratio=max_extra_ratio)
    runner.noise_floor = noise_floor
    code = asyncio.run(runner.main())
    if code:
        return code
    return 0 if runner.go else 3


class _DualClass:
    """Stands in for a scheduler class so :class:`Run` can drive the dual writer unchanged."""

    def __init__(self, primary_cls, shadow_cls) -> None:
        self.primary_cls = primary_cls
        self.shadow_cls = shadow_cls
        self.name = f"migrate-{primary_cls.name}-to-{shadow_cls.name}"
        self.needs_postgres = primary_cls.needs_postgres or shadow_cls.needs_postgres
        self.needs_temporal = primary_cls.needs_temporal or shadow_cls.needs_temporal
        self.default_options: dict[str, Any] = {}


class MigrationRun(RunSession):
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
        resources = side_resources(self.run_dir, scheduler)
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
        rundir.write_json(self.run_dir / rundir.MIGRATION, migration)
        self.go = result.verdict.go
        self.migration = migration

    def print_summary(self, s: dict[str, Any]) -> None:
        super().print_summary(s)
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
            f"  lag p99: primary {fmt.lag(lag['primary']['p99'])}, shadow {fmt.lag(lag['shadow']['p99'])}; "
            f"shadow - primary: p50 {fmt.lag(d.get('p50'))}, p99 {fmt.lag(d.get('p99'))}"
        )
        for side in ("primary", "shadow"):
            r = m["resources"].get(side) or {}
            if r:
                self.console.print(
                    f"  {side} ({m['from'] if side == 'primary' else m['to']}): writes/fire "
                    f"{_figure(r.get('writes_per_fire'))}, dead tuples peak {_figure(r.get('dead_peak'))} "
                    f"(TOAST {_figure(r.get('toast_dead_peak'))})"
                )
        nf = m.get("noise_floor")
        if nf and nf.get("counts"):
            nc = nf["counts"]
            self.console.print(
                f"  noise floor ({m['from']} vs itself): missing {nc['missing_in_shadow']:,}, extra "
                f"{nc['extra_in_shadow']:,}, lag difference p99 {fmt.lag((nf.get('lag_diff_ms') or {}).get('p99'))}"
            )
        for reason in m["reasons"]:
            self.console.print(f"  - {reason}")


def _figure(v) -> str:
    return fmt.fixed(v, "{:,.2f}") if v is None or v < 100 else fmt.fixed(v)
