"""Table 1's rows as a catalogue: each figure of the summary table, where it is read from in a
run's ``summary.json``, its unit, how it is shown and which way is better (:class:`RowSpec`,
:data:`SUMMARY_ROWS`). :mod:`reports.tables` builds the table from it; the checks and the
narrative read a few of the same figures (:func:`rate_share`, :func:`lost_total`, ...).

Every reader returns the figure as the summary has it, never rounded or re-derived, so a test can
compare each cell with a recomputation from the Parquet files.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from metrics.accounting import RATE_HELD_SHARE as RATE_HELD_FRACTION  # the run's own "rate not held" warning
from reports import fmt
from reports.load import Run

__all__ = ["RATE_HELD_FRACTION", "SUMMARY_ROWS", "RowSpec"]


def _get(*keys: str) -> Callable[[Run], Any]:
    def read(run: Run) -> Any:
        value: Any = run.summary
        for k in keys:
            if not isinstance(value, dict):
                return None
            value = value.get(k)
        return value

    return read


def _ratio(num: Any, den: Any) -> float | None:
    if num is None or not den:
        return None
    return float(num) / float(den)


def rate_share(run: Run) -> float | None:
    """Achieved over offered fire rate (1.0 = every fire that became due was delivered in time
    to count; 0.95 and up is held)."""
    return _ratio(run.summary.get("achieved_rate"), run.summary.get("offered_rate"))


def offered_share(run: Run) -> float | None:
    """Offered over target fire rate: below 0.95 the load itself fell short (closed-loop relief,
    or fires more than one interval late skipping periods)."""
    return _ratio(run.summary.get("offered_rate"), run.summary.get("target_rate"))


def rate_held(run: Run) -> bool | None:
    """The run's own verdict (achieved vs offered **and** offered vs target, metrics.rundir)."""
    return run.summary.get("rate_held")


def _outcome(key: str) -> Callable[[Run], Any]:
    return _get("outcomes", key)


def on_time_share(run: Run) -> float | None:
    o = run.summary.get("outcomes") or {}
    return _ratio(o.get("on_time"), o.get("due"))


def lost_total(run: Run) -> Any:
    o = run.summary.get("outcomes") or {}
    if o.get("lost") is None:  # no accounting (an older run), or a killed run that never judged it
        return None
    return int(o["lost"]) + int(run.summary.get("lost_in_warmup") or 0)


def _steady(run: Run) -> str | None:
    v = run.summary.get("steady_state")
    return None if v is None else ("yes" if v else "NO")


def _options(run: Run) -> str:
    opts = run.config.get("options") or {}
    return ", ".join(f"{k}={v}" for k, v in sorted(opts.items())) or "defaults"


def _workload(run: Run) -> str:
    name = run.summary.get("workload_name") or run.workload.get("name") or "?"
    measured, warm = run.summary.get("measured_s"), run.summary.get("warmup_s")
    parts = [str(name)]
    compression = float(run.workload.get("time_compression") or 1.0)
    if compression > 1:
        parts.append(f"time-compressed ×{compression:g}")
    if run.workload.get("cadence"):
        parts.append(f"{run.workload['cadence']} cadence")
    if measured is not None:
        parts.append(f"{float(measured):g} s measured")
    if warm is not None:
        parts.append(f"{float(warm):g} s warm-up")
    drained = run.summary.get("drained_s")
    if drained is not None:
        parts.append(f"{float(drained):.1f} s drained")
    return ", ".join(parts)


def complete_text(run: Run) -> str:
    if run.summary.get("complete"):
        return "yes"
    reason = run.summary.get("incomplete_reason") or ("; ".join(run.problems) if run.problems else "not recorded")
    return f"no: {fmt.one_line(reason)}"


def _server(server: str, metric: str, scale: float = 1.0) -> Callable[[Run], Any]:
    """A server's per-fire figure (``summary.servers.<server>.per_fire.<metric>``)."""

    def read(run: Run) -> Any:
        v = _get("servers", server, "per_fire", metric)(run)
        return None if v is None else float(v) * scale

    return read


def _statement_ms_per_fire(run: Run) -> float | None:
    design = _get("statements", "design", "exec_ms")(run)
    fires = run.summary.get("fires")
    return None if design is None or not fires else float(design) / float(fires)


def _sampler_ms_per_s(run: Run) -> float | None:
    sampler = _get("statements", "sampler", "exec_ms")(run)
    measured = run.summary.get("measured_s")
    return None if sampler is None or not measured else float(sampler) / float(measured)


