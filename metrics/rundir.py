"""The run directory: the one place that knows its format, for writers, reports and tests.

``runs/<YYYYmmdd-HHMMSS>-<scheduler>/`` holds:

``config.json``
    ``scheduler``, ``options`` (resolved), ``capabilities`` (what the design promises with them:
    ``max_lag_s`` ...), ``workload`` (resolved, every field),
    ``environment`` (python, platform, cpus, memory_bytes, postgres_version,
    postgres_settings, temporal_version, timerbench_version, git_commit), ``dsn`` (no password),
    ``temporal_address``, ``started_at``, ``argv``, ``window`` and ``load``. ``window``:
    ``arm_start``, ``measure_start``, ``measure_end`` (epoch s; ``measure_end`` is where an
    interrupted run stopped), ``drain_limit_s`` and ``drained_s`` (after the window closes,
    arming stops and the run drains until every fire due before ``measure_end`` has arrived, or
    ``drain_limit_s`` has passed; ``drain_ended`` says why when it stopped earlier: nothing
    arrived for a while and the backend held none of the missing fires), ``undelivered_before``
    (fires due before it that never arrived are rows of ``fires.parquet``) and ``held_asked``
    (whether the backend said what it still holds). ``load``: what the load generator did beyond the fire log:
    ``periodic_triggers``, ``interval_max_s``, ``skipped_periods`` (fixed cadence: grid times a
    trigger jumped over because its fire was more than one interval late) and
    ``skipped_periods_in_window``.
``segments/`` (while the run runs; gone once it finishes)
    The fire log and the samples as the run writes them, in **closed segments**: each
    ``fires-run.<seq>.parquet`` / ``samples.<seq>.parquet`` is a complete Parquet file written
    whole and renamed into place (a reader never sees half of one), ``late-run.npy`` lists the
    rows (numbered across the fire segments) whose effect was committed after their segment was
    written, ``late-external-run.npy`` those whose external effect was noted after it. A run
    killed with SIGKILL keeps every segment it closed: fire segments hold rows at
    least :data:`metrics.recorder.FLUSH_AFTER_S` old and close every
    :data:`metrics.recorder.SEGMENT_EVERY_S`, so a kill costs at most the last ~8 s of fires
    (5 + 2 + the 1 s flush tick) and the last :data:`metrics.sampler.SEGMENT_EVERY_SAMPLES` s of
    samples. A run that finishes compacts them into ``fires.parquet`` and ``samples.parquet``.
``run.lock``
    Held (``flock``) by the run process while it runs: a directory without ``summary.json``
    whose lock nobody holds was interrupted (:func:`run_state`).
``fires.parquet``
    One row per fire received by the polling processor (:data:`FIRES_SCHEMA`), including those
    received while draining after ``measure_end`` (outside the window), and one row per
    **undelivered** fire (armed, due before ``undelivered_before``, never received): ``fired_at``
    and ``lag_s`` null, ``attempt`` 0, ``batch`` -1, and ``held_at_end`` True when the backend
    still held it after the drain (pending), False when it did not (lost), null when it could not
    be asked. ``warmup`` is true when the fire was received (an undelivered one: due) before
    ``measure_start``; ``external_effect`` is true when the processor performed its external
    effect for that delivery.
``samples.parquet``
    Long format (:data:`SAMPLES_SCHEMA`): scope ``run`` for run-wide metrics, else a relation
    ``schema.table`` or its TOAST table ``schema.table#toast``, or ``server:<name>`` for what a server
    the run uses paid (:func:`server_scope`; see :mod:`metrics.stores` and :mod:`metrics.pgcost`).
    A backend's ``stats()`` gauges
    are run-scope metrics ``backend.<name>``; among them a backend that counts its batches
    (temporal_shards) records the batch-size distribution as cumulative counters, read for a
    window by :func:`batch_sizes_in_window` (no per-batch file: nothing to gather from nodes).
``statements.parquet``
    ``pg_stat_statements`` over the measured window, one row per statement
    (:data:`STATEMENTS_SCHEMA`); absent when the server does not let us read it (the reason is in
    ``config.json``'s ``measurement.unavailable``).
``bloat.json``
    At the end of the run, ``pgstattuple`` of every table the design owns and of its TOAST table,
    beside ``n_dead_tup`` read at the same moment (:func:`write_bloat`).
``summary.json``
    :func:`compute_summary` of the files above. A directory without one (the run was
    killed) is read from its segments: :func:`read_fires` and :func:`read_samples` fall back to
    them, and :func:`interrupted_summary` recomputes the figures, marked incomplete.
``faults.json`` (``--fault``), ``migration.json`` (``bench migrate dry-run``), ``locust_*`` (``--arm-load``)
    and ``nodes/`` (``--nodes``: what each node recorded, see :mod:`metrics.parts`); a sweep
    directory holds ``sweep.json`` beside its runs. Every name is a constant or a function below.

Readers go through :func:`read_fires` / :func:`read_samples`, which read the compacted file
when there is one and otherwise every complete segment (the run's own and, with ``--nodes``,
every node's parts under ``nodes/``).

**The four outcomes** (:func:`fire_accounting`, docs/design.md, "Measuring honestly"). A fire is due in
the window when ``max(due_at, armed_at)`` (when it became due in the store, where the lag clock
starts) lies in ``[measure_start, measure_end)``. Each ``(timer_id, due_at)`` key due in the
window is exactly one of: **on time** (first delivery's lag <= the workload's ``on_time_s``),
**late** (delivered later, with its real lag), **pending** (never delivered, still held by the
backend after the drain: a backlog) or **lost** (never delivered and no longer held: a failing
run). Lag percentiles cover every key due in the window; an undelivered one is infinitely late,
so a percentile that falls among them is :data:`NOT_DELIVERED`. A delivery before its due time
is **early** (counted, its negative lag kept). The offered rate is the keys due in the window per
second; the achieved rate the keys first delivered in the window per second.

Windows: performance figures (rates, lag, per-fire writes, HOT ratio) cover the measured window
only; correctness figures (lost, early, duplicate fires, duplicate effects) cover the whole run,
warm-up included, because a lost or doubled fire is never a warm-up artefact.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

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
SEGMENTS_DIR = "segments"  # the fire log and samples in closed segments, while the run runs
RUN_LOG = "run"  # the run process's own fire log in segments/ (nodes' logs are named by worker id)
RUN_LOCK = "run.lock"  # flock'ed by the live run process
STATEMENTS = "statements.parquet"  # pg_stat_statements over the measured window (metrics.pgcost)
BLOAT = "bloat.json"  # pgstattuple at the end of the run beside n_dead_tup (metrics.pgcost)


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


def fire_segment(directory: Path, log: str, seq: int) -> Path:
    """One closed segment of a fire log: ``log`` is ``run`` (the run process, under
    ``segments/``) or a node's worker id (under ``nodes/``). Written whole, so a killed writer
    keeps every segment it closed."""
    return directory / f"fires-{log}.{seq:05d}.parquet"


def fire_segments(directory: Path) -> dict[str, list[Path]]:
    """Every fire log's closed segments in ``directory``, by log name, in write order."""
    found: dict[str, list[tuple[int, Path]]] = {}
    for p in directory.glob("fires-*.*.parquet"):
        log, _, seq = p.name[len("fires-") : -len(".parquet")].rpartition(".")
        if log and seq.isdigit():
            found.setdefault(log, []).append((int(seq), p))
    return {log: [p for _, p in sorted(items)] for log, items in sorted(found.items())}


