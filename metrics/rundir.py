"""The run directory: the one place that knows its format, for writers, reports and tests.

``runs/<YYYYmmdd-HHMMSS>-<scheduler>/`` holds:

``config.json``
    ``scheduler``, ``options`` (resolved), ``workload`` (resolved, every field),
    ``environment`` (python, platform, cpus, memory_bytes, postgres_version,
    postgres_settings, temporal_version, timerbench_version, git_commit), ``dsn`` (no password),
    ``temporal_address``, ``started_at``, ``argv``, and ``window``: ``arm_start``,
    ``measure_start``, ``measure_end`` (epoch s; ``measure_end`` is where an interrupted run
    stopped), ``grace_s``, ``missed_before`` and ``drained_s``: after a complete window the run
    drains for up to ``grace_s`` (until every fire due before ``measure_end`` has arrived), and
    ``missed_before`` = ``measure_end``; an interrupted run cannot drain, so there
    ``missed_before`` = ``measure_end - grace_s``.
``fires.parquet``
    One row per fire received by the polling processor (:data:`FIRES_SCHEMA`), including those
    received while draining after ``measure_end`` (outside the window). A **missed** fire (armed,
    due before ``missed_before``, never received) is a row too, with
    ``fired_at`` and ``lag_s`` null, ``attempt`` 0 and ``batch`` -1, so it stays in the
    denominator. ``warmup`` is true when the fire was received (a missed one: due) before
    ``measure_start``.
``samples.parquet``
    Long format (:data:`SAMPLES_SCHEMA`): scope ``run`` for run-wide metrics, else a relation
    ``schema.table`` or its TOAST table ``schema.table#toast``.
``summary.json``
    :func:`compute_summary` of the three files above.
``faults.json`` (``--fault``), ``migration.json`` (``bench migrate dry-run``), ``locust_*`` (``--arm-load``)
    and ``nodes/`` (``--nodes``: what each node recorded, see :mod:`metrics.parts`); a sweep
    directory holds ``sweep.json`` beside its runs. Every name is a constant or a function below.

Windows: performance figures (rate, lag, per-fire writes, HOT ratio) cover the measured window
only; correctness figures (missed, duplicate fires, duplicate effects) cover the whole run,
warm-up included, because a lost or doubled fire is never a warm-up artefact.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from metrics.hdr import new_histogram, percentiles_ms, record_many

# Every file of a run directory, named once (writers, readers, reports and tests use these).
CONFIG = "config.json"
FIRES = "fires.parquet"
SAMPLES = "samples.parquet"
SUMMARY = "summary.json"
FAULTS = "faults.json"  # --fault: planned and actual spans (harness.faults writes, metrics.faults reads)
MIGRATION = "migration.json"  # bench migrate dry-run: comparison and verdict
SWEEP = "sweep.json"  # bench sweep: in the sweep directory, beside its runs
LOCUST_SUMMARY = "locust_summary.json"  # --arm-load: locust's exact totals, written at its exit
LOCUST_CSV_PREFIX = "locust"  # --arm-load: locust's --csv prefix (locust_stats.csv, ...)
LOCUST_LOG = "locust.log"
NODES_DIR = "nodes"  # --nodes: what each `bench serve --record` node wrote, by worker id


def node_workload(nodes_dir: Path) -> Path:
    """The resolved workload every node rebuilds the run's population from."""
    return nodes_dir / "workload.yaml"


def node_log(nodes_dir: Path, worker: str) -> Path:
    return nodes_dir / f"node-{worker}.log"


def node_meta(nodes_dir: Path, worker: str) -> Path:
    """Worker id, pid, start and stop, counters; written at a node's graceful stop."""
    return nodes_dir / f"node-{worker}.json"


def node_state(nodes_dir: Path, worker: str) -> Path:
    """The node's polling-processor bookkeeping (armed and received fire times) at its stop."""
    return nodes_dir / f"state-{worker}.npz"


def node_holds(nodes_dir: Path, worker: str) -> Path:
    """When the node held each fire (received, committed), for the double-hold check."""
    return nodes_dir / f"holds-{worker}.parquet"


def node_fires_part(nodes_dir: Path, worker: str, seq: int) -> Path:
    """One complete part of a node's fire log (written whole, so a killed node keeps it)."""
    return nodes_dir / f"fires-{worker}.{seq:05d}.parquet"


