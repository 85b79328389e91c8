"""The plan of a rehearsal: which steps of the move, in which order, at which times.

The online-migration order, each step a name (``--steps`` or a plan file):

``dual-write``
    every application write (arm or move) goes to the old store and the new one.
``backfill``
    copy what the old store holds and the new one lacks (writes made since dual writing began
    are already there and newer, so they are never overwritten).
``switch-execution``
    the new store executes every fire due from now on; the old one keeps observing.
``stop-old-writes``
    the old store stops: no more writes, its claim loop drains what it still executes and stops.
``rollback``
    execution goes back to the old store (resuming its writes and re-syncing it from the new one
    first when it had stopped), as a team would at the first sign of trouble.
``reconcile``
    compare the two stores' armed timers and repair drift (also run once at the end of every
    rehearsal).

``STEP@T`` fixes a step at T after the start of the run (``rollback@40s``). A step without a time
follows the one before it when it is ``dual-write`` or ``backfill`` (they are the set-up of the
move; the first step defaults to the start); any other untimed steps are spread evenly between
the timed steps around them (the end of the run counts as one).

A plan file (YAML) holds the same: ``steps: [dual-write, backfill, switch-execution@20s, ...]``,
where an item may also be a mapping ``{step: rollback, at: 40s}``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

Durations = Callable[[str], float]  # "30s" -> 30.0, raising ValueError (loadgen.rates.parse_duration)

DUAL_WRITE = "dual-write"
BACKFILL = "backfill"
SWITCH = "switch-execution"
STOP_OLD = "stop-old-writes"
ROLLBACK = "rollback"
RECONCILE = "reconcile"
KINDS = (DUAL_WRITE, BACKFILL, SWITCH, STOP_OLD, ROLLBACK, RECONCILE)
SETUP_KINDS = (DUAL_WRITE, BACKFILL)  # untimed, they follow the step before them

DEFAULT_STEPS = f"{DUAL_WRITE},{BACKFILL}"  # observe only: the shadow is compared, never executes


class PlanError(ValueError):
    """A plan that cannot be rehearsed: one line naming the step and what would be accepted."""


@dataclass(frozen=True)
class Step:
    kind: str
    at_s: float | None  # seconds after the run's start; None: placed by :func:`schedule`
    text: str  # as given


def parse_step(text: str, parse_duration: Durations) -> Step:
    raw = text.strip()
    kind, sep, at = raw.partition("@")
    kind = kind.strip()
    if kind not in KINDS:
        raise PlanError(f"unknown step {kind!r} in {raw!r}; steps are {', '.join(KINDS)} (each optionally @TIME)")
    at_s = None
    if sep:
        try:
            at_s = parse_duration(at.strip())
        except ValueError:
            raise PlanError(f"bad time in step {raw!r}; use e.g. {kind}@30s") from None
        if at_s < 0:
            raise PlanError(f"step {raw!r}: the time must not be negative")
    return Step(kind, at_s, raw)


def parse_steps(text: str, parse_duration: Durations) -> list[Step]:
    """``--steps dual-write,backfill,switch-execution@20s,...``"""
    items = [p for p in (x.strip() for x in text.split(",")) if p]
    if not items:
        raise PlanError(f"--steps {text!r} names no step; e.g. {DEFAULT_STEPS},{SWITCH}@30s")
    steps = [parse_step(p, parse_duration) for p in items]
    validate(steps)
    return steps


def load_plan(path: str | Path, parse_duration: Durations) -> list[Step]:
    """A plan file: ``steps:`` as a list of ``STEP[@T]`` strings or ``{step: ..., at: ...}``."""
    import yaml

    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text())
    except OSError as exc:
        raise PlanError(f"cannot read plan file {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise PlanError(f"plan file {path} is not valid YAML: {str(exc).splitlines()[0]}") from None
    items = data.get("steps") if isinstance(data, dict) else None
    if not isinstance(items, list) or not items:
        raise PlanError(
            f"plan file {path} needs a non-empty list under 'steps:', e.g. steps: [{DUAL_WRITE}, {BACKFILL}]"
        )
    steps = []
    for item in items:
        if isinstance(item, dict):
            kind, at = item.get("step"), item.get("at")
            if not isinstance(kind, str):
                raise PlanError(f"plan file {path}: item {item!r} needs 'step: NAME'")
            steps.append(parse_step(kind if at is None else f"{kind}@{at}", parse_duration))
        elif isinstance(item, str):
            steps.append(parse_step(item, parse_duration))
        else:
            raise PlanError(f"plan file {path}: item {item!r} is neither 'STEP[@TIME]' nor {{step: ..., at: ...}}")
    validate(steps)
    return steps


def validate(steps: list[Step]) -> None:
    """The move must make sense in this order: each rule names the step that breaks it."""
    written_new = backfilled = False
    executor_new = old_stopped = False
    for s in steps:
        k = s.kind
        if k == DUAL_WRITE:
            if written_new:
                raise PlanError(f"step {s.text!r}: dual writing has already started")
            written_new = True
        elif k == BACKFILL:
            if not written_new:
                raise PlanError(
                    f"step {s.text!r}: backfill must come after {DUAL_WRITE} (a backfill before dual "
                    f"writing starts misses every write made in between)"
                )
            if backfilled:
                raise PlanError(f"step {s.text!r}: the plan already backfills")
            backfilled = True
        elif k == SWITCH:
            if not backfilled:
                raise PlanError(
                    f"step {s.text!r}: execution can switch only after {DUAL_WRITE} and {BACKFILL} "
                    f"(the new store would lack the timers armed before)"
                )
            if executor_new:
                raise PlanError(f"step {s.text!r}: the new store already executes")
            executor_new = True
        elif k == STOP_OLD:
            if not executor_new:
                raise PlanError(
                    f"step {s.text!r}: the old store can stop only while the new one executes (after {SWITCH})"
                )
            if old_stopped:
                raise PlanError(f"step {s.text!r}: the old store has already stopped")
            old_stopped = True
        elif k == ROLLBACK:
            if not executor_new:
                raise PlanError(f"step {s.text!r}: nothing to roll back; {ROLLBACK} comes after {SWITCH}")
            executor_new = old_stopped = False
        elif k == RECONCILE:
            if not backfilled:
                raise PlanError(f"step {s.text!r}: reconcile compares the stores after {BACKFILL}")
    timed = [s for s in steps if s.at_s is not None]
    for a, b in zip(timed, timed[1:]):
        if b.at_s < a.at_s:
            raise PlanError(f"steps must be in time order: {b.text!r} comes after {a.text!r}")


def schedule(steps: list[Step], run_s: float) -> list[tuple[Step, float]]:
    """Each step with the time it starts at, in seconds after the run's start (see the module
    docstring for untimed steps). Raises PlanError when a step falls outside the run."""
    times: list[float | None] = [s.at_s for s in steps]
    for i, s in enumerate(steps):  # set-up steps follow the step before them
        if times[i] is None and s.kind in SETUP_KINDS:
            times[i] = times[i - 1] if i and times[i - 1] is not None else (0.0 if i == 0 else None)
    if times and times[0] is None:
        times[0] = 0.0
    i = 0
    while i < len(times):
        if times[i] is not None:
            i += 1
            continue
        j = i
        while j < len(times) and times[j] is None:
            j += 1
        lo = times[i - 1]
        hi = times[j] if j < len(times) else run_s
        gap = j - i
        for k in range(gap):
            times[i + k] = lo + (hi - lo) * (k + 1) / (gap + 1)
        i = j
    out = []
    for s, t in zip(steps, times):
        if t >= run_s:
            raise PlanError(
                f"step {s.text!r} at {t:g} s falls outside the run (0 .. {run_s:g} s); "
                f"lengthen --duration or move the step"
            )
        out.append((s, float(t)))
    return out


def describe(plan: list[tuple[Step, float]]) -> str:
    return ", ".join(f"{s.kind}@{t:g}s" for s, t in plan)
