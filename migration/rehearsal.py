"""One rehearsal of a move: walk the plan's steps over a running dual writer, check the stores
after each, reconcile at the end, and give the verdict.

:class:`Rehearsal` is the engine, shared by ``bench migrate dry-run`` (:mod:`harness.migration_run`,
which adds the workload, the polling processor, faults, live status and a run directory) and by
:func:`rehearse` (any two schedulers in this process, for tests).

After each step the stores are checked against the invariants of a move (:meth:`Rehearsal.check`):

* every timer the application armed is armed in the store that executes (and in every store that
  should hold everything: the new one from its backfill on, the old one until it stops);
* nothing is armed only in a store that does not execute;
* every long-horizon timer (30-60 days out: it never fires during a rehearsal, so nothing but the
  move itself keeps it right) is in those stores at the fire time the application last gave it.

A store read while both run is never quite equal to the other (a fire in flight, a shard's
hand-off), so a violation counts only when a second read ``settle_s`` later shows it again. The
fire-level invariant (every due fire executed exactly once, as the application's keyed effect
ledger sees it) is counted per step from the shared ledger at the end (:meth:`Rehearsal.judge`),
when every fire due in a step's period has had its grace to arrive.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from migration import plan as plan_mod
from migration.compare import Comparison, Verdict, compare, in_windows, lag_comparison, verdict
from migration.dual import MATCH_S, PRIMARY, SHADOW, DualState, DualWriteScheduler, other
from migration.reconcile import reconcile
from schedulers.base import Processor, Scheduler, Timer

SWITCH_MARGIN_S = 0.5  # a switch moves fires due from this long after it is made (none can be in flight)
CHECK_SAMPLES = 5
DAY_S = 86400.0


@dataclass
class StepRecord:
    kind: str
    text: str
    planned_s: float  # offset from the run's start
    started_s: float | None = None
    took_s: float | None = None
    did: dict[str, Any] = field(default_factory=dict)
    checks: dict[str, Any] | None = None
    problems: list[str] = field(default_factory=list)
    error: str | None = None
    fires: dict[str, int] | None = None  # fires due in this step's period (see Rehearsal.judge)


@dataclass
class RehearsalResult:
    comparison: Comparison
    verdict: Verdict
    lag: dict[str, Any]
    backfilled: int
    duplicate_effects: int
    lost: int
    lost_samples: list[str]
    double_executed: int
    undecided: int
    skipped_already_done: int
    switches: list[tuple[float, str]]
    windows: list[tuple[float, float]]
    steps: list[StepRecord]
    divergence: dict[str, Any]
    reconcile: dict[str, Any] | None
    started_at: float
    ended_at: float
    executed_by: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["verdict"] = {
            "word": self.verdict.word,
            "go": self.verdict.go,
            "reasons": self.verdict.reasons,
            "checks": self.verdict.checks,
        }
        return d


class Rehearsal:
    """Walks a plan (steps at offsets from ``origin``) over ``dw`` while its loops run."""

    def __init__(
        self,
        dw: DualWriteScheduler,
        plan: list[tuple[plan_mod.Step, float]],
        origin: float,
        *,
        settle_s: float,
        long_horizon: Sequence[str] = (),
        say: Callable[[str], None] | None = None,
    ) -> None:
        self.dw = dw
        self.dual = dw.dual
        self.plan = plan
        self.origin = origin
        self.settle_s = settle_s
        self.long_horizon = list(long_horizon)
        self.say = say or (lambda _m: None)
        self.records = [StepRecord(s.kind, s.text, at) for s, at in plan]
        self.executor = PRIMARY  # the store executing fires due from now on
        self.synced: set[str] = {PRIMARY}  # stores that should hold every timer
        self.windows: list[list[float | None]] = []  # judged windows [start, end or None]
        self.backfilled = 0
        self.final_reconcile: dict[str, Any] | None = None
        self.grace_s = dw.capabilities.max_lag_s + 2.0  # a fire due this long ago has reached both stores
        self._next = 0  # index of the next step to run
        self._in_step = False
        self._checks: list[asyncio.Task] = []

    def names(self) -> dict[str, str]:
        return {PRIMARY: self.dw.primary.name, SHADOW: self.dw.shadow.name}

    # -- walking the plan ------------------------------------------------------------------------

    async def apply_immediate(self) -> None:
        """Steps due at the very start that touch no store (dual writing), applied before the
        population is armed, so that its arms are already dual writes."""
        while self._next < len(self.plan):
            step, at = self.plan[self._next]
            if step.kind != plan_mod.DUAL_WRITE or at > 0:
                break
            rec = self.records[self._next]
            rec.started_s = time.time() - self.origin
            await self.dw.start_writes(SHADOW)
            rec.did = {"writes_to": self._written_names()}
            rec.took_s = 0.0
            self.say(f"step {step.kind} at {rec.started_s:.1f} s: writes go to {', '.join(rec.did['writes_to'])}")
            self._next += 1

    async def walk(self, stop: asyncio.Event) -> None:
        """Each remaining step at its time (late, if the one before ran over), until ``stop``."""
        for rec in self.records[: self._next]:  # applied before the loops ran: checked now
            self._checks.append(asyncio.create_task(self._check_into(rec)))
        while self._next < len(self.plan) and not stop.is_set():
            step, at = self.plan[self._next]
            rec = self.records[self._next]
            with contextlib.suppress(asyncio.TimeoutError, TimeoutError):
                await asyncio.wait_for(stop.wait(), max(0.0, self.origin + at - time.time()))
            if stop.is_set():
                break
            self._next += 1
            self._in_step = True
            try:
                await self.run_step(step, rec)
            finally:
                self._in_step = False

    async def run_step(self, step: plan_mod.Step, rec: StepRecord) -> None:
        started = time.time()
        rec.started_s = started - self.origin
        try:
            await getattr(self, "_" + step.kind.replace("-", "_"))(rec)
        except Exception as exc:
            rec.error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            rec.problems.append(f"step {step.text} failed: {rec.error}")
        rec.took_s = time.time() - started
        self.say(
            f"step {step.kind} at {rec.started_s:.1f} s took {rec.took_s:.1f} s: "
            + _describe(rec.did)
            + (f" FAILED: {rec.error}" if rec.error else "")
        )
        self._checks.append(asyncio.create_task(self._check_into(rec)))

    async def finish(self) -> None:
        """After the measured window, while the loops still run: wait for the step checks, then
        reconcile the two stores once more (the stores must agree at the end of a rehearsal)."""
        while self._in_step:  # a step that began inside the window finishes first
            await asyncio.sleep(0.1)
        if self._checks:
            await asyncio.gather(*self._checks, return_exceptions=True)
        target = other(self.executor)
        if target not in self.synced or not self.dw.loops[target].running:
            self.final_reconcile = {"skipped": f"the {self.names()[target]} store is stopped (no longer written)"}
            return
        self.say(f"reconcile: {self.names()[self.executor]} (executes) -> {self.names()[target]}")
        try:
            self.final_reconcile = await self._reconcile_now()
        except Exception as exc:
            self.final_reconcile = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"}

    async def cancel(self) -> None:
        for t in self._checks:
            t.cancel()
        await asyncio.gather(*self._checks, return_exceptions=True)

    # -- the steps --------------------------------------------------------------------------------

    def _written_names(self) -> list[str]:
        return [self.names()[s] for s in (PRIMARY, SHADOW) if s in self.dw.writes]

    async def _dual_write(self, rec: StepRecord) -> None:
        await self.dw.start_writes(SHADOW)
        rec.did = {"writes_to": self._written_names()}

    async def _backfill(self, rec: StepRecord) -> None:
        r = await self.dw.copy(PRIMARY, SHADOW)
        self.backfilled = r["copied"]
        self.synced.add(SHADOW)
        self.windows.append([time.time(), None])
        rec.did = {
            "copied": r["copied"],
            "already_equal": r["already_equal"],
            "catching_up": r["catching_up"],
            "skipped_written_since": r["skipped_written_since"],
            "source_armed": r["source_armed"],
            "read_s": round(r["read_s"], 3),
        }

    async def _switch_execution(self, rec: StepRecord) -> None:
        due_from = self.dual.switch(SHADOW, time.time() + SWITCH_MARGIN_S)
        self.executor = SHADOW
        rec.did = {"executes": self.names()[SHADOW], "fires_due_from_s": round(due_from - self.origin, 3)}

    async def _stop_old_writes(self, rec: StepRecord) -> None:
        # 1. the application stops writing the old store (the new one becomes the store of record)
        if self.dw.outbox[SHADOW].pending:
            rec.problems.append(
                f"stop-old-writes with {len(self.dw.outbox[SHADOW].pending):,} writes to "
                f"{self.names()[SHADOW]} still queued: the new store of record is behind"
            )
        dropped = await self.dw.stop_writes(PRIMARY)
        # 2. the old store executes what was due before the switch, then its loop stops
        switch_due = self.dual.switch_at or time.time()
        old_lag = self.dw.primary.capabilities.max_lag_s
        deadline = time.time() + 2 * old_lag + 5.0
        owed = self.dual.lost(switch_due)
        while owed and time.time() < deadline:
            await asyncio.sleep(0.2)
            owed = self.dual.lost(switch_due)
        drained = time.time()
        await self.dw.stop_loop(PRIMARY)
        self.synced.discard(PRIMARY)
        # fires due just before the stop may still have been on their way to the old store (it
        # observes them a lag later): judged only up to the slower store's grace before the stop
        self._close_window(time.time() - self.grace_s)
        rec.did = {
            "writes_to": self._written_names(),
            "dropped_queued_writes": dropped,
            "drained_before_stop_s": round(drained - (rec.started_s + self.origin), 3),
            "still_owed_by_old_store": len(owed),
            "old_loop": "stopped",
        }
        if owed:
            rec.problems.append(
                f"the old store ({self.names()[PRIMARY]}) stopped owing {len(owed)} fires due before "
                f"the switch, e.g. " + ", ".join(f"{t}@{d:.3f}" for t, d in owed[:CHECK_SAMPLES])
            )

    async def _rollback(self, rec: StepRecord) -> None:
        old = PRIMARY
        resync = None
        if not self.dw.loops[old].running:
            # it had stopped: writes first (so nothing new is missed), then a re-sync of every
            # timer it holds at another fire time (all it holds is stale: left to catch up fire
            # by fire, a stopped store buries the fires due now behind its backlog), then its loop.
            # No disarm: a timer one read of the new store misses may be in flight there, and
            # disarming it in the store about to execute would lose it; extras are the
            # reconcile's (confirmed over two reads)
            await self.dw.start_writes(old)
            resync = await self.dw.copy(SHADOW, old, rearm_lagging=True)
            self.dw.start_loop(old)
            self.synced.add(old)
        due_from = self.dual.switch(old, time.time() + SWITCH_MARGIN_S)
        self.executor = old
        if self.windows and self.windows[-1][1] is not None:
            self.windows.append([due_from, None])
        rec.did = {
            "executes": self.names()[old],
            "fires_due_from_s": round(due_from - self.origin, 3),
            "writes_to": self._written_names(),
        }
        if resync is not None:
            rec.did["resync"] = {
                k: resync[k] for k in ("copied", "already_equal", "catching_up", "skipped_written_since")
            }

    async def _reconcile(self, rec: StepRecord) -> None:
        target = other(self.executor)
        if target not in self.synced or not self.dw.loops[target].running:
            rec.did = {"skipped": f"the {self.names()[target]} store is stopped (no longer written)"}
            return
        r = await self._reconcile_now()
        rec.did = {"drift": r["drift"], "repaired": r["repaired"], "after_repair": r["after_repair"]}
        rec.did["report"] = r

    async def _reconcile_now(self) -> dict[str, Any]:
        source, target = self.executor, other(self.executor)

        async def repair_with(timers, extra, since):
            return await self.dw.repair(target, timers, extra, since)

        return await reconcile(
            self.dw.stores[source],
            self.dw.stores[target],
            settle_s=self.settle_s,
            repair=True,
            explains=self.dual.explains,
            repair_with=repair_with,
            say=self.say,
        )

    def _close_window(self, t: float) -> None:
        if self.windows and self.windows[-1][1] is None:
            self.windows[-1][1] = max(self.windows[-1][0], t)

    # -- checks after each step ----------------------------------------------------------------------

    async def _check_into(self, rec: StepRecord) -> None:
        try:
            rec.checks = await self.check()
        except Exception as exc:
            rec.checks = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"}
            rec.problems.append(f"after {rec.text}: the stores could not be read: {rec.checks['error']}")
            return
        names = self.names()
        for side, c in rec.checks["stores"].items():
            if c["missing"]:
                rec.problems.append(
                    f"after {rec.text}: {c['missing']:,} timers the application armed are not armed in "
                    f"{names[side]}{' (which executes)' if side == rec.checks['executor'] else ''}, e.g. "
                    + ", ".join(c["missing_samples"])
                )
            if c["only_here"]:
                rec.problems.append(
                    f"after {rec.text}: {c['only_here']:,} timers armed only in {names[side]}, which does not "
                    f"execute, e.g. " + ", ".join(c["only_here_samples"])
                )
            lh = c.get("long_horizon")
            if lh and lh["right"] < lh["of"]:
                rec.problems.append(
                    f"after {rec.text}: long-horizon timers {lh['right']:,} of {lh['of']:,} in {names[side]} at "
                    f"their fire time, e.g. wrong or missing " + ", ".join(lh["wrong_samples"])
                )

    async def _violations(self, executor: str, synced: set[str]) -> dict[str, dict[str, Any]]:
        """One read of both stores against the invariants: per store, the ids violating each."""
        stores = self.dw.stores
        reads = dict(
            zip((PRIMARY, SHADOW), await asyncio.gather(*(stores[s].export_armed() for s in (PRIMARY, SHADOW))))
        )
        ids = {s: {t.id: t.fire_at for t in reads[s]} for s in reads}
        expected = dict(self.dual.expected)
        out: dict[str, dict[str, Any]] = {}
        for side in (PRIMARY, SHADOW):
            have = ids[side]
            # each violation: id -> the store's fire time (None: not armed there)
            v: dict[str, Any] = {
                "armed": len(have),
                "missing": {},
                "only_here": {},
                "lh_wrong": {},
                "expected": expected,
            }
            if side in synced or side == executor:
                v["missing"] = {i: None for i in expected if i not in have}
                v["lh_wrong"] = {
                    i: have.get(i)
                    for i in self.long_horizon
                    if i in expected and (have.get(i) is None or abs(have[i] - expected[i]) >= MATCH_S)
                }
            if side != executor:
                v["only_here"] = {i: f for i, f in have.items() if i not in ids[executor]}
            out[side] = v
        return out

    async def check(self) -> dict[str, Any]:
        """The store invariants now, each violation confirmed by a second read ``settle_s`` later
        (against the roles the stores had at the first read: a later step may change them)."""
        executor, synced = self.executor, set(self.synced)
        first = await self._violations(executor, synced)
        confirmed = first
        if any(v[k] for v in first.values() for k in ("missing", "only_here", "lh_wrong")) and self.settle_s > 0:
            await asyncio.sleep(self.settle_s)
            second = await self._violations(executor, synced)
            # still there, and the store did not change it meanwhile (a write in flight during a
            # read, or a later step changing what a store should hold, is not a violation)
            confirmed = {
                s: {
                    **second[s],
                    **{
                        k: {i: f for i, f in second[s][k].items() if i in first[s][k] and _same(first[s][k][i], f)}
                        for k in ("missing", "only_here", "lh_wrong")
                    },
                }
                for s in second
            }
        stores: dict[str, Any] = {}
        for side, v in confirmed.items():
            c: dict[str, Any] = {
                "store": self.names()[side],
                "armed": v["armed"],
                "holds_everything": side in synced or side == executor,
                "missing": len(v["missing"]),
                "missing_samples": sorted(v["missing"])[:CHECK_SAMPLES],
                "only_here": len(v["only_here"]),
                "only_here_samples": sorted(v["only_here"])[:CHECK_SAMPLES],
            }
            if c["holds_everything"] and self.long_horizon:
                n = len([i for i in self.long_horizon if i in self.dual.expected])
                wrong = sorted(v["lh_wrong"])[:CHECK_SAMPLES]
                c["long_horizon"] = {
                    "of": n,
                    "right": n - len(v["lh_wrong"]),
                    "wrong_samples": [_vs(i, v["lh_wrong"][i], v["expected"].get(i)) for i in wrong],
                }
            stores[side] = c
        return {"executor": executor, "stores": stores}

    # -- the verdict -----------------------------------------------------------------------------------

    def judge(
        self,
        *,
        tolerance_s: float,
        ended_at: float,
        grace_s: float | None = None,
        max_extra_ratio: float = 0.001,
        max_lag_p99_s: float | None = None,
        max_lag_regression_s: float | None = None,
        lag_from: float | None = None,
        faults: Sequence[tuple[float, float]] = (),
    ) -> RehearsalResult:
        """Compare what both sides fired over the judged windows, count every fire's fate per
        step, and give the verdict. Fires due in the last ``grace_s`` (default: the slower
        side's declared max lag plus 2 s) are not judged; lag figures also leave out fires due
        before ``lag_from`` (the warm-up) and during each fault (start, end) and the recovery
        after it (:meth:`recoveries`)."""
        dw, dual = self.dw, self.dual
        primary, shadow = dw.primary, dw.shadow
        grace = (
            grace_s if grace_s is not None else max(primary.capabilities.max_lag_s, shadow.capabilities.max_lag_s) + 2.0
        )
        judged_until = ended_at - grace
        windows = [(a, b if b is not None else ended_at) for a, b in self.windows]
        comparison = compare(dual.fires[PRIMARY], dual.fires[SHADOW], tolerance_s, judged_until, windows)
        judged = in_windows(windows, judged_until)
        lag_from = lag_from if lag_from is not None else self.origin
        recoveries = self.recoveries(faults)
        lag_exclude = [(r["start"], r["excluded_until"]) for r in recoveries]

        def lag_judged(due: float, lag: float) -> bool:
            # a fault's window takes every fire due before its end that was still to come at its
            # start (fired = due + lag, near enough: a re-arm into the past is rare)
            return judged(due) and due >= lag_from and not any(a <= due + lag and due < b for a, b in lag_exclude)

        lag = lag_comparison(dual.fires[PRIMARY], dual.fires[SHADOW], lag_judged, list(dual.switches))
        lag["excluded_windows"] = [list(w) for w in lag_exclude]
        lag["faults"] = [
            {k: (v - self.origin if k != "recovered_s" and v is not None else v) for k, v in r.items()}
            for r in recoveries
        ]
        lost_keys = dual.lost(judged_until)
        lost_samples = [f"{t}@{d:.3f}" for t, d in lost_keys[:10]]
        self._count_fires(lost_keys, judged_until)
        divergence = self.divergence()
        more = [p for r in self.records for p in r.problems]
        more += [
            f"step {r.text} did not run (the run ended before its time)" for r in self.records if r.started_s is None
        ]
        more += self._reconcile_reasons(divergence)
        if max_lag_p99_s is None:
            limit_ms = shadow.capabilities.max_lag_s * 1000.0
            source = f"the declared bound of {shadow.name}, capabilities.max_lag_s"
        else:
            limit_ms = max_lag_p99_s * 1000.0
            source = "--max-lag-p99"
        v = verdict(
            comparison,
            duplicate_effects=dual.duplicate_effects(),
            lost=len(lost_keys),
            lag=lag,
            max_lag_p99_ms=limit_ms,
            max_lag_p99_source=source,
            max_lag_regression_ms=None if max_lag_regression_s is None else max_lag_regression_s * 1000.0,
            max_extra_ratio=max_extra_ratio,
            lost_samples=lost_samples,
            double_executed=len(dual.double_executed),
            more_reasons=more,
        )
        executed_by = {PRIMARY: 0, SHADOW: 0}
        for side in dual.executed.values():
            executed_by[side] += 1
        return RehearsalResult(
            comparison=comparison,
            verdict=v,
            lag=lag,
            backfilled=self.backfilled,
            duplicate_effects=dual.duplicate_effects(),
            lost=len(lost_keys),
            lost_samples=lost_samples,
            double_executed=len(dual.double_executed),
            undecided=dual.undecided,
            skipped_already_done=dual.skipped_already_done,
            switches=list(dual.switches),
            windows=windows,
            steps=self.records,
            divergence=divergence,
            reconcile=self.final_reconcile,
            started_at=self.origin,
            ended_at=ended_at,
            executed_by=executed_by,
        )

    def recoveries(self, faults: Sequence[tuple[float, float]], horizon_s: float = 120.0) -> list[dict[str, Any]]:
        """Per fault (start, end): when each store's fires were back within its declared bound
        (the last fire still to come at the fault's start, due up to ``horizon_s`` after its
        end, that came later than the bound), and the window the lag figures leave out: every
        fire still to come at the fault's start and due until the new store was back (at least
        the slower store's max lag plus 2 s past the fault's end). Only the new store's recovery
        extends the window: the faults of a rehearsal hit its side."""
        out = []
        for start, end in faults:
            late_until = end
            recovered: dict[str, float | None] = {}
            for side, store in self.dw.stores.items():
                bound = store.capabilities.max_lag_s
                last = None
                for items in self.dual.fires[side].by_id.values():
                    for due, lag in items:
                        if (
                            start <= due + lag
                            and due <= end + horizon_s
                            and lag > bound
                            and (last is None or due > last)
                        ):
                            last = due
                same = self.dw.primary.name == self.dw.shadow.name  # a control run: both the same design
                name = f"{store.name} ({'old' if side == PRIMARY else 'new'})" if same else store.name
                recovered[name] = None if last is None else max(0.0, last - end)
                if last is not None and side == SHADOW:
                    late_until = max(late_until, last)
            out.append(
                {
                    "start": start,
                    "end": end,
                    "recovered_s": recovered,
                    "excluded_until": max(end + self.grace_s, late_until + 0.001),
                }
            )
        return out

    def _count_fires(self, lost_keys: list[tuple[str, float]], judged_until: float) -> None:
        """Per step, the fires due from its start until the next step's (the last: until the
        judged end): executed, executed more than once by one store (re-delivery, at-least-once),
        by both stores, lost, and keyed effects delivered twice."""
        starts = [self.origin + (r.started_s if r.started_s is not None else r.planned_s) for r in self.records]
        bounds = list(zip(starts, starts[1:] + [judged_until]))
        dual = self.dual
        double = set(dual.double_executed)
        for rec, (a, b) in zip(self.records, bounds):
            keys = [k for k in dual.executions if a <= k[1] < b]
            rec.fires = {
                "due": len(keys) + sum(1 for _, d in lost_keys if a <= d < b),
                "executed_once": sum(1 for k in keys if dual.executions[k] == 1),
                "redelivered": sum(1 for k in keys if dual.executions[k] > 1),
                "executed_by_both": sum(1 for k in keys if k in double),
                "lost": sum(1 for _, d in lost_keys if a <= d < b),
                "duplicate_effects": sum(len(s) - 1 for k, s in dual.effects.items() if a <= k[1] < b and len(s) > 1),
            }

    def divergence(self) -> dict[str, Any]:
        """The divergence windows: from a store's first failed write until its queue drained."""
        names = self.names()
        windows = []
        for side in (PRIMARY, SHADOW):
            for w in self.dw.outbox[side].report():
                w = dict(w)
                w["store"] = names[side]
                w["start_s"] = w["start"] - self.origin
                w["end_s"] = None if w["end"] is None else w["end"] - self.origin
                w["length_s"] = None if w["end"] is None else w["end"] - w["start"]
                windows.append(w)
        return {
            "windows": windows,
            "failed_writes": sum(self.dw.outbox[s].failed_writes for s in (PRIMARY, SHADOW)),
            "replayed": sum(self.dw.outbox[s].replayed for s in (PRIMARY, SHADOW)),
            "record_store_failures": self.dw.record_failures,
            "design": "queued: failed writes to the store that is not the store of record go to a per-store outbox "
            "(latest timer per id) replayed with backoff; the application's write never waits for it",
        }

    def _reconcile_reasons(self, divergence: dict[str, Any]) -> list[str]:
        r = self.final_reconcile
        if r is None:
            return []
        if "error" in r:
            return [f"the final reconcile failed: {r['error']}"]
        if "skipped" in r:
            return []
        out = []
        after = r.get("after_repair")
        if after and after["total"]:
            out.append(
                f"the stores still differ after reconciliation: {after['total']:,} timers (missing "
                f"{after['missing']:,}, extra {after['extra']:,}, moved {after['moved']:,})"
            )
        d = r["drift"]
        if d["total"] and not divergence["windows"]:
            s = r["samples"]
            eg = (s["missing"] + s["extra"] + s["moved"])[:3]
            out.append(
                f"the stores drifted apart with no failed write to explain it: {d['total']:,} timers "
                f"(missing {d['missing']:,}, extra {d['extra']:,}, moved {d['moved']:,}), e.g. " + "; ".join(eg)
            )
        return out