def node_fires_parts(nodes_dir: Path) -> dict[str, list[Path]]:
    """Every node's fire-log parts, by worker id, in order."""
    out: dict[str, list[Path]] = {}
    for p in sorted(nodes_dir.glob("fires-*.*.parquet")):
        out.setdefault(p.name[len("fires-"):].split(".")[0], []).append(p)
    return out


def node_late(nodes_dir: Path, worker: str) -> Path:
    """Rows (numbered across the node's parts) whose effect was committed after they were written."""
    return nodes_dir / f"late-{worker}.npy"

FIRES_SCHEMA = pa.schema(
    [
        ("timer_id", pa.string()),
        ("tenant_id", pa.string()),
        ("type", pa.string()),
        ("due_at", pa.float64()),  # epoch seconds
        ("armed_at", pa.float64()),
        ("fired_at", pa.float64()),  # null: missed
        ("lag_s", pa.float64()),  # fired_at - max(due_at, armed_at); null: missed
        ("attempt", pa.int32()),
        ("worker", pa.string()),
        ("batch", pa.int64()),
        ("effect_delivered", pa.bool_()),
        ("warmup", pa.bool_()),
    ]
)

SAMPLES_SCHEMA = pa.schema(
    [
        ("t", pa.float64()),
        ("elapsed_s", pa.float64()),
        ("scope", pa.string()),
        ("metric", pa.string()),
        ("value", pa.float64()),
    ]
)

RATE_HELD_SHARE = 0.95  # achieved below 95% of target: the run did not hold its rate
TOAST_SUFFIX = "#toast"


def new_run_dir(out: str | Path, scheduler: str, started_at: float) -> Path:
    """``<out>/<YYYYmmdd-HHMMSS>-<scheduler>/``, created; a suffix if that second is taken."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(started_at))
    base = Path(out)
    base.mkdir(parents=True, exist_ok=True)
    path = base / f"{stamp}-{scheduler}"
    n = 2
    while True:
        try:
            path.mkdir()
            return path
        except FileExistsError:
            path = base / f"{stamp}-{scheduler}-{n}"
            n += 1


def write_json(path: Path, data: Any) -> None:
    """Atomic: a reader never sees half a file."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=False, default=_json_default) + "\n")
    os.replace(tmp, path)


