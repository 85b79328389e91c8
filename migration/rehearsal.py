"""One dual-write rehearsal: backfill, dual write, compare, optional switch, verdict.

:func:`rehearse` drives any two schedulers through the online-migration order and returns a
:class:`RehearsalResult`; the ``bench migrate dry-run`` command wraps it with a workload, the
polling processor, live status and a run directory.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import asdict, dataclass, field
from typing import Awaitable, Callable, Mapping, Sequence

import numpy as np

from migration.compare import Comparison, Verdict, compare, verdict
from migration.dual import PRIMARY, SHADOW, DualState, DualWriteScheduler
from schedulers.base import Processor, Scheduler, Timer


@dataclass
class RehearsalResult:
    comparison: Comparison
    verdict: Verdict
    backfilled: int
    duplicate_effects: int
    lost: int
    lost_samples: list[str]
    lag_ms: dict[str, dict[str, float | None]]  # side -> p50/p99/max
    undecided: int
    skipped_already_done: int
    switch_at: float | None
    started_at: float
    ended_at: float
    executed_by: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["verdict"] = {"word": self.verdict.word, "go": self.verdict.go, "reasons": self.verdict.reasons}
        return d


def _lag_summary(fires) -> dict[str, float | None]:
    lags = [lag for items in fires.by_id.values() for _, lag in items]
    if not lags:
        return {"p50": None, "p99": None, "max": None}
    arr = np.asarray(lags) * 1000.0
    return {"p50": float(np.percentile(arr, 50)), "p99": float(np.percentile(arr, 99)), "max": float(arr.max())}


async def rehearse(
    primary: Scheduler,
    shadow: Scheduler,
    processors: Mapping[str, Processor],
    *,
    before_dual_write: Sequence[Timer] = (),
    during_dual_write: Sequence[Timer] = (),
    duration_s: float,
    tolerance_s: float = 15.0,
    switch_after_s: float | None = None,
    max_extra_ratio: float = 0.001,
    grace_s: float | None = None,
    on_tick: Callable[[DualState, float], Awaitable[None] | None] | None = None,
    stop: asyncio.Event | None = None,
) -> RehearsalResult:
    """Run the rehearsal. ``before_dual_write`` timers are armed in the primary alone and reach
    the shadow by backfill; ``during_dual_write`` ones are armed through the dual writer."""
    dual = DualState(decision_wait_s=tolerance_s)
    dw = DualWriteScheduler(primary, shadow, dual)
    await dw.setup()
    for i in range(0, len(before_dual_write), 5000):
        await primary.arm(before_dual_write[i : i + 5000])
    backfilled = await dw.backfill()  # backfill before dual writing starts
    started = time.time()
    if switch_after_s is not None:
        dual.switch_at = started + switch_after_s
    stop = stop or asyncio.Event()
    runner = asyncio.create_task(dw.run(processors, stop, worker_id="rehearsal"))
    try:
        for i in range(0, len(during_dual_write), 5000):
            await dw.arm(during_dual_write[i : i + 5000])
        deadline = started + duration_s
        while time.time() < deadline and not stop.is_set():
            if runner.done():
                runner.result()  # a side crashed: surface it
            await asyncio.sleep(min(1.0, max(0.0, deadline - time.time())))
            if on_tick is not None:
                res = on_tick(dual, time.time() - started)
                if asyncio.iscoroutine(res):
                    await res
    finally:
        stop.set()
        with contextlib.suppress(asyncio.CancelledError):
            try:
                await asyncio.wait_for(runner, timeout=60)
            except TimeoutError:
                runner.cancel()
    return judge(dw, dual, tolerance_s, max_extra_ratio, started_at=started, ended_at=time.time(),
                 backfilled=backfilled, grace_s=grace_s)


def judge(
    dw: DualWriteScheduler,
    dual: DualState,
    tolerance_s: float,
    max_extra_ratio: float,
    *,
    started_at: float,
    ended_at: float,
    backfilled: int,
    grace_s: float | None = None,
) -> RehearsalResult:
    """Compare what both sides fired and give the verdict. Fires due in the last ``grace_s``
    (default: the slower side's declared max lag plus 2 s) are not judged yet."""
    primary, shadow = dw.primary, dw.shadow
    grace = grace_s if grace_s is not None else max(primary.capabilities.max_lag_s, shadow.capabilities.max_lag_s) + 2.0
    judged_until = ended_at - grace
    comparison = compare(dual.fires[PRIMARY], dual.fires[SHADOW], tolerance_s, judged_until)
    # Lost: fired by some side, due in the judged window, and polled by neither executor.
    fired_keys = {
        (tid, due)
        for side in (PRIMARY, SHADOW)
        for tid, items in dual.fires[side].by_id.items()
        for due, _ in items
        if due <= judged_until
    }
    lost_keys = sorted(k for k in fired_keys if k not in dual.executed)
    lost_samples = [f"{t}@{d:.3f}" for t, d in lost_keys[:10]]
    lag = {PRIMARY: _lag_summary(dual.fires[PRIMARY]), SHADOW: _lag_summary(dual.fires[SHADOW])}
    dup_effects = dual.duplicate_effects()
    v = verdict(
        comparison,
        duplicate_effects=dup_effects,
        lost=len(lost_keys),
        shadow_lag_p99_ms=lag[SHADOW]["p99"],
        shadow_max_lag_s=shadow.capabilities.max_lag_s,
        max_extra_ratio=max_extra_ratio,
        lost_samples=lost_samples,
    )
    executed_by = {PRIMARY: 0, SHADOW: 0}
    for side in dual.executed.values():
        executed_by[side] += 1
    return RehearsalResult(
        comparison=comparison,
        verdict=v,
        backfilled=backfilled,
        duplicate_effects=dup_effects,
        lost=len(lost_keys),
        lost_samples=lost_samples,
        lag_ms=lag,
        undecided=dual.undecided,
        skipped_already_done=dual.skipped_already_done,
        switch_at=dual.switch_at,
        started_at=started_at,
        ended_at=ended_at,
        executed_by=executed_by,
    )
