"""The whole bill of a run, per fire: what the design's tables, their TOAST tables and every
server it used paid over the measured window (row writes, HOT, dead tuples, WAL, bytes written,
CPU), from the samples, ``statements.parquet`` and ``bloat.json`` of a run directory
(:mod:`metrics.rundir`). docs/design.md, "How cost is counted", says what each figure means."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from metrics.rundir import (
    SERVER_PREFIX,
    TOAST_SUFFIX,
    is_relation_scope,
    read_bloat,
    read_statements,
)

# pgstattuple and n_dead_tup disagree when they differ by more than this share of the larger,
# once either counts at least DEAD_TUPLE_FLOOR (a handful of tuples either way is not news).
DEAD_TUPLE_DISAGREE = 0.20


DEAD_TUPLE_FLOOR = 100


PAGE_BYTES = 8192


def finite(x: float | None) -> float | None:
    """``x`` as a float, None when it is None, NaN or infinite."""
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def dead_tuples_disagree(exact: float | None, estimate: float | None) -> bool:
    """True when n_dead_tup is off pgstattuple's exact count by more than
    :data:`DEAD_TUPLE_DISAGREE` of the larger (and either is at least :data:`DEAD_TUPLE_FLOOR`)."""
    if exact is None or estimate is None or math.isnan(exact) or math.isnan(estimate):
        return False
    larger = max(exact, estimate)
    return larger >= DEAD_TUPLE_FLOOR and abs(exact - estimate) > DEAD_TUPLE_DISAGREE * larger


def run_metric_mean(samples: pa.Table, metric: str, start: float, end: float) -> float | None:
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
    return finite(float(np.nansum(vs[inside] * span[inside]) / span[inside].sum()))


def series(samples_np: dict[str, np.ndarray], scopes: set[str], metric: str) -> tuple[np.ndarray, np.ndarray]:
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


def value_at(times: np.ndarray, values: np.ndarray, when: float) -> float | None:
    """The value sampled nearest to ``when`` (the sampler takes a sample at each edge of the
    measured window, so at the edges this is that sample)."""
    if len(times) == 0:
        return None
    i = int(np.searchsorted(times, when))
    if i >= len(times):
        return float(values[-1])
    if i > 0 and when - times[i - 1] <= times[i] - when:
        i -= 1
    return float(values[i])


WRITE_KINDS = (("inserts", "n_tup_ins"), ("updates", "n_tup_upd"), ("deletes", "n_tup_del"))


def sample_arrays(samples: pa.Table) -> dict[str, np.ndarray]:
    return {
        "t": samples.column("t").to_numpy(),
        "scope": np.asarray(samples.column("scope").to_pylist(), dtype=object),
        "metric": np.asarray(samples.column("metric").to_pylist(), dtype=object),
        "value": samples.column("value").to_numpy(),
    }


def table_figures(samples: pa.Table, start: float, end: float, n_fires: int) -> dict[str, Any]:
    """Figures of the design's tables and of the servers, over the measured window.

    ``per_fire``: row writes of the design's tables (``inserts``, ``updates``, ``deletes``: heap;
    ``toast_*``: their TOAST tables; ``heap_writes``, ``toast_writes`` and ``row_writes``: the
    totals) and WAL (``wal_bytes``, ``wal_records``, ``wal_fpi``: server-wide, from pg_stat_wal;
    ``wal_bytes`` from the WAL position on servers without it). ``servers``: per server scope,
    each cumulative metric's window delta (``window``) and that per fire (``per_fire``)."""
    per_fire_keys = [
        "inserts",
        "updates",
        "deletes",
        "toast_inserts",
        "toast_updates",
        "toast_deletes",
        "heap_writes",
        "toast_writes",
        "row_writes",
        "wal_bytes",
        "wal_records",
        "wal_fpi",
    ]
    empty = {
        "dead_tuples": {"table_peak": None, "table_end": None, "toast_peak": None, "toast_end": None},
        "hot_ratio": None,
        "per_fire": {k: None for k in per_fire_keys},
        "autovacuum_runs": None,
        "table_bytes_end": None,
        "index_bytes_end": None,
        "servers": {},
    }
    if len(samples) == 0:
        return empty
    s = sample_arrays(samples)
    scopes = set(s["scope"].tolist())
    rels = {x for x in scopes if is_relation_scope(x)}
    tables = {x for x in rels if not x.endswith(TOAST_SUFFIX)}
    toasts = rels - tables
    out = dict(empty)

    def window_delta(scopes_: set[str], metric: str) -> float | None:
        times, vals = series(s, scopes_, metric)
        a, b = value_at(times, vals, start), value_at(times, vals, end)
        return None if a is None or b is None else b - a

    def per_fire(x: float | None) -> float | None:
        return None if x is None or n_fires == 0 else x / n_fires

    servers: dict[str, Any] = {}
    for scope in sorted(x for x in scopes if x.startswith(SERVER_PREFIX)):
        metrics = sorted(set(s["metric"][s["scope"] == scope].tolist()))
        window = {m: window_delta({scope}, m) for m in metrics}
        servers[scope[len(SERVER_PREFIX) :]] = {
            "window": window,
            "per_fire": {m: per_fire(v) for m, v in window.items()},
        }
    out["servers"] = servers
    pg = servers.get("postgres", {}).get("per_fire", {})
    wal = {
        "wal_bytes": pg.get("wal_bytes", per_fire(window_delta({"run"}, "wal_bytes"))),
        "wal_records": pg.get("wal_records"),
        "wal_fpi": pg.get("wal_fpi"),
    }
    out["per_fire"] = {**empty["per_fire"], **wal}
    if not tables:
        return out
    dead_t, dead_v = series(s, tables, "n_dead_tup")
    toast_t, toast_v = series(s, toasts, "n_dead_tup")
    out["dead_tuples"] = {
        "table_peak": float(dead_v.max()) if len(dead_v) else None,
        "table_end": float(dead_v[-1]) if len(dead_v) else None,
        "toast_peak": float(toast_v.max()) if len(toast_v) else None,
        "toast_end": float(toast_v[-1]) if len(toast_v) else None,
    }
    upd = window_delta(tables, "n_tup_upd")
    hot = window_delta(tables, "n_tup_hot_upd")
    out["hot_ratio"] = (hot / upd) if upd and hot is not None else None
    # Row writes count the scheduler's own rows (the Composio article's "four writes per poll") and, apart,
    # the TOAST chunk writes those rows cause (the Composio article: TOAST writes are part of the bill).
    writes: dict[str, float | None] = {}
    for name, metric in WRITE_KINDS:
        writes[name] = per_fire(window_delta(tables, metric))
        writes[f"toast_{name}"] = per_fire(window_delta(toasts, metric)) if toasts else (0.0 if n_fires else None)
    heap = [writes[n] for n, _ in WRITE_KINDS]
    toast = [writes[f"toast_{n}"] for n, _ in WRITE_KINDS]
    writes["heap_writes"] = None if any(v is None for v in heap) else float(sum(heap))
    writes["toast_writes"] = None if any(v is None for v in toast) else float(sum(toast))
    writes["row_writes"] = (
        None
        if writes["heap_writes"] is None or writes["toast_writes"] is None
        else writes["heap_writes"] + writes["toast_writes"]
    )
    out["per_fire"] = {**out["per_fire"], **writes}
    av_t, av_v = series(s, rels, "autovacuum_count")
    out["autovacuum_runs"] = int(av_v[-1] - av_v[0]) if len(av_v) else None
    # sizes: the tables and their TOAST tables together (bytes on disk at the end)
    tb_t, tb_v = series(s, rels, "table_bytes")
    ib_t, ib_v = series(s, rels, "index_bytes")
    out["table_bytes_end"] = int(tb_v[-1]) if len(tb_v) else None
    out["index_bytes_end"] = int(ib_v[-1]) if len(ib_v) else None
    return out


