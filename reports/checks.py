"""The checks a reader must not miss, per run, shown above everything else in a report
(complete, rate held, steady state, no lost fires, no duplicate keyed effects, the harness
ceiling, readable files), and the one-line warnings of a run."""

from __future__ import annotations

from dataclasses import dataclass

from reports import fmt
from reports.harness_ceiling import ceiling_check
from reports.load import Run
from reports.rows import RATE_HELD_FRACTION, complete_text, lost_total, offered_share, rate_share


@dataclass
class Check:
    name: str
    ok: bool | None  # None: cannot tell from this run
    detail: str


def run_checks(run: Run) -> list[Check]:
    s = run.summary
    checks = [Check("complete", bool(s.get("complete")), complete_text(run))]
    share, offered = rate_share(run), offered_share(run)
    held = s.get("rate_held")
    checks.append(
        Check(
            "rate held",
            held,
            "unknown"
            if share is None or offered is None
            else f"achieved {fmt.num(s['achieved_rate'])} of {fmt.num(s['offered_rate'])} fires/s offered "
            f"({share * 100:.1f}%), offered {offered * 100:.1f}% of the {fmt.num(s['target_rate'])} fires/s target "
            f"(held means both ≥ {RATE_HELD_FRACTION:.0%})",
        )
    )
    cycles = s.get("cycles_per_trigger")
    checks.append(
        Check(
            "steady state",
            s.get("steady_state"),
            "unknown"
            if cycles is None
            else f"{cycles:.2f} cycles per trigger in the window"
            + ("" if s.get("steady_state") else " (needs ≥ 2, a warm-up of one maximum interval, and the arm done)"),
        )
    )
    lost = lost_total(run)
    checks.append(
        Check(
            "no lost fires",
            None if lost is None else lost == 0,
            "unknown"
            if lost is None
            else f"lost: {lost:,} (pending at the end: {int((s.get('outcomes') or {}).get('pending') or 0):,})",
        )
    )
    v = s.get("duplicate_effects")
    checks.append(
        Check(
            "no duplicate keyed effects",
            None if v is None else v == 0,
            "unknown" if v is None else f"duplicate keyed effects: {int(v):,}",
        )
    )
    harness = ceiling_check(run)
    if harness is not None:
        checks.append(Check("harness ceiling", *harness))
    if run.problems:
        checks.append(Check("files readable", False, "; ".join(fmt.collapse(run.problems))))
    return checks


# A failed check whose warning the run already carries is not said twice.
CHECK_WARNING = {
    "complete": "incomplete run",
    "rate held": "rate not held",
    "steady state": "not steady state",
    "no lost fires": "fires lost",
    "no duplicate keyed effects": "duplicate keyed effects",
}


def warning_lines(run: Run, checks: list[Check]) -> list[str]:
    """What went wrong in one run, one short line per problem: its warnings, then the failed
    checks no warning already states, then the caveats of its cost figures (measurement notes)."""
    warnings = [str(w) for w in run.summary.get("warnings") or []]
    failed = [
        f"check failed: {c.name} — {c.detail}"
        for c in checks
        if c.ok is False and not any(CHECK_WARNING.get(c.name, "\0") in w for w in warnings)
    ]
    return fmt.collapse(warnings + failed) + [str(n) for n in run.summary.get("measurement_notes") or []]