def _same(a: float | None, b: float | None) -> bool:
    return (a is None and b is None) or (a is not None and b is not None and abs(a - b) < MATCH_S)


def _vs(timer_id: str, have: float | None, want: float | None) -> str:
    if have is None:
        return f"{timer_id} (not armed)"
    if want is None:
        return timer_id
    return f"{timer_id} (armed {have - want:+,.3f} s from the application's fire time)"


def _describe(did: Mapping[str, Any]) -> str:
    parts = []
    for k, v in did.items():
        if k == "report":
            continue
        parts.append(f"{k.replace('_', ' ')} {v if not isinstance(v, float) else round(v, 3)}")
    return "; ".join(parts) if parts else "done"


class AppWriter:
    """The application's own writes during a rehearsal: it moves long-horizon timers (a user
    reschedules a callback due in a month) at ``rate_per_s``, through the dual writer, so that a
    store outage meets real dual writes. A write the store of record refuses is the
    application's failed request: counted and tried again with the next tick."""

    def __init__(
        self,
        dw: DualWriteScheduler,
        timers: Sequence[Timer],
        rate_per_s: float,
        *,
        seed: int = 1,
        min_days: float = 30.0,
        max_days: float = 60.0,
        on_armed: Callable[[Sequence[Timer], float], None] | None = None,
    ) -> None:
        self.dw = dw
        self.timers = list(timers)
        self.rate_per_s = rate_per_s
        self.rng = random.Random(seed)
        self.min_days, self.max_days = min_days, max_days
        self.on_armed = on_armed
        self.writes = 0
        self.refused = 0
        self.last_error: str | None = None

    async def run(self, stop: asyncio.Event) -> None:
        if not self.timers or self.rate_per_s <= 0:
            return
        tick_s = max(0.05, min(1.0, 1.0 / self.rate_per_s))
        owed = 0.0
        retry: list[Timer] = []
        last = time.time()
        while not stop.is_set():
            with contextlib.suppress(asyncio.TimeoutError, TimeoutError):
                await asyncio.wait_for(stop.wait(), tick_s)
            now = time.time()
            owed += (now - last) * self.rate_per_s
            last = now
            n = int(owed)
            owed -= n
            batch = retry + [self._moved(self.rng.choice(self.timers), now) for _ in range(n)]
            if not batch:
                continue
            try:
                await self.dw.arm(batch)
            except Exception as exc:
                self.refused += 1
                self.last_error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                retry = [self._moved(t, time.time()) for t in batch[-500:]]
                continue
            retry = []
            self.writes += len(batch)
            if self.on_armed is not None:
                self.on_armed(batch, time.time())

    def _moved(self, t: Timer, now: float) -> Timer:
        fire_at = round(now + self.rng.uniform(self.min_days, self.max_days) * DAY_S, 6)
        return Timer(t.id, fire_at, t.type, t.tenant_id, t.priority)

    def report(self) -> dict[str, Any]:
        return {
            "rate_per_s": self.rate_per_s,
            "writes": self.writes,
            "refused_by_store_of_record": self.refused,
            "last_error": self.last_error,
        }


