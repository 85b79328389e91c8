"""The report's tables as data: one summary row per figure, one column per run.

Every number shown comes straight from a run's ``summary.json`` (which ``bench run`` computes
from its Parquet files); nothing here re-derives or rounds a figure before it is rendered, so a
test can compare each cell's ``value`` with a recomputation from the Parquet files.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from metrics.rundir import RATE_HELD_SHARE as RATE_HELD_FRACTION  # the run's own "rate not held" warning
from metrics.rundir import how_to_read
from reports import fmt
from reports.costs import SERVER_WIDE_NOTE
from reports.harness_ceiling import ceiling_check
from reports.load import Run

# memory is the harness's reference (no store): when real backends are in the report it is shown
# but not ranked, or it would take every "best" lag and throughput mark.
REFERENCE_SCHEDULERS = {"memory"}


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


def _lost_total(run: Run) -> Any:
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


def _complete(run: Run) -> str:
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
    RowSpec("complete", "Complete", "", _complete, kind="text", group="Run"),
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
    RowSpec("lost_total", "Lost fires, warm-up included", "", _lost_total, "lower", kind="count", group="Correctness"),
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


def format_value(value: Any, kind: str) -> str:
    """Display text for one figure; ``—`` for a figure that does not apply (None)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return fmt.MISSING
    if kind == "text" or isinstance(value, str):  # a word, such as "not delivered"
        return str(value)
    if kind == "count":
        return f"{int(value):,}" if float(value).is_integer() else fmt.num(value)
    if kind == "percent":
        return f"{float(value) * 100:.1f}%"
    if kind == "bytes":
        return fmt.human_bytes(value)
    return fmt.num(value)


def format_ratio(value: Any, base: Any) -> str:
    """``×1.23`` against the baseline; empty when undefined (a zero baseline)."""
    if value is None or base is None:
        return ""
    value, base = float(value), float(base)
    if base == 0:
        return ""  # 0/0 and x/0 have no ratio
    return f"×{value / base:.2f}"


@dataclass
class Cell:
    value: Any  # the figure itself, unrounded (None: does not apply to this run, or not available)
    text: str
    best: bool = False
    ratio: str = ""
    note: str = ""  # why the figure is not available (the summary's ``unavailable``)


@dataclass
class Row:
    spec: RowSpec
    cells: list[Cell]

    @property
    def label(self) -> str:
        return (
            f"{self.spec.label} ({self.spec.unit})"
            if self.spec.unit and self.spec.kind not in ("percent", "bytes")
            else self.spec.label
        )


@dataclass
class SummaryTable:
    runs: list[Run]
    baseline: int
    rows: list[Row] = field(default_factory=list)

    def row(self, key: str) -> Row:
        return next(r for r in self.rows if r.spec.key == key)

    def notes(self) -> list[tuple[str, str]]:
        """(run label, reason) of every "not available" cell, each reason once per run."""
        out: list[tuple[str, str]] = []
        for row in self.rows:
            for run, cell in zip(self.runs, row.cells):
                if cell.note and (run.label, cell.note) not in out:
                    out.append((run.label, cell.note))
        return out


def unavailable_reason(run: Run, spec: RowSpec) -> str:
    """Why ``spec`` has no figure in ``run`` ("" when it simply does not apply)."""
    reasons = run.summary.get("unavailable") or {}
    for key in spec.needs:
        if reasons.get(key):
            return str(reasons[key])
    return ""


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isnan(float(v))


def build_summary_table(runs: list[Run], baseline: int = 0) -> SummaryTable:
    """Table 1. Best is marked in rows with a direction when at least two ranked runs have the
    figure and they are not all equal (a row where every run scored the same has nothing to
    mark). Ranked runs: every run, except the memory reference when real backends are present."""
    table = SummaryTable(runs=runs, baseline=baseline)
    ranked = [r.scheduler not in REFERENCE_SCHEDULERS for r in runs]
    if not any(ranked):
        ranked = [True] * len(runs)
    for spec in SUMMARY_ROWS:
        values = [spec.read(r) for r in runs]
        cells = [Cell(value=v, text=format_value(v, spec.kind)) for v in values]
        for r, c in zip(runs, cells):
            if c.value is None and (why := unavailable_reason(r, spec)):
                c.text, c.note = fmt.UNAVAILABLE, why
        numbers = [float(v) for v, rk in zip(values, ranked) if rk and _is_number(v)]
        if spec.better and len(numbers) >= 2 and len(set(numbers)) > 1:
            best = min(numbers) if spec.better == "lower" else max(numbers)
            for c, rk in zip(cells, ranked):
                c.best = rk and _is_number(c.value) and float(c.value) == best
        if spec.better and len(runs) > 1:
            base = values[baseline]
            for i, c in enumerate(cells):
                if i != baseline and _is_number(c.value) and _is_number(base):
                    c.ratio = format_ratio(c.value, base)
        table.rows.append(Row(spec, cells))
    return table