def _json_default(o: Any) -> Any:
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, np.bool_):
        return bool(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def read_config(run_dir: str | Path) -> dict[str, Any]:
    return json.loads((Path(run_dir) / CONFIG).read_text())


def read_summary(run_dir: str | Path) -> dict[str, Any]:
    return json.loads((Path(run_dir) / SUMMARY).read_text())


def read_fires(run_dir: str | Path) -> pa.Table:
    path = Path(run_dir) / FIRES
    if not path.exists():
        return FIRES_SCHEMA.empty_table()
    return pq.read_table(path)


def read_samples(run_dir: str | Path) -> pa.Table:
    path = Path(run_dir) / SAMPLES
    if not path.exists():
        return SAMPLES_SCHEMA.empty_table()
    return pq.read_table(path)


def write_samples(run_dir: str | Path, columns: dict[str, list]) -> None:
    table = pa.table({name: columns[name] for name in SAMPLES_SCHEMA.names}, schema=SAMPLES_SCHEMA)
    tmp = Path(run_dir) / (SAMPLES + ".tmp")
    pq.write_table(table, tmp)
    os.replace(tmp, Path(run_dir) / SAMPLES)


def _finite(x: float | None) -> float | None:
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def _keys_us(ids: np.ndarray, due: np.ndarray) -> np.ndarray:
    """(timer_id, due_at) keys; due at microseconds, the resolution every store keeps."""
    due_us = np.rint(due * 1e6).astype(np.int64)
    return np.char.add(np.char.add(ids.astype(str), "@"), due_us.astype(str))


def duplicates(ids: np.ndarray, due: np.ndarray) -> int:
    """Rows beyond the first of each (timer_id, due_at) key."""
    if len(ids) == 0:
        return 0
    return int(len(ids) - len(np.unique(_keys_us(ids, due))))


def compute_summary(
    run_dir: str | Path, complete: bool = True, incomplete_reason: str | None = None
) -> dict[str, Any]:
    """The summary, recomputed from ``config.json``, ``fires.parquet`` and ``samples.parquet``."""
    run_dir = Path(run_dir)
    cfg = read_config(run_dir)
    window = cfg.get("window", {})
    workload = cfg.get("workload", {})
    measure_start = float(window.get("measure_start", 0.0))
    measure_end = float(window.get("measure_end", measure_start))
    measured_s = max(0.0, measure_end - measure_start)

    fires = read_fires(run_dir)
    # a null fired_at (a missed fire) reads as NaN
    fired_at = fires.column("fired_at").to_numpy(zero_copy_only=False).astype(np.float64)
    was_fired = ~np.isnan(fired_at) if len(fires) else np.zeros(0, bool)
    warm = fires.column("warmup").to_numpy(zero_copy_only=False).astype(bool) if len(fires) else np.zeros(0, bool)
    in_window = was_fired & ~warm & (np.nan_to_num(fired_at, nan=np.inf) < measure_end)
    lag_s = fires.column("lag_s").to_numpy(zero_copy_only=False) if len(fires) else np.array([])
    measured_lags = lag_s[in_window].astype(np.float64)

    hist = new_histogram()
    record_many(hist, np.rint(measured_lags * 1e6))
    lag_ms = percentiles_ms(hist)

    ids = np.asarray(fires.column("timer_id").to_pylist(), dtype=object) if len(fires) else np.array([], dtype=object)
    due = fires.column("due_at").to_numpy(zero_copy_only=False) if len(fires) else np.array([])
    effect = fires.column("effect_delivered").to_numpy(zero_copy_only=False).astype(bool) if len(fires) else np.zeros(0, bool)

    n_fires = int(in_window.sum())
    missed = int((~was_fired).sum())
    duplicate_fires = duplicates(ids[was_fired], due[was_fired])
    duplicate_effects = duplicates(ids[effect], due[effect])

    samples = read_samples(run_dir)
    tables = _table_figures(samples, measure_start, measure_end, n_fires)

    target = workload.get("rate_per_s")
    achieved = n_fires / measured_s if measured_s > 0 else None
    claim_rate = _run_metric_mean(samples, "claims_per_s", measure_start, measure_end)

    grace = window.get("grace_s")
    warnings: list[str] = []
    if not complete:
        warnings.append(f"incomplete run: {incomplete_reason or 'stopped early'}; figures cover what was recorded")
    if target and achieved is not None and achieved < RATE_HELD_SHARE * target:
        warnings.append(
            f"rate not held: achieved {achieved:.1f} fires/s against a target of {target:.1f} fires/s "
            f"({100 * achieved / target:.0f}%)"
        )
    if missed:
        warnings.append(f"{missed} missed fires (armed, due in the run, not fired within the {grace} s grace period)")
    if duplicate_effects:
        warnings.append(f"{duplicate_effects} duplicate effects (the same (timer_id, due_at) delivered twice)")
    cutoff = window.get("missed_before")
    if cutoff is not None and cutoff <= float(window.get("arm_start", measure_start)):
        warnings.append(
            f"missed fires not judged: the run stopped within the grace period ({grace} s, from the "
            f"backend's max lag) of its start"
        )
    if measured_s <= 0 and complete:
        warnings.append("empty measured window")

    return {
        "complete": bool(complete),
        "incomplete_reason": None if complete else (incomplete_reason or "stopped early"),
        "scheduler": cfg.get("scheduler"),
        "workload_name": workload.get("name"),
        "target_rate": target,
        "achieved_rate": achieved,
        "claim_rate": claim_rate,
        "measured_s": measured_s,
        "warmup_s": max(0.0, measure_start - float(window.get("arm_start", measure_start))),
        "lag_ms": lag_ms,
        "fires": n_fires,
        "missed": missed,
        "duplicate_fires": duplicate_fires,
        "duplicate_effects": duplicate_effects,
        **tables,
        "warnings": warnings,
    }


def _run_metric_mean(samples: pa.Table, metric: str, start: float, end: float) -> float | None:
    """Time-weighted mean of a per-second rate over the samples that cover ``(start, end]``.

    Each sample covers the time since the previous one; weighting by that span makes the mean
    the total divided by the time, even when a bursty backend (one claim a second) and the
    sampler's ticks alias."""
    if len(samples) == 0:
        return None
    t = samples.column("t").to_numpy()
    scope = np.asarray(samples.column("scope").to_pylist(), dtype=object)
    name = np.asarray(samples.column("metric").to_pylist(), dtype=object)
    value = samples.column("value").to_numpy()
    sel = (scope == "run") & (name == metric)
    if not sel.any():
        return None
    ts, vs = t[sel], value[sel]
    order = np.argsort(ts)
    ts, vs = ts[order], vs[order]
    span = np.diff(ts, prepend=ts[0] - 1.0)
    inside = (ts > start) & (ts <= end + 0.5)
    if not inside.any() or span[inside].sum() <= 0:
        return None
    return _finite(float(np.nansum(vs[inside] * span[inside]) / span[inside].sum()))


def _series(samples_np: dict[str, np.ndarray], scopes: set[str], metric: str) -> tuple[np.ndarray, np.ndarray]:
    """Per sample time, the sum of ``metric`` over ``scopes``."""
    sel = np.isin(samples_np["scope"], list(scopes)) & (samples_np["metric"] == metric)
    if not sel.any():
        return np.array([]), np.array([])
    t = samples_np["t"][sel]
    v = samples_np["value"][sel]
    times, inverse = np.unique(t, return_inverse=True)
    sums = np.zeros(len(times))
    np.add.at(sums, inverse, np.nan_to_num(v))
    return times, sums


def _at(times: np.ndarray, values: np.ndarray, when: float) -> float | None:
    """The last value sampled at or before ``when`` (the first one if none is)."""
    if len(times) == 0:
        return None
    i = int(np.searchsorted(times, when, side="right")) - 1
    return float(values[max(i, 0)])


def _table_figures(samples: pa.Table, start: float, end: float, n_fires: int) -> dict[str, Any]:
    empty = {
        "dead_tuples": {"table_peak": None, "table_end": None, "toast_peak": None, "toast_end": None},
        "hot_ratio": None,
        "per_fire": {"inserts": None, "updates": None, "deletes": None, "wal_bytes": None},
        "autovacuum_runs": None,
        "table_bytes_end": None,
        "index_bytes_end": None,
    }
    if len(samples) == 0:
        return empty
    s = {
        "t": samples.column("t").to_numpy(),
        "scope": np.asarray(samples.column("scope").to_pylist(), dtype=object),
        "metric": np.asarray(samples.column("metric").to_pylist(), dtype=object),
        "value": samples.column("value").to_numpy(),
    }
    rels = {x for x in set(s["scope"].tolist()) if x != "run"}
    tables = {x for x in rels if not x.endswith(TOAST_SUFFIX)}
    toasts = rels - tables
    out = dict(empty)

    def window_delta(scopes: set[str], metric: str) -> float | None:
        times, vals = _series(s, scopes, metric)
        a, b = _at(times, vals, start), _at(times, vals, end)
        return None if a is None or b is None else b - a

    def per_fire(x: float | None) -> float | None:
        return None if x is None or n_fires == 0 else x / n_fires

    wal = window_delta({"run"}, "wal_bytes")
    out["per_fire"] = dict(empty["per_fire"], wal_bytes=per_fire(wal))
    if not tables:
        return out
    dead_t, dead_v = _series(s, tables, "n_dead_tup")
    toast_t, toast_v = _series(s, toasts, "n_dead_tup")
    out["dead_tuples"] = {
        "table_peak": float(dead_v.max()) if len(dead_v) else None,
        "table_end": float(dead_v[-1]) if len(dead_v) else None,
        "toast_peak": float(toast_v.max()) if len(toast_v) else None,
        "toast_end": float(toast_v[-1]) if len(toast_v) else None,
    }
    upd = window_delta(tables, "n_tup_upd")
    hot = window_delta(tables, "n_tup_hot_upd")
    out["hot_ratio"] = (hot / upd) if upd and hot is not None else None
    # writes per fire count the scheduler's own rows (seeds/003's "four writes per poll"); the
    # TOAST chunk writes those rows cause show in the per-relation samples.
    out["per_fire"] = {
        "inserts": per_fire(window_delta(tables, "n_tup_ins")),
        "updates": per_fire(upd),
        "deletes": per_fire(window_delta(tables, "n_tup_del")),
        "wal_bytes": per_fire(wal),
    }
    av_t, av_v = _series(s, rels, "autovacuum_count")
    out["autovacuum_runs"] = int(av_v[-1] - av_v[0]) if len(av_v) else None
    # sizes: the tables and their TOAST tables together (bytes on disk at the end)
    tb_t, tb_v = _series(s, rels, "table_bytes")
    ib_t, ib_v = _series(s, rels, "index_bytes")
    out["table_bytes_end"] = int(tb_v[-1]) if len(tb_v) else None
    out["index_bytes_end"] = int(ib_v[-1]) if len(ib_v) else None
    return out