def late_effects(directory: Path, log: str, column: str = "effect_delivered") -> Path:
    """Rows (numbered across a fire log's segments) whose effect was committed
    (``effect_delivered``), or whose external effect happened (``external_effect``), after they
    were written."""
    return directory / (f"late-{log}.npy" if column == "effect_delivered" else f"late-external-{log}.npy")


def samples_segment(directory: Path, seq: int) -> Path:
    return directory / f"samples.{seq:05d}.parquet"


def samples_segments(directory: Path) -> list[Path]:
    found = []
    for p in directory.glob("samples.*.parquet"):
        seq = p.name[len("samples.") : -len(".parquet")]
        if seq.isdigit():
            found.append((int(seq), p))
    return [p for _, p in sorted(found)]


def write_parquet_atomic(table: pa.Table, path: Path, compression: str | None = "zstd") -> None:
    """Write ``table`` whole beside ``path`` and rename it into place: readers (and a writer
    killed mid-way) never leave or see half a file."""
    tmp = path.with_name(path.name + ".tmp")
    pq.write_table(table, tmp, compression=compression)
    os.replace(tmp, path)


def save_rows_atomic(rows: np.ndarray, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        np.save(f, np.asarray(rows, np.int64))
    os.replace(tmp, path)


FIRES_SCHEMA = pa.schema(
    [
        ("timer_id", pa.string()),
        ("tenant_id", pa.string()),
        ("type", pa.string()),
        ("due_at", pa.float64()),  # epoch seconds
        ("armed_at", pa.float64()),
        ("fired_at", pa.float64()),  # null: never delivered
        ("lag_s", pa.float64()),  # fired_at - max(due_at, armed_at); null: never delivered
        ("attempt", pa.int32()),
        ("worker", pa.string()),
        ("batch", pa.int64()),
        ("effect_delivered", pa.bool_()),
        ("warmup", pa.bool_()),
        ("external_effect", pa.bool_()),  # the processor's external effect (a webhook) happened
        ("held_at_end", pa.bool_()),  # undelivered rows: still held (pending) / not (lost); else null
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

STATEMENTS_SCHEMA = pa.schema(
    [
        ("queryid", pa.int64()),
        ("query", pa.string()),  # normalised text, as pg_stat_statements keeps it
        ("source", pa.string()),  # "design" or "sampler" (the harness's own statements)
        ("calls", pa.float64()),
        ("rows", pa.float64()),
        ("total_exec_ms", pa.float64()),
        ("total_plan_ms", pa.float64()),
        ("shared_blks_hit", pa.float64()),
        ("shared_blks_read", pa.float64()),
        ("shared_blks_dirtied", pa.float64()),
        ("shared_blks_written", pa.float64()),
        ("wal_records", pa.float64()),
        ("wal_fpi", pa.float64()),
        ("wal_bytes", pa.float64()),
        ("mean_exec_ms", pa.float64()),
    ]
)

RATE_HELD_SHARE = 0.95  # achieved below 95% of offered, or offered below 95% of target: rate not held
NOT_DELIVERED = "not delivered"  # a lag percentile that falls among fires never delivered
EARLY_TOLERANCE_S = 0.001  # a delivery this much before its due time is early (microsecond rounding, one clock)
STEADY_STATE_CYCLES = 2.0  # fires due per trigger in the window, at least, for a steady-state window
PERCENTILES = (("p50", 50.0), ("p90", 90.0), ("p99", 99.0), ("p999", 99.9))
EXIT_INCORRECT = 4  # bench run's exit code when a complete run lost a fire or duplicated a keyed effect
TOAST_SUFFIX = "#toast"
SERVER_PREFIX = "server:"
# pgstattuple and n_dead_tup disagree when they differ by more than this share of the larger,
# once either counts at least DEAD_TUPLE_FLOOR (a handful of tuples either way is not news).
DEAD_TUPLE_DISAGREE = 0.20
DEAD_TUPLE_FLOOR = 100
PAGE_BYTES = 8192


def server_scope(name: str) -> str:
    """The samples' scope of what server ``name`` paid (``server:postgres``)."""
    return SERVER_PREFIX + name


def is_relation_scope(scope: str) -> bool:
    """A table (``schema.table``) or its TOAST table, not ``run`` nor a server."""
    return scope != "run" and not scope.startswith(SERVER_PREFIX)


BACKEND_GAUGE = "backend."  # a stats() gauge in the samples: scope "run", metric "backend.<name>"
# The batch-size gauges schedulers.base.BatchSizes writes (named again here: a report never
# imports schedulers; tests/unit/test_shard_sizing.py holds the two equal).
BATCH_SIZE_BIN_GAUGE = "batch_size_bin_"  # + upper edge: batches of (edge - width, edge] timers
BATCHES_CLOSED_GAUGE = "batches_closed_"  # + reason
BATCH_BIN_WIDTH_GAUGE = "batches_bin_width"  # timers


def batch_sizes_in_window(samples: Any, start: float, end: float) -> dict[str, Any] | None:
    """The batches a backend handed to its processors between ``start`` and ``end`` (epoch s),
    from its cumulative batch-size gauges (:class:`schedulers.base.BatchSizes`) in the samples
    (a data frame with ``t, scope, metric, value``): each counter's last sample at or before
    ``end`` less its last at or before ``start`` (0 before its first sample).

    Returns ``{"batches", "timers", "mean", "bins": {upper edge: batches}, "closed": {reason:
    batches}, "bin_width"}`` (bin width in timers) or None when the run has no such gauges (a backend that does not
    count its batches, or a run whose batches ran in ``--nodes`` processes)."""
    if samples is None or len(samples) == 0:
        return None
    t = np.asarray(samples["t"], dtype="float64")
    scope = np.asarray(samples["scope"], dtype=object)
    metric = np.asarray(samples["metric"], dtype=object)
    value = np.asarray(samples["value"], dtype="float64")
    run = scope == "run"
    wanted = (f"{BACKEND_GAUGE}batches", f"{BACKEND_GAUGE}batched_timers", f"{BACKEND_GAUGE}{BATCH_BIN_WIDTH_GAUGE}")
    prefixes = (f"{BACKEND_GAUGE}{BATCH_SIZE_BIN_GAUGE}", f"{BACKEND_GAUGE}{BATCHES_CLOSED_GAUGE}")
    names = {m for m in set(metric[run].tolist()) if m in wanted or m.startswith(prefixes)}
    if f"{BACKEND_GAUGE}batches" not in names:
        return None

    def delta(name: str) -> float:
        sel = run & (metric == name)
        ts, vs = t[sel], value[sel]
        order = np.argsort(ts, kind="stable")
        ts, vs = ts[order], vs[order]
        i_end = np.searchsorted(ts, end, side="right") - 1
        i_start = np.searchsorted(ts, start, side="right") - 1
        at_end = vs[i_end] if i_end >= 0 else 0.0
        at_start = vs[i_start] if i_start >= 0 else 0.0
        return float(at_end - at_start)

    bins = {int(n[len(prefixes[0]) :]): delta(n) for n in names if n.startswith(prefixes[0])}
    closed = {n[len(prefixes[1]) :]: delta(n) for n in names if n.startswith(prefixes[1])}
    batches = delta(wanted[0])
    timers = delta(wanted[1])
    widths = value[run & (metric == wanted[2])]
    return {
        "batches": batches,
        "timers": timers,
        "mean": timers / batches if batches > 0 else None,
        "bins": {edge: n for edge, n in sorted(bins.items()) if n > 0},
        "closed": {reason: n for reason, n in sorted(closed.items()) if n > 0},
        "bin_width": float(widths[-1]) if len(widths) else None,
    }


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


def conform_fires(table: pa.Table) -> pa.Table:
    """A fire log in :data:`FIRES_SCHEMA`: columns a run directory written before they existed
    get their writers' default (no external effect; ``held_at_end`` not asked)."""
    for name in ("external_effect", "held_at_end"):
        if name not in table.column_names:
            fill = pa.array([False] * len(table)) if name == "external_effect" else pa.nulls(len(table), pa.bool_())
            table = table.append_column(name, fill)
    return table.select(FIRES_SCHEMA.names).cast(FIRES_SCHEMA)


def read_fires(run_dir: str | Path) -> pa.Table:
    """The fire log: ``fires.parquet`` once the run compacted it, else every closed segment."""
    path = Path(run_dir) / FIRES
    if path.exists():
        return conform_fires(pq.read_table(path))
    return read_segmented_fires(run_dir)


def read_samples(run_dir: str | Path) -> pa.Table:
    """The samples: ``samples.parquet`` once the run compacted them, else every closed segment."""
    path = Path(run_dir) / SAMPLES
    if path.exists():
        return pq.read_table(path)
    return read_segmented_samples(run_dir)


def _fire_log(parts: list[Path], directory: Path, log: str) -> pa.Table:
    """One writer's fire log: its segments in order, with the effects committed (and external
    effects noted) after a segment was written set from its ``late`` files."""
    t = pa.concat_tables([conform_fires(pq.read_table(p)) for p in parts])
    for column in ("effect_delivered", "external_effect"):
        late = late_effects(directory, log, column)
        if late.exists() and len(t):
            rows = np.load(late)
            rows = rows[(rows >= 0) & (rows < len(t))]  # a row beyond the last segment died with its writer
            if len(rows):
                flags = t.column(column).to_numpy(zero_copy_only=False).copy()
                flags[rows] = True
                t = t.set_column(t.schema.get_field_index(column), column, pa.array(flags))
    return t


def read_segmented_fires(run_dir: str | Path) -> pa.Table:
    """Every closed fire segment of a run: its own (``segments/``) and its nodes' (``nodes/``).

    A node has no measured window, so its rows' ``warmup`` is re-derived from the run's
    ``measure_start``."""
    import pyarrow.compute as pc

    run_dir = Path(run_dir)
    tables = []
    seg = run_dir / SEGMENTS_DIR
    if seg.is_dir():
        tables += [_fire_log(parts, seg, log) for log, parts in fire_segments(seg).items()]
    nodes = run_dir / NODES_DIR
    if nodes.is_dir():
        logs = fire_segments(nodes)
        if logs:
            try:
                measure_start = float(read_config(run_dir)["window"]["measure_start"])
            except (OSError, ValueError, KeyError, TypeError):
                measure_start = -math.inf
            for log, parts in logs.items():
                t = _fire_log(parts, nodes, log)
                warm = pc.less(t.column("fired_at"), pa.scalar(measure_start, pa.float64()))
                tables.append(t.set_column(t.schema.get_field_index("warmup"), "warmup", warm))
    return pa.concat_tables(tables) if tables else FIRES_SCHEMA.empty_table()


def read_segmented_samples(run_dir: str | Path) -> pa.Table:
    seg = Path(run_dir) / SEGMENTS_DIR
    parts = samples_segments(seg) if seg.is_dir() else []
    if not parts:
        return SAMPLES_SCHEMA.empty_table()
    return pa.concat_tables([pq.read_table(p).cast(SAMPLES_SCHEMA) for p in parts])


def write_samples_segment(directory: Path, seq: int, columns: dict[str, list]) -> None:
    table = pa.table({name: columns[name] for name in SAMPLES_SCHEMA.names}, schema=SAMPLES_SCHEMA)
    write_parquet_atomic(table, samples_segment(directory, seq))


def compact(run_dir: str | Path, undelivered: pa.Table | None = None) -> int:
    """A finishing run's segments (and its nodes' parts) become ``fires.parquet`` (with the
    ``undelivered`` rows, ordered by ``fired_at``, undelivered last) and ``samples.parquet``; then
    ``segments/`` goes. Each file is renamed into place whole, and the segments are removed only
    after both exist, so a kill at any point leaves a readable directory. Returns the fire rows."""
    import pyarrow.compute as pc

    run_dir = Path(run_dir)
    fires = read_segmented_fires(run_dir)
    if undelivered is not None and len(undelivered):
        fires = pa.concat_tables([fires, undelivered.cast(FIRES_SCHEMA)])
    if len(fires):
        order = pc.sort_indices(fires, sort_keys=[("fired_at", "ascending")])  # nulls (undelivered) last
        fires = fires.take(order)
    write_parquet_atomic(fires, run_dir / FIRES)
    write_parquet_atomic(read_segmented_samples(run_dir), run_dir / SAMPLES)
    shutil.rmtree(run_dir / SEGMENTS_DIR, ignore_errors=True)
    return len(fires)


# -- is the run still running? ------------------------------------------------------------------


def hold_run_lock(run_dir: Path) -> int:
    """Mark ``run_dir`` as live for as long as this process holds the returned descriptor (the
    kernel lets go when the process dies, however it dies)."""
    fd = os.open(run_dir / RUN_LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return fd


def release_run_lock(run_dir: Path, fd: int) -> None:
    try:
        (run_dir / RUN_LOCK).unlink()
    except OSError:
        pass
    os.close(fd)


def run_state(run_dir: str | Path) -> str:
    """``finished`` (it wrote ``summary.json``), ``running`` (its process holds ``run.lock``) or
    ``interrupted`` (neither: it was killed, or its machine went down)."""
    run_dir = Path(run_dir)
    if (run_dir / SUMMARY).exists():
        return "finished"
    try:
        fd = os.open(run_dir / RUN_LOCK, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return "interrupted"
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return "running"
    except OSError:
        return "interrupted"
    finally:
        os.close(fd)
    return "interrupted"


def recorded_until(fires: pa.Table, samples: pa.Table) -> tuple[float | None, float | None]:
    """The last fire received and the last sample taken (epoch s; None when there is none)."""
    import pyarrow.compute as pc

    last_fire = pc.max(fires.column("fired_at")).as_py() if len(fires) else None
    last_sample = pc.max(samples.column("t")).as_py() if len(samples) else None
    return last_fire, last_sample


def interrupted_summary(run_dir: str | Path, state: str | None = None) -> dict[str, Any]:
    """The summary of a run without ``summary.json``, recomputed from what it recorded: marked
    incomplete, its window cut where its fire log ends, its undelivered fires (pending or lost)
    not judged."""
    run_dir = Path(run_dir)
    state = state or run_state(run_dir)
    cfg = read_config(run_dir)
    window = cfg.get("window") or {}
    start = float(window.get("arm_start", cfg.get("started_at") or 0.0))
    last_fire, last_sample = recorded_until(read_fires(run_dir), read_samples(run_dir))
    known = [x for x in (last_fire, last_sample) if x is not None]
    if not known:
        reason = f"{state} before it recorded anything (no {SUMMARY})"
        return compute_summary(run_dir, complete=False, incomplete_reason=reason, stopped_at=start)
    at = f"T+{max(known) - start:.0f} s"
    if state == "running":
        reason = f"still running: {at} recorded so far (no {SUMMARY} yet)"
    else:
        reason = f"interrupted at {at} (no {SUMMARY}: figures recomputed from what it recorded)"
    return compute_summary(
        run_dir,
        complete=False,
        incomplete_reason=reason,
        stopped_at=last_fire if last_fire is not None else last_sample,
    )


def write_statements(run_dir: str | Path, columns: dict[str, list]) -> None:
    table = pa.table({name: columns[name] for name in STATEMENTS_SCHEMA.names}, schema=STATEMENTS_SCHEMA)
    tmp = Path(run_dir) / (STATEMENTS + ".tmp")
    pq.write_table(table, tmp)
    os.replace(tmp, Path(run_dir) / STATEMENTS)


def read_statements(run_dir: str | Path) -> pa.Table | None:
    """The window's statements, or None when the run could not read them."""
    path = Path(run_dir) / STATEMENTS
    return pq.read_table(path) if path.exists() else None


def write_bloat(run_dir: str | Path, relations: list[dict[str, Any]]) -> None:
    """One entry per relation (``scope``, pgstattuple's columns, ``n_dead_tup``, ``n_live_tup``)."""
    write_json(Path(run_dir) / BLOAT, {"relations": relations})


def read_bloat(run_dir: str | Path) -> list[dict[str, Any]] | None:
    path = Path(run_dir) / BLOAT
    if not path.exists():
        return None
    return list(json.loads(path.read_text()).get("relations") or [])


def dead_tuples_disagree(exact: float | None, estimate: float | None) -> bool:
    """True when n_dead_tup is off pgstattuple's exact count by more than
    :data:`DEAD_TUPLE_DISAGREE` of the larger (and either is at least :data:`DEAD_TUPLE_FLOOR`)."""
    if exact is None or estimate is None or math.isnan(exact) or math.isnan(estimate):
        return False
    larger = max(exact, estimate)
    return larger >= DEAD_TUPLE_FLOOR and abs(exact - estimate) > DEAD_TUPLE_DISAGREE * larger


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


def how_to_read(summary: dict[str, Any]) -> str:
    """Two or three sentences on the cadence, the window and the four outcomes of a run, for the
    end-of-run table and the report (README says the same)."""
    on_time = summary.get("on_time_s") or 10.0
    if summary.get("cadence") == "after-poll":
        load = (
            "Load is closed-loop (after-poll cadence: next due = poll end + interval), so a lagging backend "
            "is offered fewer fires; the offered rate shows by how much."
        )
    else:
        load = (
            "Load is open-loop (fixed cadence: next due = previous due + interval; a fire more than one "
            "interval late fires once and realigns, the skipped periods counted), so a slow backend falls "
            "behind instead of being offered less."
        )
    warm = summary.get("warmup_s")
    warm_text = "a warm-up" if warm is None else f"a {warm:g} s warm-up"
    return (
        f"{load} The window counts every fire that became due in it, after {warm_text} (by default one "
        f"maximum interval, so every trigger has re-armed); then arming stops and the run drains. "
        f"Each of those fires is on time (lag <= "
        f"{on_time:g} s, one bound for every backend), late (delivered later, with its real lag), pending "
        f"(still held by the backend after the drain: a backlog) or lost (never delivered and no longer "
        f"held: the run fails); lag percentiles cover all of them, an undelivered fire as infinitely late."
    )


def lag_percentiles_ms(lags_s: np.ndarray) -> dict[str, float | str | None]:
    """Nearest-rank percentiles (and the max) of lags in seconds, in ms; ``inf`` is a fire never
    delivered and reads :data:`NOT_DELIVERED`; None for no fires at all. Exact (no histogram), so
    an early fire's negative lag stays negative."""
    v = np.sort(np.asarray(lags_s, dtype=np.float64))
    out: dict[str, float | str | None] = {}
    for key, pct in (*PERCENTILES, ("max", 100.0)):
        if len(v) == 0:
            out[key] = None
            continue
        x = float(v[max(0, int(math.ceil(pct / 100.0 * len(v))) - 1)])
        out[key] = x * 1000.0 if math.isfinite(x) else NOT_DELIVERED
    return out


def _column(fires: pa.Table, name: str, dtype) -> np.ndarray:
    if len(fires) == 0:
        return np.zeros(0, dtype)
    return fires.column(name).to_numpy(zero_copy_only=False).astype(dtype)


def fire_accounting(fires: pa.Table, measure_start: float, measure_end: float, on_time_s: float) -> dict[str, Any]:
    """Outcomes, rates' numerators and lag of the fires due in ``[measure_start, measure_end)``,
    and the whole run's correctness counts, from ``fires.parquet`` alone (see the module
    docstring). Pure: the tests recompute every figure with it and without it."""
    import pandas as pd

    n = len(fires)
    fired_at = _column(fires, "fired_at", np.float64)  # null (never delivered) reads as NaN
    due = _column(fires, "due_at", np.float64)
    armed = _column(fires, "armed_at", np.float64)
    lag = _column(fires, "lag_s", np.float64)
    attempt = _column(fires, "attempt", np.int64)
    effect = _column(fires, "effect_delivered", bool)
    external = _column(fires, "external_effect", bool)
    held = np.asarray(fires.column("held_at_end").to_pylist(), dtype=object) if n else np.zeros(0, object)
    ids = np.asarray(fires.column("timer_id").to_pylist(), dtype=object) if n else np.zeros(0, object)
    delivered = ~np.isnan(fired_at)
    due_us = np.rint(due * 1e6).astype(np.int64) if n else np.zeros(0, np.int64)

    # one row per (timer_id, due_at): its first delivery, or its undelivered row
    df = pd.DataFrame(
        {"id": ids, "due_us": due_us, "fired": fired_at, "lag": lag, "due_eff": np.fmax(due, armed), "held": held}
    )
    first = df.sort_values("fired", na_position="last", kind="stable").drop_duplicates(["id", "due_us"])
    got = first["fired"].notna().to_numpy()
    due_eff = first["due_eff"].to_numpy()
    key_lag = np.where(got, first["lag"].to_numpy(), np.inf)
    key_held = first["held"].to_numpy()
    in_window = (due_eff >= measure_start) & (due_eff < measure_end)
    before_window = due_eff < measure_start
    w_lag = key_lag[in_window]
    w_got = got[in_window]
    w_held = key_held[in_window]
    late = w_got & (w_lag > on_time_s)
    not_held = np.array([h is False for h in w_held], bool)
    unknown = np.array([h is None for h in w_held], bool) & ~w_got
    first_fired = first["fired"].to_numpy()
    outcomes = {
        "due": int(in_window.sum()),
        "on_time": int((w_got & ~late).sum()),
        "late": int(late.sum()),
        "pending": int((~w_got & ~not_held).sum()),
        "lost": int((~w_got & not_held).sum()),
    }
    warm_held = key_held[before_window & ~got]
    return {
        "outcomes": outcomes,
        "undelivered_unjudged": int(unknown.sum()),
        "lost_in_warmup": int(sum(1 for h in warm_held if h is False)),
        "pending_from_warmup": int(sum(1 for h in warm_held if h is not False)),
        "lag_ms": lag_percentiles_ms(w_lag),
        "delivered_in_window": int(((first_fired >= measure_start) & (first_fired < measure_end)).sum()),
        "early": int((delivered & (lag < -EARLY_TOLERANCE_S)).sum()),
        "redelivered_fires": int((delivered & (attempt > 1)).sum()),
        "duplicate_fires": duplicates(ids[delivered], due[delivered]),
        "duplicate_effects": duplicates(ids[effect], due[effect]),
        "external_effects": int(external.sum()),
        "duplicate_external_effects": duplicates(ids[external], due[external]),
    }


def rate_held(target: float | None, offered: float | None, achieved: float | None) -> tuple[bool | None, list[str]]:
    """(held, why not): the achieved rate against the offered one **and** the offered rate
    against the target, each at :data:`RATE_HELD_SHARE`. None when a rate is unknown."""
    if not target or offered is None or achieved is None:
        return None, []
    why = []
    if offered < RATE_HELD_SHARE * target:
        why.append(f"offered {offered:.1f} fires/s, {100 * offered / target:.0f}% of the target {target:.1f} fires/s")
    if achieved < RATE_HELD_SHARE * offered:
        why.append(
            f"achieved {achieved:.1f} fires/s, {100 * achieved / offered:.0f}% of the {offered:.1f} fires/s offered"
        )
    return not why, why


def compute_summary(
    run_dir: str | Path,
    complete: bool = True,
    incomplete_reason: str | None = None,
    stopped_at: float | None = None,
) -> dict[str, Any]:
    """The summary, recomputed from ``config.json``, ``fires.parquet`` and ``samples.parquet``.

    ``stopped_at``: the run was killed and its records end there (:func:`interrupted_summary`):
    the window is cut at that moment, and unless the run wrote its undelivered fires, whether any
    fire was pending or lost is not judged (those counts and the offered rate are None, the lag
    percentiles cover the delivered fires only, and say so): a killed run never compared what it
    armed with what fired, nor asked the backend what it still held."""
    run_dir = Path(run_dir)
    cfg = read_config(run_dir)
    window = cfg.get("window", {})
    workload = cfg.get("workload", {})
    load = cfg.get("load") or {}
    measure_start = float(window.get("measure_start", 0.0))
    measure_end = float(window.get("measure_end", measure_start))
    if stopped_at is not None:  # (just past it, so that its last batch counts)
        measure_end = max(measure_start, min(measure_end, float(np.nextafter(float(stopped_at), math.inf))))
    arm_start = float(window.get("arm_start", measure_start))
    measured_s = max(0.0, measure_end - measure_start)
    warmup_s = max(0.0, measure_start - arm_start)
    on_time_s = float(workload.get("on_time_s") or 10.0)

    fires = read_fires(run_dir)
    acc = fire_accounting(fires, measure_start, measure_end, on_time_s)
    outcomes = acc["outcomes"]
    n_fires = acc["delivered_in_window"]
    # killed before it wrote its undelivered fires: pending and lost are not judged, not zero
    judged = stopped_at is None or bool(len(fires)) and fires.column("fired_at").null_count > 0
    if not judged:  # (lag percentiles then cover the delivered fires due in the window only)
        outcomes = {**outcomes, "due": None, "pending": None, "lost": None}
        acc = {**acc, "lost_in_warmup": None}

    samples = read_samples(run_dir)
    tables = _table_figures(samples, measure_start, measure_end, n_fires)
    measurement = cfg.get("measurement") or {}
    unavailable = dict(measurement.get("unavailable") or {})
    costs = cost_figures(run_dir, tables, n_fires, unavailable)

    target = workload.get("rate_per_s")
    achieved = n_fires / measured_s if measured_s > 0 else None
    offered = outcomes["due"] / measured_s if measured_s > 0 and outcomes["due"] is not None else None
    held, not_held = rate_held(target, offered, achieved)
    claim_rate = _run_metric_mean(samples, "claims_per_s", measure_start, measure_end)

    triggers = load.get("periodic_triggers")
    if triggers is None and workload.get("triggers"):
        triggers = float(workload["triggers"]) * (1.0 - float(workload.get("long_horizon_share") or 0.0))
    cycles = outcomes["due"] / float(triggers) if triggers and outcomes["due"] is not None else None
    interval_max_s = load.get("interval_max_s", workload.get("interval_max_s"))
    not_steady = []
    if cycles is not None and cycles < STEADY_STATE_CYCLES:
        not_steady.append(
            f"{cycles:.2f} cycles per trigger in the window (steady state needs >= {STEADY_STATE_CYCLES:g})"
        )
    if interval_max_s is not None and warmup_s < float(interval_max_s) - 1e-6:
        not_steady.append(
            f"warm-up {warmup_s:.1f} s is shorter than the longest interval ({float(interval_max_s):.1f} s): "
            f"some triggers had not re-armed when the window opened"
        )
    skipped = load.get("skipped_periods_in_window")

    lost = (outcomes["lost"] or 0) + (acc["lost_in_warmup"] or 0)
    failures = []
    if lost:
        failures.append(f"{lost:,} fires lost (due, never delivered, no longer held by the backend)")
    if acc["duplicate_effects"]:
        failures.append(
            f"{acc['duplicate_effects']:,} duplicate keyed effects (one (timer_id, due_at) committed twice)"
        )

    warnings: list[str] = []
    if not complete:
        warnings.append(f"incomplete run: {incomplete_reason or 'stopped early'}; figures cover what was recorded")
    for f in failures:
        warnings.append(f"FAILED: {f}")
    if not_held:
        text = "rate not held: " + "; ".join(not_held)
        if skipped:
            text += f" ({skipped:,} periods skipped: fires more than one interval late)"
        warnings.append(text)
    if not judged:
        warnings.append(
            "pending and lost fires not judged: the run was killed before it compared what it armed "
            "with what fired; its lag percentiles cover the delivered fires only"
        )
    if outcomes["pending"]:
        warnings.append(
            f"{outcomes['pending']:,} fires due in the window still pending after the "
            f"{float(window.get('drained_s') or 0):.0f} s drain (a backlog the backend still holds)"
        )
    if acc["undelivered_unjudged"]:
        warnings.append(
            f"lost not judged for {acc['undelivered_unjudged']:,} undelivered fires: the backend could not "
            f"say what it still holds (counted as pending)"
        )
    if acc["early"]:
        warnings.append(f"{acc['early']:,} fires delivered before their due time (early; lag kept negative)")
    if not_steady:
        warnings.append("not steady state: " + "; ".join(not_steady))
    if measured_s <= 0 and complete:
        warnings.append("empty measured window")

    return {
        "complete": bool(complete),
        "incomplete_reason": None if complete else (incomplete_reason or "stopped early"),
        "correct": not failures if judged or failures else None,
        "failures": failures,
        "scheduler": cfg.get("scheduler"),
        "workload_name": workload.get("name"),
        "cadence": workload.get("cadence", "after-poll"),
        "target_rate": target,
        "offered_rate": offered,
        "achieved_rate": achieved,
        "rate_held": held,
        "claim_rate": claim_rate,
        "measured_s": measured_s,
        "warmup_s": warmup_s,
        "drained_s": window.get("drained_s"),
        "cycles_per_trigger": cycles,
        "steady_state": None if cycles is None else not not_steady,
        "on_time_s": on_time_s,
        "outcomes": outcomes,
        "lost_in_warmup": acc["lost_in_warmup"],
        "skipped_periods": skipped,
        "lag_ms": acc["lag_ms"],
        "fires": n_fires,
        "early": acc["early"],
        "redelivered_fires": acc["redelivered_fires"],
        "duplicate_fires": acc["duplicate_fires"],
        "duplicate_effects": acc["duplicate_effects"],
        "external_effects": acc["external_effects"],
        "duplicate_external_effects": acc["duplicate_external_effects"],
        **tables,
        **costs,
        "harness": harness_cpu(cfg, measured_s, n_fires),
        "unavailable": unavailable,
        "warnings": warnings,
        # what the reader of the cost figures must know (they are shown as warnings in the
        # report), kept apart from the run's own problems above
        "measurement_notes": _cost_warnings(window, tables, costs),
    }


def harness_cpu(cfg: dict[str, Any], measured_s: float, fires: int) -> dict[str, Any] | None:
    """The run process's CPU over the measured window: seconds, cores (of one: the harness is one
    Python process, so 1.0 is its ceiling) and milliseconds per fire delivered in the window.
    ``claim_loops_in_process`` is False for ``--nodes`` runs, whose claim loops and simulated
    provider spend their CPU in the node processes instead."""
    window = cfg.get("window") or {}
    start, end = window.get("harness_cpu_start_s"), window.get("harness_cpu_end_s")
    if start is None or end is None or measured_s <= 0:
        return None
    cpu_s = max(0.0, float(end) - float(start))
    return {
        "cpu_s": round(cpu_s, 3),
        "cores": round(cpu_s / measured_s, 3),
        "cpu_ms_per_fire": round(1000 * cpu_s / fires, 4) if fires else None,
        "claim_loops_in_process": not window.get("nodes"),
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


def _sample_arrays(samples: pa.Table) -> dict[str, np.ndarray]:
    return {
        "t": samples.column("t").to_numpy(),
        "scope": np.asarray(samples.column("scope").to_pylist(), dtype=object),
        "metric": np.asarray(samples.column("metric").to_pylist(), dtype=object),
        "value": samples.column("value").to_numpy(),
    }


def _table_figures(samples: pa.Table, start: float, end: float, n_fires: int) -> dict[str, Any]:
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
    s = _sample_arrays(samples)
    scopes = set(s["scope"].tolist())
    rels = {x for x in scopes if is_relation_scope(x)}
    tables = {x for x in rels if not x.endswith(TOAST_SUFFIX)}
    toasts = rels - tables
    out = dict(empty)

    def window_delta(scopes_: set[str], metric: str) -> float | None:
        times, vals = _series(s, scopes_, metric)
        a, b = _at(times, vals, start), _at(times, vals, end)
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
    av_t, av_v = _series(s, rels, "autovacuum_count")
    out["autovacuum_runs"] = int(av_v[-1] - av_v[0]) if len(av_v) else None
    # sizes: the tables and their TOAST tables together (bytes on disk at the end)
    tb_t, tb_v = _series(s, rels, "table_bytes")
    ib_t, ib_v = _series(s, rels, "index_bytes")
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


def _cost_warnings(window: dict[str, Any], tables: dict[str, Any], costs: dict[str, Any]) -> list[str]:
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