SUMMARY_LEGEND = (
    "★ best in the row among the backends (memory, the harness reference, is not ranked; nothing is marked when "
    "every run has the same value). Ratios are each run's figure over the baseline's. — : does not apply (memory "
    "has no Postgres tables). Rates, outcomes and lag cover the fires due in the measured window (warm-up "
    "excluded; fires delivered during the drain count with their real lag); correctness and at-least-once "
    "figures cover the whole run. A lag percentile that falls among fires never delivered reads 'not delivered'. "
    + SERVER_WIDE_NOTE
)


def how_to_read_report(runs: list[Run]) -> list[str]:
    """What the report says before its table: the cadence, the window and the four outcomes
    (:func:`metrics.rundir.how_to_read`, once per distinct text), and what a time-compressed
    workload compressed."""
    out: list[str] = []
    for r in runs:
        if r.summary.get("outcomes") is None:
            continue  # a run from before the outcome accounting
        text = how_to_read(r.summary)
        if text not in out:
            out.append(text)
    seen = set()
    for r in runs:
        w = r.workload
        if float(w.get("time_compression") or 1.0) > 1 and w.get("name") not in seen:
            seen.add(w.get("name"))
            factor = float(w["time_compression"])
            what = w.get("description") or (
                f"time-compressed ×{factor:g}: intervals and population scaled down at the same fire rate"
            )
            out.append(
                f"Workload {w.get('name')}: {what}. Figures that depend on the interval (cycles, lag relative "
                f"to the interval, table sizes) differ from the uncompressed shape, which takes about "
                f"{factor:g}× as long to run."
            )
    return out


# The checks a reader must not miss, per run (shown above everything else).
@dataclass
class Check:
    name: str
    ok: bool | None  # None: cannot tell from this run
    detail: str


def run_checks(run: Run) -> list[Check]:
    s = run.summary
    checks = [Check("complete", bool(s.get("complete")), _complete(run))]
    share, offered = rate_share(run), offered_share(run)
    held = s.get("rate_held")
    checks.append(
        Check(
            "rate held",
            held,
            "unknown"
            if share is None or offered is None
            else f"achieved {fmt.num(s['achieved_rate'])} of {fmt.num(s['offered_rate'])} fires/s offered "
            f"({share * 100:.1f}%), offered {offered * 100:.1f}% of the {fmt.num(s['target_rate'])} fires/s target "
            f"(held means both ≥ {RATE_HELD_FRACTION:.0%})",
        )
    )
    cycles = s.get("cycles_per_trigger")
    checks.append(
        Check(
            "steady state",
            s.get("steady_state"),
            "unknown"
            if cycles is None
            else f"{cycles:.2f} cycles per trigger in the window"
            + ("" if s.get("steady_state") else " (needs ≥ 2, and a warm-up of one maximum interval)"),
        )
    )
    lost = _lost_total(run)
    checks.append(
        Check(
            "no lost fires",
            None if lost is None else lost == 0,
            "unknown"
            if lost is None
            else f"lost: {lost:,} (pending at the end: {int((s.get('outcomes') or {}).get('pending') or 0):,})",
        )
    )
    v = s.get("duplicate_effects")
    checks.append(
        Check(
            "no duplicate keyed effects",
            None if v is None else v == 0,
            "unknown" if v is None else f"duplicate keyed effects: {int(v):,}",
        )
    )
    harness = ceiling_check(run)
    if harness is not None:
        checks.append(Check("harness ceiling", *harness))
    if run.problems:
        checks.append(Check("files readable", False, "; ".join(fmt.collapse(run.problems))))
    return checks