@dataclass(frozen=True)
class RowSpec:
    key: str
    label: str
    unit: str
    read: Callable[[Run], Any]
    better: str | None = None  # "lower", "higher" or None (no best marked, no ratio)
    kind: str = "number"  # number, count, bytes, ratio, percent, text
    group: str = ""
    # keys of the summary's ``unavailable``: when the figure is missing and the run names one of
    # them, the cell says "not available" and the report gives the reason
    needs: tuple[str, ...] = ()


WRITES = "Row writes per fire (the design's tables)"
WAL = "WAL per fire (server-wide)"
POSTGRES_BILL = "Postgres per fire (server-wide)"
TEMPORAL_BILL = "Temporal per fire (server-wide)"
BILL = "The bill per fire, all stores"
BLOAT = "Dead tuples at the end (pgstattuple, exact)"
STATEMENTS = "Statements (pg_stat_statements, measured window)"


SUMMARY_ROWS: list[RowSpec] = [
    RowSpec("scheduler", "Scheduler", "", lambda r: r.scheduler, kind="text", group="Run"),
    RowSpec("options", "Options", "", _options, kind="text", group="Run"),
    RowSpec("workload", "Workload", "", _workload, kind="text", group="Run"),
    RowSpec("complete", "Complete", "", complete_text, kind="text", group="Run"),
    RowSpec("cycles", "Cycles per trigger in the window", "", _get("cycles_per_trigger"), group="Run"),
    RowSpec(
        "steady_state", "Steady state (≥ 2 cycles, warm-up ≥ longest interval)", "", _steady, kind="text", group="Run"
    ),
    RowSpec("target_rate", "Target fire rate", "fires/s", _get("target_rate"), group="Throughput"),
    RowSpec("offered_rate", "Offered fire rate (became due)", "fires/s", _get("offered_rate"), group="Throughput"),
    RowSpec("achieved_rate", "Achieved fire rate", "fires/s", _get("achieved_rate"), "higher", group="Throughput"),
    RowSpec(
        "fires", "Fires delivered in the window (first deliveries)", "", _get("fires"), kind="count", group="Throughput"
    ),
    RowSpec("rate_share", "Achieved / offered", "%", rate_share, "higher", kind="percent", group="Throughput"),
    RowSpec("offered_share", "Offered / target", "%", offered_share, kind="percent", group="Throughput"),
    RowSpec(
        "claim_rate",
        "Claim throughput (timers claimed, re-claims included)",
        "claims/s",
        _get("claim_rate"),
        group="Throughput",
    ),
    RowSpec(
        "due",
        "Fires due in the window",
        "",
        _outcome("due"),
        kind="count",
        group="Outcomes (every fire due in the window)",
    ),
    # counts are not ranked (each run has its own number of due fires); the on-time share is
    RowSpec(
        "on_time",
        "On time (lag ≤ on-time bound)",
        "",
        _outcome("on_time"),
        kind="count",
        group="Outcomes (every fire due in the window)",
    ),
    RowSpec(
        "late",
        "Late (delivered, lag over the bound)",
        "",
        _outcome("late"),
        kind="count",
        group="Outcomes (every fire due in the window)",
    ),
    RowSpec(
        "pending",
        "Pending at the end (backlog still held)",
        "",
        _outcome("pending"),
        kind="count",
        group="Outcomes (every fire due in the window)",
    ),
    RowSpec(
        "lost",
        "Lost (never delivered, not held)",
        "",
        _outcome("lost"),
        "lower",
        kind="count",
        group="Outcomes (every fire due in the window)",
    ),
    RowSpec(
        "on_time_share",
        "On time / due",
        "%",
        on_time_share,
        "higher",
        kind="percent",
        group="Outcomes (every fire due in the window)",
    ),
    RowSpec("on_time_s", "On-time bound", "s", _get("on_time_s"), group="Outcomes (every fire due in the window)"),
    RowSpec(
        "skipped_periods",
        "Skipped periods (fires > 1 interval late)",
        "",
        _get("skipped_periods"),
        "lower",
        kind="count",
        group="Outcomes (every fire due in the window)",
    ),
    RowSpec("lag_p50_ms", "Lag p50", "ms", _get("lag_ms", "p50"), "lower", group="Lag (every fire due in the window)"),
    RowSpec("lag_p90_ms", "Lag p90", "ms", _get("lag_ms", "p90"), "lower", group="Lag (every fire due in the window)"),
    RowSpec("lag_p99_ms", "Lag p99", "ms", _get("lag_ms", "p99"), "lower", group="Lag (every fire due in the window)"),
    RowSpec(
        "lag_p999_ms", "Lag p99.9", "ms", _get("lag_ms", "p999"), "lower", group="Lag (every fire due in the window)"
    ),
    RowSpec("lag_max_ms", "Lag max", "ms", _get("lag_ms", "max"), "lower", group="Lag (every fire due in the window)"),
    RowSpec("lost_total", "Lost fires, warm-up included", "", lost_total, "lower", kind="count", group="Correctness"),
    RowSpec(
        "duplicate_effects",
        "Duplicate keyed effects",
        "",
        _get("duplicate_effects"),
        "lower",
        kind="count",
        group="Correctness",
    ),
    RowSpec("early", "Early fires (before due)", "", _get("early"), "lower", kind="count", group="Correctness"),
    RowSpec(
        "redelivered_fires",
        "Redelivered fires (attempt > 1)",
        "",
        _get("redelivered_fires"),
        "lower",
        kind="count",
        group="At-least-once costs",
    ),
    RowSpec(
        "duplicate_fires",
        "Duplicate fires",
        "",
        _get("duplicate_fires"),
        "lower",
        kind="count",
        group="At-least-once costs",
    ),
    RowSpec(
        "external_effects",
        "External effects (webhooks sent)",
        "",
        _get("external_effects"),
        kind="count",
        group="At-least-once costs",
    ),
    RowSpec(
        "duplicate_external_effects",
        "Duplicate external effects",
        "",
        _get("duplicate_external_effects"),
        "lower",
        kind="count",
        group="At-least-once costs",
    ),
    RowSpec(
        "dead_table_peak",
        "Dead tuples, table, peak",
        "",
        _get("dead_tuples", "table_peak"),
        "lower",
        kind="count",
        group="Postgres",
    ),
    RowSpec(
        "dead_table_end",
        "Dead tuples, table, end",
        "",
        _get("dead_tuples", "table_end"),
        "lower",
        kind="count",
        group="Postgres",
    ),
    RowSpec(
        "dead_toast_peak",
        "Dead tuples, TOAST, peak",
        "",
        _get("dead_tuples", "toast_peak"),
        "lower",
        kind="count",
        group="Postgres",
    ),
    RowSpec(
        "dead_toast_end",
        "Dead tuples, TOAST, end",
        "",
        _get("dead_tuples", "toast_end"),
        "lower",
        kind="count",
        group="Postgres",
    ),
    RowSpec(
        "hot_ratio", "HOT ratio (HOT / all updates)", "%", _get("hot_ratio"), "higher", kind="percent", group="Postgres"
    ),
    RowSpec("autovacuum_runs", "Autovacuum runs", "", _get("autovacuum_runs"), kind="count", group="Postgres"),
    RowSpec(
        "table_bytes_end", "Table size at end", "B", _get("table_bytes_end"), "lower", kind="bytes", group="Postgres"
    ),
    RowSpec(
        "index_bytes_end", "Index size at end", "B", _get("index_bytes_end"), "lower", kind="bytes", group="Postgres"
    ),
    RowSpec("inserts_per_fire", "Heap inserts per fire", "", _get("per_fire", "inserts"), "lower", group=WRITES),
    RowSpec("updates_per_fire", "Heap updates per fire", "", _get("per_fire", "updates"), "lower", group=WRITES),
    RowSpec("deletes_per_fire", "Heap deletes per fire", "", _get("per_fire", "deletes"), "lower", group=WRITES),
    RowSpec(
        "toast_inserts_per_fire", "TOAST inserts per fire", "", _get("per_fire", "toast_inserts"), "lower", group=WRITES
    ),
    RowSpec(
        "toast_updates_per_fire", "TOAST updates per fire", "", _get("per_fire", "toast_updates"), "lower", group=WRITES
    ),
    RowSpec(
        "toast_deletes_per_fire", "TOAST deletes per fire", "", _get("per_fire", "toast_deletes"), "lower", group=WRITES
    ),
    RowSpec("heap_writes_per_fire", "Heap writes per fire", "", _get("per_fire", "heap_writes"), "lower", group=WRITES),
    RowSpec(
        "toast_writes_per_fire", "TOAST writes per fire", "", _get("per_fire", "toast_writes"), "lower", group=WRITES
    ),
    RowSpec(
        "row_writes_per_fire",
        "Row writes per fire, heap + TOAST",
        "",
        _get("per_fire", "row_writes"),
        "lower",
        group=WRITES,
    ),
    RowSpec(
        "wal_bytes_per_fire", "WAL bytes per fire", "B", _get("per_fire", "wal_bytes"), "lower", kind="bytes", group=WAL
    ),
    RowSpec(
        "wal_records_per_fire",
        "WAL records per fire",
        "",
        _get("per_fire", "wal_records"),
        "lower",
        group=WAL,
        needs=("wal_records",),
    ),
    RowSpec(
        "wal_fpi_per_fire",
        "Full-page images per fire",
        "",
        _get("per_fire", "wal_fpi"),
        "lower",
        group=WAL,
        needs=("wal_records",),
    ),
    RowSpec(
        "postgres_io_bytes_per_fire",
        "Postgres bytes written per fire (pg_stat_io)",
        "B",
        _server("postgres", "io_write_bytes"),
        "lower",
        kind="bytes",
        group=POSTGRES_BILL,
        needs=("postgres_io",),
    ),
    RowSpec(
        "postgres_cpu_ms_per_fire",
        "Postgres CPU per fire",
        "ms",
        _server("postgres", "cpu_s", 1000.0),
        "lower",
        group=POSTGRES_BILL,
        needs=("postgres_process",),
    ),
    RowSpec(
        "temporal_requests_per_fire",
        "Temporal persistence requests per fire",
        "",
        _server("temporal", "persistence_requests"),
        "lower",
        group=TEMPORAL_BILL,
        needs=("temporal_metrics",),
    ),
    RowSpec(
        "temporal_writes_per_fire",
        "Temporal persistence writes per fire",
        "",
        _server("temporal", "persistence_writes"),
        "lower",
        group=TEMPORAL_BILL,
        needs=("temporal_metrics",),
    ),
    RowSpec(
        "temporal_actions_per_fire",
        "Temporal actions per fire",
        "",
        _server("temporal", "actions"),
        "lower",
        group=TEMPORAL_BILL,
        needs=("temporal_metrics",),
    ),
    RowSpec(
        "temporal_bytes_per_fire",
        "Temporal bytes written per fire (the kernel's count for its process)",
        "B",
        _server("temporal", "write_bytes"),
        "lower",
        kind="bytes",
        group=TEMPORAL_BILL,
        needs=("temporal_process",),
    ),
    RowSpec(
        "temporal_file_growth_per_fire",
        "Temporal store growth per fire (SQLite files)",
        "B",
        _server("temporal", "file_bytes"),
        "lower",
        kind="bytes",
        group=TEMPORAL_BILL,
        needs=("temporal_process",),
    ),
    RowSpec(
        "temporal_cpu_ms_per_fire",
        "Temporal CPU per fire",
        "ms",
        _server("temporal", "cpu_s", 1000.0),
        "lower",
        group=TEMPORAL_BILL,
        needs=("temporal_process",),
    ),
    RowSpec(
        "durable_writes_per_fire",
        "Durable writes per fire (row writes + Temporal persistence writes)",
        "",
        _get("bill", "durable_writes"),
        "lower",
        group=BILL,
        needs=("temporal_metrics",),
    ),
    RowSpec(
        "bytes_written_per_fire",
        "Bytes written per fire, all stores",
        "B",
        _get("bill", "bytes_written"),
        "lower",
        kind="bytes",
        group=BILL,
        needs=("postgres_io", "temporal_process"),
    ),
    RowSpec(
        "dead_exact",
        "Dead tuples, tables (pgstattuple)",
        "",
        _get("bloat", "dead_tuples_exact"),
        "lower",
        kind="count",
        group=BLOAT,
        needs=("bloat",),
    ),
    RowSpec(
        "dead_estimate",
        "n_dead_tup, tables, read at the same moment",
        "",
        _get("bloat", "n_dead_tup"),
        kind="count",
        group=BLOAT,
        needs=("bloat",),
    ),
    RowSpec(
        "dead_exact_toast",
        "Dead tuples, TOAST (pgstattuple)",
        "",
        _get("bloat", "dead_tuples_exact_toast"),
        "lower",
        kind="count",
        group=BLOAT,
        needs=("bloat",),
    ),
    RowSpec(
        "dead_estimate_toast",
        "n_dead_tup, TOAST, read at the same moment",
        "",
        _get("bloat", "n_dead_tup_toast"),
        kind="count",
        group=BLOAT,
        needs=("bloat",),
    ),
    RowSpec(
        "dead_bytes",
        "Dead tuple bytes, tables + TOAST",
        "B",
        _get("bloat", "dead_bytes"),
        "lower",
        kind="bytes",
        group=BLOAT,
        needs=("bloat",),
    ),
    RowSpec(
        "free_bytes",
        "Free space, tables + TOAST",
        "B",
        _get("bloat", "free_bytes"),
        kind="bytes",
        group=BLOAT,
        needs=("bloat",),
    ),
    RowSpec(
        "statement_ms_per_fire",
        "Statement time per fire (the design's)",
        "ms",
        _statement_ms_per_fire,
        "lower",
        group=STATEMENTS,
        needs=("statements",),
    ),
    RowSpec(
        "sampler_ms_per_s",
        "The sampler's statement time per second",
        "ms/s",
        _sampler_ms_per_s,
        group=STATEMENTS,
        needs=("statements",),
    ),
]
