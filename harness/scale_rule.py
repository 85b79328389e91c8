"""``bench scale``'s pure parts (``tests/unit/test_scale_rule.py``): the population steps, the
long-horizon share that fills a step, whether a step fits on this machine, and the log-log fit of
a cost against the population with its reading.

**Steps.** At a fixed fire rate the periodic timers the rate needs are ``rate / E[1/I]`` (the
workload's intervals, :meth:`loadgen.workload.Workload.fires_per_trigger_s`); every timer beyond
them is long-horizon (first fire 30-60 days out, a small state). ``auto`` is the share that makes
the population the step's size: ``1 - needed / population``.

**Fits.** Before a step starts, its disk and memory are estimated from the design's previous
step (what it grew per armed timer between the last two steps, or its size per timer after one)
or from a conservative default, and compared with the free space the caller read: a step that
would not leave :data:`DISK_RESERVE_BYTES` (or :data:`DISK_RESERVE_SHARE` of the disk) free, or
would use more than :data:`MEMORY_SHARE` of the available memory, is refused in one line.

**Slope.** A cost ``y`` against the population ``N`` on log-log axes: the least-squares line
through ``(ln N, ln y)`` (:func:`metrics.trend.climb`), its slope ``k`` and standard error. Read
as **linear** (``k`` near 1: the cost grows with the population), **superlinear** (above
:data:`SUPERLINEAR`), **sublinear** (between :data:`FLAT_BELOW` and :data:`LINEAR_FROM`),
**logarithmic** (``k`` below that but ``y`` against ``ln N`` grows, by the soak's test: a climb of
more than a quarter of its level, beyond two standard errors: a B-tree's depth) or **flat** (~0).
The prediction at a projected population follows the model of the reading.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from metrics.trend import climb, verdict

SUFFIXES = {"": 1, "k": 1_000, "m": 1_000_000, "b": 1_000_000_000}
MAX_POPULATION = 10_000_000_000
RATE_SLACK = 0.05  # a population this much short of what the rate needs runs at its own rate (held >= 95%)
FLAT_BELOW = 0.25  # |slope| below this: flat or logarithmic, by the second test
LINEAR_FROM = 0.75  # a slope from here to SUPERLINEAR reads as linear
SUPERLINEAR = 1.25
DISK_RESERVE_BYTES = 2 << 30  # a step must leave this much free on the store's disk ...
DISK_RESERVE_SHARE = 0.05  # ... or this share of it, whichever is larger
DISK_WAL_FACTOR = 2.0  # writing a row writes it to WAL too (max_wal_size lets it stay until a checkpoint)
MEMORY_SHARE = 0.8  # a step may plan to use at most this share of the available memory
# conservative bytes per armed timer when the design has no previous step to go by: a Postgres row
# with its indexes (a long-horizon timer's state is small), a Temporal design's heap entry and its
# history, the run process's population arrays and id strings
DEFAULT_DISK_PER_TIMER = {"postgres": 2048, "temporal": 4096, "memory": 0}
DEFAULT_RSS_PER_TIMER = 1024
MEMORY_DESIGN_RSS_PER_TIMER = 2048  # the memory scheduler keeps every timer and its state in process


def parse_population(text: str, name: str = "--population") -> list[int]:
    """``12k,100k,1m,10m`` -> ``[12000, 100000, 1000000, 10000000]``; ValueError naming the bad item."""
    out: list[int] = []
    for item in str(text).split(","):
        raw = item.strip().lower().replace("_", "")
        m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([kmb]?)", raw)
        value = float(m.group(1)) * SUFFIXES[m.group(2)] if m else math.nan
        if not (math.isfinite(value) and value >= 1 and value == int(value) and value <= MAX_POPULATION):
            raise ValueError(
                f"{name}: {item.strip()!r} is not a positive count of timers; give counts such as 12k,100k,1m,10m "
                f"(k = 1,000, m = 1,000,000, b = 1,000,000,000)"
            )
        out.append(int(value))
    if len(set(out)) != len(out):
        raise ValueError(f"{name}: {text!r} names a population twice; give each step once")
    return out


def periodic_needed(rate: float, fires_per_trigger_s: float) -> int:
    """Periodic timers a fire rate needs (rate x mean interval, exactly rate / E[1/I])."""
    return max(1, int(round(rate / fires_per_trigger_s)))


def auto_share(population: int, rate: float, fires_per_trigger_s: float) -> float:
    """The long-horizon share that makes ``population`` at ``rate``: 0 for a population up to
    :data:`RATE_SLACK` short of what the rate needs (its rate is then the population's, as
    ``12k`` at 556/s, which needs 12,032); ValueError when the rate needs more than that."""
    needed = periodic_needed(rate, fires_per_trigger_s)
    if population >= (1 - RATE_SLACK) * needed:
        return max(0.0, 1.0 - needed / population)  # a step just short of it fires a little slower
    if population < needed:
        raise ValueError(
            f"--population {population:,}: {rate:g} fires/s needs {needed:,} periodic timers at these intervals, "
            f"more than the step has; give populations of at least {needed:,} or a lower --rate"
        )
    return 1.0 - needed / population


@dataclass
class Fit:
    """Whether a step fits: the estimates and the free space they were compared with."""

    ok: bool
    why: str | None
    disk_need: float | None
    disk_free: float | None
    memory_need: float | None
    memory_available: float | None

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def estimate(population: int, previous: list[tuple[int, float]], default_per_timer: float) -> float:
    """Bytes a step of ``population`` timers needs, from the design's earlier steps
    ``(population, bytes)``: the last step's bytes plus the added timers at the growth per timer
    between the last two steps (after one step, at the default: a process's fixed cost is not a
    cost per timer); with no earlier step, the default per timer."""
    pts = [(n, b) for n, b in previous if b is not None and b > 0 and n > 0]
    if not pts:
        return default_per_timer * population
    n1, b1 = pts[-1]
    per = default_per_timer
    if len(pts) >= 2 and pts[-2][0] != n1:
        n0, b0 = pts[-2]
        per = max(0.0, (b1 - b0) / (n1 - n0))
    return b1 + per * max(0, population - n1)


def check_fits(
    population: int,
    disk_need: float | None,
    disk_free: float | None,
    disk_total: float | None,
    memory_need: float | None,
    memory_available: float | None,
) -> Fit:
    """Whether a step fits in the free space read by the caller (None: not checkable there)."""
    from reports.fmt import human_bytes

    why = None
    if disk_need is not None and disk_free is not None:
        reserve = max(DISK_RESERVE_BYTES, DISK_RESERVE_SHARE * (disk_total or 0.0))
        if disk_need * DISK_WAL_FACTOR + reserve > disk_free:
            why = (
                f"{population:,} timers need about {human_bytes(disk_need)} of store (and as much WAL), "
                f"{human_bytes(disk_free)} is free and {human_bytes(reserve)} must stay free: skipped"
            )
    if why is None and memory_need is not None and memory_available is not None:
        if memory_need > MEMORY_SHARE * memory_available:
            why = (
                f"{population:,} timers need about {human_bytes(memory_need)} of memory in the run process, more than "
                f"{MEMORY_SHARE:.0%} of the {human_bytes(memory_available)} available: skipped"
            )
    return Fit(why is None, why, disk_need, disk_free, memory_need, memory_available)


def fit_loglog(xs, ys, project: float | None = None, total: bool = False) -> dict[str, Any] | None:
    """The log-log fit of ``ys`` against ``xs`` (both > 0), its reading and its prediction at
    ``project``; None with fewer than two usable points.

    ``total``: ``ys`` is the size of a whole store or process, a fixed cost plus a cost per timer,
    whose log-log slope climbs towards 1 only once the timers outweigh the fixed cost; it is also
    fitted as ``fixed + per_added x N`` on linear axes, which reads "fixed + linear" (when the
    log-log slope alone would read it below linear) and predicts."""
    x = np.asarray(xs, float)
    y = np.asarray(ys, float)
    keep = np.isfinite(x) & np.isfinite(y) & (x > 0) & (y > 0)
    x, y = x[keep], y[keep]
    if len(x) < 2 or len(set(x.tolist())) < 2:
        return None
    lx, ly = np.log(x), np.log(y)
    fit = climb(lx, ly)
    if fit is not None:
        slope, _, se_span = fit
        stderr = se_span / float(lx.max() - lx.min())
    else:  # two points: the line through them, no error to give
        slope = float((ly[-1] - ly[0]) / (lx[-1] - lx[0]))
        stderr = None
    intercept = float(np.mean(ly) - slope * np.mean(lx))
    reading = read_slope(slope, lx, y)
    out: dict[str, Any] = {
        "slope": slope,
        "stderr": stderr,
        "points": int(len(x)),
        "reading": reading,
        "project": project,
        "predicted": None,
    }
    if project:
        if reading == "logarithmic":
            b, a = np.polyfit(lx, y, 1)
            out["predicted"] = float(a + b * math.log(project))
        elif reading == "flat":
            out["predicted"] = float(np.median(y))
        elif reading != "falling":  # a falling line extrapolates to nothing worth saying
            out["predicted"] = float(math.exp(intercept + slope * math.log(project)))
    if total:
        per, fixed = (float(v) for v in np.polyfit(x, y, 1))
        out.update(per_added=per, fixed=fixed)
        if per > 0 and fixed > 0 and reading not in ("linear", "superlinear"):
            out["reading"] = "fixed + linear"
        if project and per > 0:
            out["predicted"] = fixed + per * project
    return out


def read_slope(slope: float, lx: np.ndarray, y: np.ndarray) -> str:
    if slope >= SUPERLINEAR:
        return "superlinear"
    if slope >= LINEAR_FROM:
        return "linear"
    if slope >= FLAT_BELOW:
        return "sublinear"
    if slope > -FLAT_BELOW and len(y) >= 3 and verdict(lx, y)["verdict"] == "growing":
        return "logarithmic"
    return "falling" if slope <= -FLAT_BELOW else "flat"