async def rehearse(
    primary: Scheduler,
    shadow: Scheduler,
    processors: Mapping[str, Processor],
    *,
    before_dual_write: Sequence[Timer] = (),
    during_dual_write: Sequence[Timer] = (),
    duration_s: float,
    steps: str = plan_mod.DEFAULT_STEPS,
    tolerance_s: float = 15.0,
    max_extra_ratio: float = 0.001,
    grace_s: float | None = None,
    settle_s: float | None = None,
    max_lag_p99_s: float | None = None,
    max_lag_regression_s: float | None = None,
    long_horizon: Sequence[str] = (),
    stop: asyncio.Event | None = None,
    parse_duration: plan_mod.Durations = float,
    app_writes: tuple[Sequence[Timer], float] | None = None,
) -> tuple[RehearsalResult, Rehearsal]:
    """A whole rehearsal of two schedulers in this process. ``before_dual_write`` timers are
    armed in the primary alone (the system as it is) and reach the shadow by the backfill;
    ``during_dual_write`` ones are armed through the dual writer once the walk has begun.
    Step times in ``steps`` are plain seconds unless ``parse_duration`` reads more.
    ``app_writes``: (timers, per second) the application moves 30-60 days out meanwhile."""
    dual = DualState(decision_wait_s=tolerance_s)
    dw = DualWriteScheduler(primary, shadow, dual)
    await dw.setup()
    for i in range(0, len(before_dual_write), 5000):
        await dw.arm(before_dual_write[i : i + 5000])
    origin = time.time()
    steps_ = plan_mod.parse_steps(steps, parse_duration)
    settle = settle_s if settle_s is not None else 2 * dw.capabilities.max_lag_s + 2.0
    reh = Rehearsal(dw, plan_mod.schedule(steps_, duration_s), origin, settle_s=settle, long_horizon=long_horizon)
    await reh.apply_immediate()
    stop = stop or asyncio.Event()
    loops_stop = asyncio.Event()
    runner = asyncio.create_task(dw.run(processors, loops_stop, worker_id="rehearsal"))
    walker = asyncio.create_task(reh.walk(stop))
    writer = None
    if app_writes is not None:
        writer = asyncio.create_task(AppWriter(dw, app_writes[0], app_writes[1]).run(stop))
    try:
        for i in range(0, len(during_dual_write), 5000):
            await dw.arm(during_dual_write[i : i + 5000])
        deadline = origin + duration_s
        while time.time() < deadline and not stop.is_set():
            if runner.done():
                runner.result()  # a side crashed: surface it
            await asyncio.sleep(min(0.5, max(0.0, deadline - time.time())))
        stop.set()
        await walker
        if writer is not None:
            await writer
        await reh.finish()
    finally:
        stop.set()
        walker.cancel()
        if writer is not None:
            writer.cancel()
        await reh.cancel()
        loops_stop.set()
        with contextlib.suppress(asyncio.CancelledError):
            try:
                await asyncio.wait_for(runner, timeout=60)
            except TimeoutError:
                runner.cancel()
    result = reh.judge(
        tolerance_s=tolerance_s,
        ended_at=origin + duration_s,
        grace_s=grace_s,
        max_extra_ratio=max_extra_ratio,
        max_lag_p99_s=max_lag_p99_s,
        max_lag_regression_s=max_lag_regression_s,
    )
    return result, reh
