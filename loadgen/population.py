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
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from loadgen.rates import shown
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


TRACE_COLUMNS = ("trigger_id", "tenant_id", "interval_s", "first_fire_s")


def _decoded_lines(raw, where: str):
    """The trace's lines as text; a line that is not UTF-8 is named."""
    for number, line in enumerate(raw, start=1):
        nul = line.find(b"\0")
        if nul >= 0:
            raise ValueError(f"{where} line {number}: not text (a NUL byte at column {nul + 1}); give a UTF-8 CSV")
        try:
            yield line.decode("utf-8-sig" if number == 1 else "utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(
                f"{where} line {number}: not UTF-8 text (byte 0x{line[exc.start]:02x} at column "
                f"{exc.start + 1}); save the trace as UTF-8 CSV"
            ) from None


def from_trace(path: Path) -> Population:
    """The population of a trace CSV, every row checked: one line naming the file, the line, the
    field and what is accepted on the first bad one (ValueError)."""
    where = f"trace {path}"
    ids: list[str] = []
    tenants: list[str] = []
    interval: list[float] = []
    first: list[float] = []
    seen: dict[str, int] = {}
    try:
        if not path.is_file():
            raise ValueError(f"{where}: not found (or not a file); give a CSV with columns {','.join(TRACE_COLUMNS)}")
        with open(path, "rb") as raw:
            reader = csv.reader(_decoded_lines(raw, where))
            header = next(reader, None)
            if header is None:
                raise ValueError(f"{where} is empty; give a CSV with the header {','.join(TRACE_COLUMNS)}")
            header = [h.strip() for h in header]
            missing = [c for c in TRACE_COLUMNS if c not in header]
            if missing:
                raise ValueError(
                    f"{where} line 1: missing column(s) {', '.join(missing)}; the header needs "
                    f"{','.join(TRACE_COLUMNS)} (found {shown(','.join(header), 80)})"
                )
            twice = sorted({h for h in header if header.count(h) > 1})
            if twice:
                raise ValueError(f"{where} line 1: column(s) {', '.join(twice)} given twice; name each column once")
            col = {c: header.index(c) for c in TRACE_COLUMNS}
            for row in reader:
                line = reader.line_num
                if not row or not any(x.strip() for x in row):
                    continue  # a blank line
                if len(row) != len(header):
                    raise ValueError(
                        f"{where} line {line}: {len(row)} fields, the header has {len(header)}; "
                        f"give one value per column"
                    )
                tid, tenant = row[col["trigger_id"]], row[col["tenant_id"]]
                if not tid.strip():
                    raise ValueError(f"{where} line {line}, field trigger_id: empty; give every trigger an id")
                if not tenant.strip():
                    raise ValueError(f"{where} line {line}, field tenant_id: empty; give every trigger a tenant")
                if tid in seen:
                    raise ValueError(
                        f"{where} line {line}, field trigger_id: {tid[:40]!r} repeats line {seen[tid]}; "
                        f"ids must be unique"
                    )
                iv = _trace_number(row[col["interval_s"]], where, line, "interval_s", "> 0")
                ff = _trace_number(row[col["first_fire_s"]], where, line, "first_fire_s", ">= 0")
                seen[tid] = line
                ids.append(tid)
                tenants.append(tenant)
                interval.append(iv)
                first.append(ff)
    except OSError as exc:
        raise ValueError(f"cannot read {where}: {exc.strerror}") from None
    except csv.Error as exc:
        raise ValueError(f"{where}: not a CSV file ({exc})") from None
    if not ids:
        raise ValueError(f"{where} has no triggers (a header and no rows)")
    iv = np.asarray(interval)
    ff = np.asarray(first)
    # A first fire far beyond its interval is a long-horizon callback, not part of the steady rate.
    return Population(ids, tenants, iv, ff, ff > np.maximum(10 * iv, SECONDS_PER_DAY))


def _trace_number(text: str, where: str, line: int, field: str, accepted: str) -> float:
    try:
        v = float(text)
    except ValueError:
        v = math.nan
    if not (math.isfinite(v) and (v > 0 if accepted == "> 0" else v >= 0)):
        raise ValueError(
            f"{where} line {line}, field {field}: {text.strip()[:40]!r}; need a finite number of seconds {accepted}"
        )
    return v