# A failed check whose warning the run already carries is not said twice.
_CHECK_WARNING = {
    "complete": "incomplete run",
    "rate held": "rate not held",
    "steady state": "not steady state",
    "no lost fires": "fires lost",
    "no duplicate keyed effects": "duplicate keyed effects",
}


def warning_lines(run: Run, checks: list[Check]) -> list[str]:
    """What went wrong in one run, one short line per problem: its warnings, then the failed
    checks no warning already states, then the caveats of its cost figures (measurement notes)."""
    warnings = [str(w) for w in run.summary.get("warnings") or []]
    failed = [
        f"check failed: {c.name} — {c.detail}"
        for c in checks
        if c.ok is False and not any(_CHECK_WARNING.get(c.name, "\0") in w for w in warnings)
    ]
    return fmt.collapse(warnings + failed) + [str(n) for n in run.summary.get("measurement_notes") or []]


ENVIRONMENT_ROWS: list[tuple[str, str]] = [
    ("started_at", "Started"),
    ("python", "Python"),
    ("platform", "Platform"),
    ("cpus", "CPUs"),
    ("memory_bytes", "Memory"),
    ("postgres_version", "Postgres"),
    ("temporal_version", "Temporal"),
    ("timerbench_version", "timerbench"),
    ("git_commit", "Git commit"),
    ("dsn", "DSN"),
    ("temporal_address", "Temporal address"),
    ("argv", "Command"),
]


def environment_value(run: Run, key: str) -> str:
    env = run.environment
    if key in env:
        v = env[key]
    else:
        v = run.config.get(key)
    if v is None or v == "":
        return fmt.MISSING
    if key == "memory_bytes":
        return fmt.human_bytes(v)
    if key == "started_at" and isinstance(v, (int, float)):
        import datetime as dt

        return dt.datetime.fromtimestamp(float(v), dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    if key == "argv" and isinstance(v, list):
        return " ".join(str(a) for a in v)
    if isinstance(v, (dict, list)):
        return json.dumps(v, sort_keys=True)
    return str(v)


def environment_differences(runs: list[Run]) -> list[str]:
    """Machine and version fields that differ between runs: figures from different machines or
    versions are not directly comparable, and the reader should know."""
    out = []
    for key, label in ENVIRONMENT_ROWS:
        if key in ("started_at", "dsn", "temporal_address", "argv"):
            continue
        # A field a run does not have (memory has no Postgres) is not a difference.
        seen = {environment_value(r, key) for r in runs} - {fmt.MISSING}
        if len(seen) > 1:
            out.append(f"{label} differs between runs: {', '.join(sorted(seen))}")
    return out


def migration_lag_rows(m: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """A rehearsal's lag comparison (``migration.json`` ``lag`` and ``slo``) as a table: each
    store's lag over the same fires, the regression, the worst tenant, and each SLO check."""
    lag = m.get("lag") if isinstance(m.get("lag"), dict) else None
    if not lag or not isinstance(lag.get("primary"), dict):
        return [], []
    header = ["lag", m.get("from", "old store"), m.get("to", "new store"), "new - old"]
    p, s = lag["primary"], lag.get("shadow") or {}
    rows = [
        ["fires", fmt.fixed(p.get("fires")), fmt.fixed(s.get("fires")), ""],
        ["p50", fmt.lag(p.get("p50")), fmt.lag(s.get("p50")), ""],
        ["p99", fmt.lag(p.get("p99")), fmt.lag(s.get("p99")), fmt.lag(lag.get("regression_p99"))],
        ["max", fmt.lag(p.get("max")), fmt.lag(s.get("max")), ""],
    ]
    wt = lag.get("worst_tenant")
    if isinstance(wt, dict):
        rows.append(
            [
                f"p99, worst tenant ({wt.get('tenant')})",
                fmt.lag(wt.get("primary_p99")),
                fmt.lag(wt.get("shadow_p99")),
                fmt.lag(wt.get("regression_p99")),
            ]
        )
    for name, c in (m.get("slo") or {}).items():
        if isinstance(c, dict):
            limit = "no limit" if c.get("limit") is None else f"limit {fmt.lag(c['limit'])} ({c.get('limit_from')})"
            rows.append(
                [name.replace("_", " "), "", fmt.lag(c.get("value")), f"{limit}: {'ok' if c.get('ok') else 'EXCEEDED'}"]
            )
    return header, rows
