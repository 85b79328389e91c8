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
    window by :func:`metrics.accounting.batch_sizes_in_window` (no per-batch file: nothing to gather from nodes).
``statements.parquet``
    ``pg_stat_statements`` over the measured window, one row per statement
    (:data:`STATEMENTS_SCHEMA`); absent when the server does not let us read it (the reason is in
    ``config.json``'s ``measurement.unavailable``).
``bloat.json``
    At the end of the run, ``pgstattuple`` of every table the design owns and of its TOAST table,
    beside ``n_dead_tup`` read at the same moment (:func:`write_bloat`).
``summary.json``
    :func:`metrics.accounting.compute_summary` of the files above. A directory without one (the run was
    killed) is read from its segments: :func:`read_fires` and :func:`read_samples` fall back to
    them, and :func:`metrics.accounting.interrupted_summary` recomputes the figures, marked incomplete.
``neighbour/`` (``--neighbour``)
    pgbench's per-transaction latency logs (``-l``): ``baseline.<pid>`` (the neighbour alone, before
    the scheduler starts) and ``run.<pid>`` (beside it); ``config.json``'s ``neighbour`` holds the
    spec and both windows (:mod:`metrics.neighbour`).
``readers.jsonl`` (``--readers``)
    One JSON line per REPEATABLE READ snapshot a reader held: ``reader``, ``start``, ``end``,
    ``xmin``, appended when each ends (a killed run keeps the ones that ended).
``faults.json`` (``--fault``), ``migration.json`` (``bench migrate dry-run``), ``locust_*`` (``--arm-load``)
    and ``nodes/`` (``--nodes``: what each node recorded, see :mod:`metrics.parts`); a sweep
    directory holds ``sweep.json`` beside its runs. Every name is a constant or a function below.

Readers go through :func:`read_fires` / :func:`read_samples`, which read the compacted file
when there is one and otherwise every complete segment (the run's own and, with ``--nodes``,
every node's parts under ``nodes/``).

The figures computed from these files (the four outcomes, lag, the whole bill) are
:mod:`metrics.accounting`'s.
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
SCALE = "scale.json"  # bench scale: in the scale directory, beside its runs
MOVES = "moves.parquet"  # long-horizon timers moved while armed (loadgen.moves), one row per move
LOCUST_SUMMARY = "locust_summary.json"  # --arm-load: locust's exact totals, written at its exit
LOCUST_CSV_PREFIX = "locust"  # --arm-load: locust's --csv prefix (locust_stats.csv, ...)
LOCUST_LOG = "locust.log"
NODES_DIR = "nodes"  # --nodes: what each `bench serve --record` node wrote, by worker id
SEGMENTS_DIR = "segments"  # the fire log and samples in closed segments, while the run runs
RUN_LOG = "run"  # the run process's own fire log in segments/ (nodes' logs are named by worker id)
RUN_LOCK = "run.lock"  # flock'ed by the live run process
STATEMENTS = "statements.parquet"  # pg_stat_statements over the measured window (metrics.pgcost)
BLOAT = "bloat.json"  # pgstattuple at the end of the run beside n_dead_tup (metrics.pgcost)
NEIGHBOUR_DIR = "neighbour"  # --neighbour: pgbench's per-transaction latency logs (metrics.neighbour)
NEIGHBOUR_BASELINE_LOG = "baseline"  # --log-prefix of the neighbour alone, before the scheduler starts
NEIGHBOUR_RUN_LOG = "run"  # --log-prefix of the neighbour beside the scheduler
READERS = "readers.jsonl"  # --readers: one line per held snapshot, appended as each ends (metrics.neighbour)


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


# What a fire row holds when its builder does not say: an undelivered fire's values.
_FIRE_DEFAULTS: dict[str, Any] = {
    "attempt": 0,
    "worker": "",
    "batch": -1,
    "effect_delivered": False,
    "external_effect": False,
}


def fire_rows(n: int, **columns: Any) -> pa.Table:
    """``n`` rows of a fire log in :data:`FIRES_SCHEMA`, the one place they are built (the
    recorder's delivered fires, the processor's undelivered ones): ``columns`` by name (arrays
    or lists of ``n``); a column not given is null (``fired_at``, ``lag_s``, ``held_at_end``:
    never delivered, not asked) or an undelivered fire's value (attempt 0, batch -1, no effect)."""
    unknown = set(columns) - set(FIRES_SCHEMA.names)
    if unknown:
        raise ValueError(f"not fire-log columns: {sorted(unknown)}")
    out = {}
    for f in FIRES_SCHEMA:
        if f.name in columns:
            v = columns[f.name]
            out[f.name] = v.cast(f.type) if isinstance(v, pa.Array) else pa.array(v, f.type)
        elif f.name in _FIRE_DEFAULTS:
            out[f.name] = pa.array([_FIRE_DEFAULTS[f.name]] * n, f.type)
        else:
            out[f.name] = pa.nulls(n, f.type)
    return pa.table(out, schema=FIRES_SCHEMA)


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

TOAST_SUFFIX = "#toast"
SERVER_PREFIX = "server:"


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
