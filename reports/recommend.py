"""The recommendation: which design to pick for the workload the runs measured, and why. Every
sentence comes from the figures by the rules below; none is written in advance.

1. **The SLO.** A run meets it when it held its offered rate, lost nothing, and meets every
   threshold of ``--slo``. Without ``--slo``: lag p99 within **one** bound for every run of the
   report, the workload's on-time bound (``on_time_s``, 10 s unless the workload sets it: the lag
   past which every run already counts a fire late; the strictest when the runs' workloads
   differ), 0 lost, and, with two or more tenants, Jain's index at least :data:`DEFAULT_JAIN`.
   Each design's own declared bound (``capabilities.max_lag_s``) is shown beside its verdict as
   information; it never moves the bar, so "meets the SLO" means the same for every design.
2. **The cost.** Among the runs that meet it, the pick is the lowest cost per fire, measured by
   the first of :data:`COST_FIGURES` that **every** run has (bytes written across every store,
   else durable writes across stores, ...): a cost only some runs have would compare unlike bills.
3. **Why**: the pick's SLO figures and its cost against the runner-up's.
4. **What would change the answer**: a cheaper run that failed the SLO, and by how much; a
   dearer one that meets it with better lag or fairness; a cost gap within :data:`NOISE_SHARE`;
   a design option the workload never exercised (temporal_shards' ring growth).
5. **What was not measured**: figures a run could not record, one run per design, a window that
   was not steady state, Temporal's production store.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from reports.load import Run
from reports.tables import state_writes_sentence
from reports.thresholds import FIGURES, Threshold, fmt_figure, parse_thresholds, run_scorecard

DEFAULT_JAIN = 0.9  # an even share of on-time fires across tenants, within 10 %
NOISE_SHARE = 0.10  # a cost gap under 10 % is within one run's noise on a shared machine
COST_FIGURES = ["bytes_per_fire", "durable_writes_per_fire", "writes_per_fire", "wal_per_fire"]


@dataclass
class RunVerdict:
    run: Run
    meets: bool
    checks: list[tuple[str, str, bool]]  # (threshold, measured, met)
    cost: float | None = None


@dataclass
class Recommendation:
    choice: str | None
    headline: str
    why: list[str] = field(default_factory=list)
    would_change: list[str] = field(default_factory=list)
    not_measured: list[str] = field(default_factory=list)
    verdicts: list[RunVerdict] = field(default_factory=list)
    cost_figure: str | None = None  # its label
    cost_name: str | None = None  # its key in reports.thresholds.FIGURES
    slo_text: str = ""


def declared_bound_s(run: Run) -> float | None:
    """The design's own declared lag bound (``capabilities.max_lag_s``), information only."""
    caps = run.config.get("capabilities") or {}
    return None if caps.get("max_lag_s") is None else float(caps["max_lag_s"])


def on_time_bound_s(run: Run) -> float:
    """The lag past which the run counted a fire late (the workload's ``on_time_s``)."""
    return float(run.summary.get("on_time_s") or run.workload.get("on_time_s") or 10.0)


def shared_bound_s(runs: list[Run]) -> tuple[float, str]:
    """(the one lag bound every run of a report is judged by, why that one)."""
    bounds = sorted({on_time_bound_s(r) for r in runs}) or [10.0]
    why = "the workload's on-time bound, past which every run counts a fire late"
    if len(bounds) > 1:
        why += f"; the strictest of the runs' {', '.join(f'{b:g} s' for b in bounds)}"
    return bounds[0], why


def slo_for(run: Run, slo: list[Threshold] | None, bound_s: float | None = None) -> list[Threshold]:
    """The thresholds ``run`` must meet: ``slo``, else lag p99 within ``bound_s`` (default: the
    run's on-time bound), 0 lost and, with two or more tenants, Jain's index."""
    if slo:
        return [t for t in slo]
    text = f"lag_p99<={(on_time_bound_s(run) if bound_s is None else bound_s):g}s,lost=0"
    if run_scorecard(run).n_tenants >= 2:
        text += f",jain>={DEFAULT_JAIN:g}"
    return parse_thresholds(text, "--slo", allow_relative=False)


