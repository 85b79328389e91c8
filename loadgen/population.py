"""The trigger population: who fires, for which tenant, how often, and when first.

Held as arrays (one entry per trigger) rather than objects, so a population of millions costs
a few arrays. Synthetic populations come from the workload and its seed (same seed, same
population); a trace CSV (``trigger_id,tenant_id,interval_s,first_fire_s``, first fire as an
offset from the start of arming in seconds) is replayed as given.

First fire times are spread uniformly over one interval of each trigger, so the offered rate is
steady from the first second (the density of first fires is ``sum(1/interval)`` = the rate)
instead of a burst at start.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from loadgen.workload import Workload

SECONDS_PER_DAY = 86400.0


@dataclass
class Population:
    ids: list[str]
    tenants: list[str]
    interval_s: np.ndarray  # float64, per trigger
    first_fire_s: np.ndarray  # float64, offset from the start of arming
    long_horizon: np.ndarray  # bool: first fire 30-60 days out

    def __len__(self) -> int:
        return len(self.ids)

    def index(self) -> dict[str, int]:
        return {tid: i for i, tid in enumerate(self.ids)}

    def rate_per_s(self) -> float:
        """Steady-state offered fire rate: sum of 1/interval over the periodic triggers."""
        return float(np.sum(1.0 / self.interval_s[~self.long_horizon]))


def tenant_weights(tenants: int, skew: float) -> np.ndarray:
    """Zipf weights: tenant k (1-based) gets a share proportional to 1/k^skew."""
    w = 1.0 / np.arange(1, tenants + 1, dtype=np.float64) ** skew
    return w / w.sum()


def build(w: Workload) -> Population:
    if w.trace:
        return from_trace(Path(w.trace))
    rng = np.random.default_rng(w.seed)
    n = int(w.triggers)
    width = len(str(n - 1))
    ids = [f"trg-{i:0{width}d}" for i in range(n)]
    tenant_names = [f"tenant-{k:03d}" for k in range(1, w.tenants + 1)]
    tenant_idx = rng.choice(w.tenants, size=n, p=tenant_weights(w.tenants, w.tenant_skew))
    tenants = [tenant_names[k] for k in tenant_idx]
    interval = rng.uniform(w.interval_min_s, w.interval_max_s, size=n)
    first = rng.uniform(0.0, 1.0, size=n) * interval
    long_horizon = rng.random(n) < w.long_horizon_share
    if long_horizon.any():
        days = rng.uniform(w.long_horizon_min_days, w.long_horizon_max_days, size=int(long_horizon.sum()))
        first[long_horizon] = days * SECONDS_PER_DAY
    herd = (~long_horizon) & (rng.random(n) < w.herd_share)
    first[herd] = w.herd_at_s
    return Population(ids, tenants, interval, first, long_horizon)


def from_trace(path: Path) -> Population:
    ids: list[str] = []
    tenants: list[str] = []
    interval: list[float] = []
    first: list[float] = []
    try:
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            need = {"trigger_id", "tenant_id", "interval_s", "first_fire_s"}
            if reader.fieldnames is None or not need <= set(reader.fieldnames):
                raise ValueError(
                    f"trace {path} needs a header with columns {', '.join(sorted(need))}; found {reader.fieldnames}"
                )
            for line, row in enumerate(reader, start=2):
                try:
                    iv, ff = float(row["interval_s"]), float(row["first_fire_s"])
                except ValueError:
                    raise ValueError(f"trace {path} line {line}: interval_s and first_fire_s must be numbers") from None
                if iv <= 0 or ff < 0:
                    raise ValueError(f"trace {path} line {line}: need interval_s > 0 and first_fire_s >= 0")
                ids.append(row["trigger_id"])
                tenants.append(row["tenant_id"])
                interval.append(iv)
                first.append(ff)
    except OSError as exc:
        raise ValueError(f"cannot read trace {path}: {exc.strerror}") from None
    if not ids:
        raise ValueError(f"trace {path} has no triggers")
    if len(set(ids)) != len(ids):
        raise ValueError(f"trace {path} repeats a trigger_id; ids must be unique")
    iv = np.asarray(interval)
    ff = np.asarray(first)
    # A first fire far beyond its interval is a long-horizon callback, not part of the steady rate.
    return Population(ids, tenants, iv, ff, ff > np.maximum(10 * iv, SECONDS_PER_DAY))