def cost_figures(run_dir: Path, tables: dict[str, Any], n_fires: int, unavailable: dict[str, str]) -> dict[str, Any]:
    """The bill: every store the run wrote to, per fire, and the window's statements and the
    end-of-run bloat.

    ``bill``: ``durable_writes`` = row writes of the design's tables (heap + TOAST) plus the
    write requests Temporal's persistence served (a request may write several rows of its own
    store: the units differ, said where shown); ``bytes_written`` = the sum of every server's
    ``bytes_written`` (Postgres: pg_stat_io; Temporal: what the kernel charged its process; None
    unless every server the run used has it); ``stores``: those servers. ``statements``: totals of
    ``statements.parquet`` by source. ``bloat``: per relation,
    pgstattuple beside n_dead_tup, and totals over tables and TOAST tables apart."""
    servers = tables.get("servers") or {}
    row_writes = (tables.get("per_fire") or {}).get("row_writes")
    durable = None
    if "temporal" in servers:
        tw = servers["temporal"]["per_fire"].get("persistence_writes")
        durable = None if tw is None else (row_writes or 0.0) + tw
        if tw is None:
            unavailable.setdefault("temporal_metrics", "the Temporal server's metrics were not scraped")
    elif "postgres" in servers or row_writes is not None:
        durable = row_writes
    written = [srv["per_fire"].get("bytes_written") for srv in servers.values()]
    bill = {
        "durable_writes": durable,
        "bytes_written": float(sum(written)) if written and all(w is not None for w in written) else None,
        "stores": sorted(servers),
    }
    statements = None
    table = read_statements(run_dir)
    if table is not None:
        df = table.to_pandas()
        statements = {"count": int(len(df))}
        for source in ("design", "sampler"):
            part = df[df["source"] == source]
            statements[source] = {
                "statements": int(len(part)),
                "calls": float(part["calls"].sum()),
                "exec_ms": float(part["total_exec_ms"].sum()),
                "wal_bytes": float(part["wal_bytes"].sum()),
                "shared_blks_dirtied": float(part["shared_blks_dirtied"].sum()),
            }
    bloat = None
    relations = read_bloat(run_dir)
    if relations is not None:
        for r in relations:
            r["disagree"] = dead_tuples_disagree(r.get("dead_tuple_count"), r.get("n_dead_tup"))

        def total(key: str, toast: bool) -> float | None:
            vals = [r.get(key) for r in relations if str(r.get("scope", "")).endswith(TOAST_SUFFIX) == toast]
            vals = [float(v) for v in vals if v is not None and not (isinstance(v, float) and math.isnan(v))]
            return float(sum(vals)) if vals else None

        bloat = {
            "relations": relations,
            "dead_tuples_exact": total("dead_tuple_count", False),
            "dead_tuples_exact_toast": total("dead_tuple_count", True),
            "n_dead_tup": total("n_dead_tup", False),
            "n_dead_tup_toast": total("n_dead_tup", True),
            "dead_bytes": (total("dead_tuple_len", False) or 0.0) + (total("dead_tuple_len", True) or 0.0),
            "free_bytes": (total("free_space", False) or 0.0) + (total("free_space", True) or 0.0),
            "disagree": [r["scope"] for r in relations if r["disagree"]],
        }
    return {"bill": bill, "statements": statements, "bloat": bloat}