def judge(run: Run, slo: list[Threshold] | None, bound_s: float | None = None) -> RunVerdict:
    checks = []
    held = run.summary.get("rate_held")
    if held is False:
        checks.append(
            (
                "held the offered rate",
                f"{fmt_figure(FIGURES['achieved_rate'], run.summary.get('achieved_rate'))} fires/s "
                f"of {fmt_figure(FIGURES['achieved_rate'], run.summary.get('offered_rate'))} offered",
                False,
            )
        )
    if run.summary.get("complete") is False:
        checks.append(("a complete run", run.summary.get("incomplete_reason") or "stopped early", False))
    for th in slo_for(run, slo, bound_s):
        v = th.figure.get(run)
        ok = v is not None and not (isinstance(v, float) and math.isnan(v)) and th.crossed(float(v), th.value)
        checks.append((th.text, fmt_figure(th.figure, v), ok))
    return RunVerdict(run, all(ok for _, _, ok in checks), checks)


def _cost_figure(runs: list[Run]) -> str | None:
    for name in COST_FIGURES:
        if all(FIGURES[name].get(r) is not None for r in runs):
            return name
    return None


def recommend(runs: list[Run], slo_text: str | None = None) -> Recommendation:
    slo = parse_thresholds(slo_text, "--slo", allow_relative=False) if slo_text else None
    bound_s, why_bound = shared_bound_s(runs)
    slo_said = slo_text or (
        f"lag p99 within {bound_s:g} s for every design ({why_bound}), 0 lost, Jain's index >= {DEFAULT_JAIN:g} "
        "across tenants"
    )
    declared = [(r.label, declared_bound_s(r)) for r in runs]
    if any(d is not None for _, d in declared):
        slo_said += "; each design's own declared bound, for information: " + ", ".join(
            f"{label} {'unknown' if d is None else f'{d:g} s'}" for label, d in declared
        )
    if not runs:
        return Recommendation(None, "No runs to recommend from.", slo_text=slo_said)
    verdicts = [judge(r, slo, bound_s) for r in runs]
    cost_name = _cost_figure(runs)
    cost_fig = FIGURES[cost_name] if cost_name else None
    for v in verdicts:
        v.cost = cost_fig.get(v.run) if cost_fig else None
    rec = Recommendation(
        None,
        "",
        verdicts=verdicts,
        cost_figure=cost_fig.label if cost_fig else None,
        cost_name=cost_name,
        slo_text=slo_said,
    )
    rec.not_measured = _not_measured(runs, cost_name)
    policy = state_writes_sentence(runs)  # beside the cost figures it moves, whatever the outcome
    passing = sorted([v for v in verdicts if v.meets], key=lambda v: v.cost if v.cost is not None else math.inf)
    if len(runs) > 1 and len({r.scheduler for r in runs}) == 1:
        rec.headline = (
            f"All {len(runs)} runs are of one design, {runs[0].scheduler}: nothing to choose between; "
            "the table says which met the SLO."
        )
        return rec
    if len(runs) == 1:
        v = verdicts[0]
        rec.headline = (
            f"{v.run.label} {'meets' if v.meets else 'does not meet'} the SLO; one design was measured, "
            "so there is nothing to choose between."
        )
        rec.why = [_checks_sentence(v)]
        return rec
    if not passing:
        closest = min(verdicts, key=lambda v: sum(not ok for _, _, ok in v.checks))
        rec.headline = "No design met the SLO on this workload."
        rec.why = [
            f"{v.run.label}: " + "; ".join(f"{t} measured {m}" for t, m, ok in v.checks if not ok) for v in verdicts
        ] + ([policy] if policy else [])
        rec.would_change = [
            f"{closest.run.label} failed the fewest thresholds "
            f"({sum(not ok for _, _, ok in closest.checks)}): relaxing "
            + ", ".join(f"'{t}'" for t, _, ok in closest.checks if not ok)
            + " would make it the pick."
        ]
        return rec
    pick = passing[0]
    rec.choice = pick.run.label
    rec.headline = (
        f"Pick {pick.run.label}: it meets the SLO"
        + (
            f" at the lowest {cost_fig.label} ({fmt_figure(cost_fig, pick.cost)})"
            if cost_fig
            else " (no cost figure every run has, so the pick is by the SLO alone)"
        )
        + "."
    )
    rec.why.append(_checks_sentence(pick))
    if policy:
        rec.why.append(policy)
    if len(passing) > 1 and cost_fig and pick.cost is not None:
        second = passing[1]
        if second.cost is not None and pick.cost > 0:
            rec.why.append(
                f"The runner-up, {second.run.label}, also meets the SLO at {fmt_figure(cost_fig, second.cost)} "
                f"{cost_fig.label}: {second.cost / pick.cost:.2f}x the pick's."
            )
    failing = [v for v in verdicts if not v.meets]
    for v in failing:
        failed = "; ".join(f"'{t}' (measured {m})" for t, m, ok in v.checks if not ok)
        rec.why.append(f"{v.run.label} does not meet the SLO: {failed}.")
    rec.would_change = _would_change(pick, passing, failing, cost_fig)
    return rec