def cost_warnings(window: dict[str, Any], tables: dict[str, Any], costs: dict[str, Any]) -> list[str]:
    out = []
    bloat = costs.get("bloat") or {}
    for r in bloat.get("relations") or []:
        if r.get("disagree"):
            exact, est = float(r["dead_tuple_count"]), float(r["n_dead_tup"])
            out.append(
                f"dead tuples of {r['scope']} at the end: pgstattuple counts {exact:,.0f} still taking space, "
                f"the statistics' n_dead_tup says {est:,.0f} (off by more than {DEAD_TUPLE_DISAGREE:.0%}); "
                f"n_dead_tup is an estimate that also counts dead line pointers page pruning already "
                f"emptied (they wait for VACUUM), so the sampled dead-tuple figures of this table are "
                f"not the space dead rows take"
            )
    cp = window.get("checkpoint") or {}
    when = "at the start of the warm-up" if cp.get("mode") == "warmup" else "before the measured window"
    if cp.get("mode") == "off":
        out.append(
            "no CHECKPOINT forced (--checkpoint off); the window's full-page images depend on when the "
            "server last checkpointed"
        )
    elif cp.get("error"):
        out.append(
            f"no CHECKPOINT {when} ({cp['error']}); the window's full-page images "
            f"depend on when the server last checkpointed"
        )
    elif (
        cp.get("finished_at") is not None
        and window.get("measure_start") is not None
        and cp["finished_at"] > window["measure_start"]
    ):
        out.append(
            f"the CHECKPOINT {when} finished {cp['finished_at'] - window['measure_start']:.1f} s "
            f"into the measured window; its writes count in the window"
        )
    elif cp.get("mode") == "warmup":
        out.append(
            "the CHECKPOINT ran at the start of the warm-up (--checkpoint warmup): pages first written "
            "in the warm-up paid their full-page image there, so the window's full-page images are fewer "
            "than after a checkpoint at its start"
        )
    checkpoints = ((tables.get("servers") or {}).get("postgres") or {}).get("window", {}).get("checkpoints")
    if checkpoints:
        out.append(
            f"{checkpoints:.0f} checkpoint(s) completed inside the measured window (server-wide); full-page "
            f"images and bytes written include theirs"
        )
    return out