def _checks_sentence(v: RunVerdict) -> str:
    return f"{v.run.label}: " + ", ".join(f"{t} ({m}{'' if ok else ', not met'})" for t, m, ok in v.checks) + "."


def _would_change(pick: RunVerdict, passing: list[RunVerdict], failing: list[RunVerdict], cost_fig) -> list[str]:
    out = []
    for v in failing:
        if cost_fig and v.cost is not None and pick.cost is not None and v.cost < pick.cost:
            out.append(
                f"{v.run.label} is cheaper ({fmt_figure(cost_fig, v.cost)} against {fmt_figure(cost_fig, pick.cost)} "
                f"{cost_fig.label}) and would be the pick if the SLO did not ask for "
                + ", ".join(f"'{t}' (it measured {m})" for t, m, ok in v.checks if not ok)
                + "."
            )
    lag, jain = FIGURES["lag_p99"], FIGURES["jain"]
    for v in passing[1:]:
        better = []
        pl, vl = lag.get(pick.run), lag.get(v.run)
        if pl is not None and vl is not None and vl < pl:
            better.append(f"a lag p99 of {fmt_figure(lag, vl)} against {fmt_figure(lag, pl)}")
        pj, vj = jain.get(pick.run), jain.get(v.run)
        if pj is not None and vj is not None and vj > pj + 0.01:
            better.append(f"Jain's index {vj:.3f} against {pj:.3f}")
        if better:
            out.append(
                f"If you need lag or fairness tighter than the pick's, {v.run.label} also meets the SLO with "
                + " and ".join(better)
                + "."
            )
        if cost_fig and v.cost is not None and pick.cost and abs(v.cost - pick.cost) < NOISE_SHARE * pick.cost:
            out.append(
                f"{pick.run.label} and {v.run.label} cost within {100 * NOISE_SHARE:.0f}% of each other per fire: "
                "within one run's noise here; repeat the runs (several per design) before deciding on cost."
            )
    opts = pick.run.config.get("options") or {}
    if "timer_cap" in opts and "shards" in opts:
        triggers = pick.run.workload.get("triggers") or 0
        cap = float(opts["timer_cap"]) * float(opts["shards"]) * float(opts.get("grow_above", 0.8))
        if triggers and triggers < cap:
            out.append(
                f"At more than ~{cap:,.0f} triggers ({opts['shards']} shards x {opts['timer_cap']} timers x "
                f"{float(opts.get('grow_above', 0.8)):.0%}) {pick.run.label}'s controller grows the ring; "
                f"this workload had {triggers:,} and never exercised that."
            )
    return out


def _not_measured(runs: list[Run], cost_name: str | None) -> list[str]:
    out = []
    seen: dict[str, int] = {}
    for r in runs:
        seen[r.scheduler] = seen.get(r.scheduler, 0) + 1
        for key, why in sorted((r.summary.get("unavailable") or {}).items()):
            out.append(f"{r.label}: {key} not measured ({why}).")
        if r.summary.get("steady_state") is False:
            out.append(
                f"{r.label}: the window was not steady state "
                f"({r.summary.get('cycles_per_trigger') or 0:.1f} fire cycles per trigger); "
                "its figures lean on first fires."
            )
        for note in r.summary.get("measurement_notes") or []:
            out.append(f"{r.label}: {note}")
    if all(n == 1 for n in seen.values()):
        out.append("One run per design: no spread, so differences under ~10% may be noise.")
    if any(r.scheduler.startswith("temporal") for r in runs):
        out.append(
            "Temporal's store here is the dev server's SQLite; a production cluster (Cassandra, MySQL or "
            "Postgres persistence) costs differently per request."
        )
    if cost_name is None:
        out.append("No cost figure was recorded by every run, so cost did not decide.")
    elif cost_name in ("writes_per_fire", "wal_per_fire") and any(r.scheduler.startswith("temporal") for r in runs):
        out.append("The cost compared is Postgres-only: Temporal's own writes are not in it.")
    workloads = {str(r.summary.get("workload_name")) for r in runs}
    rates = {r.summary.get("target_rate") for r in runs}
    if len(workloads) > 1 or len(rates) > 1:
        out.append("The runs did not share one workload and rate: their figures compare unlike loads.")
    return out
