"""The report's tables as data: Table 1 (one row per figure of :data:`reports.rows.SUMMARY_ROWS`,
one column per run, the best marked and the ratios to the baseline), the environment table, and a
migration rehearsal's lag table. The per-run checks are in :mod:`reports.checks`.

Every number shown comes straight from a run's ``summary.json`` (which ``bench run`` computes
from its Parquet files); nothing here re-derives or rounds a figure before it is rendered, so a
test can compare each cell's ``value`` with a recomputation from the Parquet files.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from metrics.accounting import how_to_read
from reports import fmt
from reports.costs import SERVER_WIDE_NOTE
from reports.load import Run
from reports.rows import SUMMARY_ROWS, RowSpec

__all__ = ["SUMMARY_ROWS", "SummaryTable", "build_summary_table"]

# memory is the harness's reference (no store): when real backends are in the report it is shown
# but not ranked, or it would take every "best" lag and throughput mark.
REFERENCE_SCHEDULERS = {"memory"}


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
    (:func:`metrics.accounting.how_to_read`, once per distinct text), and what a time-compressed
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


def state_writes_of(run: Run) -> tuple[str | None, bool]:
    """The poll-state write policy a run followed (``config.json`` capabilities) and whether its
    design has no other: (None, False) for a run that did not record one."""
    caps = run.config.get("capabilities") or {}
    return caps.get("state_writes"), bool(caps.get("state_writes_fixed"))


def state_writes_sentence(runs: list[Run]) -> str | None:
    """One sentence on the state-write policy the runs were held to (``bench compare
    --state-writes``), naming every run that followed another; None when no run recorded one."""
    policies = {r.label: state_writes_of(r) for r in runs}
    seen = [p for p, _ in policies.values() if p]
    if not seen:
        return None
    # the policy the comparison asked for: the one the designs with a choice followed
    chosen = [p for p, fixed in policies.values() if p and not fixed] or seen
    common = max(sorted(set(chosen)), key=chosen.count)
    odd = [
        f"{label}: {p}{' (its design has no other policy)' if fixed else ''}"
        for label, (p, fixed) in policies.items()
        if p and p != common
    ]
    if not odd:
        return f"Every design wrote the poll state under one policy, {common}: its cost figures compare like for like."
    return (
        f"State writes differ between designs, so the figures they move (bytes written, row and TOAST writes, "
        f"WAL per fire) do not compare like for like: {common} for the designs with a choice; " + "; ".join(odd) + "."
    )


def migration_lag_rows(m: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """A rehearsal's lag comparison (``migration.json`` ``lag`` and ``slo``) as a table: each
    store's lag where it executed (or observed, when it never executed), each period between
    switches with the regression it compares, the worst tenant, and each SLO check."""
    lag = m.get("lag") if isinstance(m.get("lag"), dict) else None
    if not lag or not isinstance(lag.get("primary"), dict):
        return [], []
    header = ["lag", m.get("from", "old store"), m.get("to", "new store"), "new - old"]
    p, s = lag["primary"], lag.get("shadow") or {}
    origin = m.get("origin") or 0.0
    rows = [
        ["fires", fmt.fixed(p.get("fires")), fmt.fixed(s.get("fires")), ""],
        ["counted where the store", p.get("role", ""), s.get("role", ""), ""],
        ["p50", fmt.lag(p.get("p50")), fmt.lag(s.get("p50")), ""],
        ["p99", fmt.lag(p.get("p99")), fmt.lag(s.get("p99")), fmt.lag(lag.get("regression_p99"))],
        ["max", fmt.lag(p.get("max")), fmt.lag(s.get("max")), ""],
    ]
    for i, q in enumerate(lag.get("periods") or []):
        if not isinstance(q, dict):
            continue
        lo = "start" if q.get("due_from") is None else f"{q['due_from'] - origin:.1f} s"
        hi = "end" if q.get("due_to") is None else f"{q['due_to'] - origin:.1f} s"
        ex = q.get("executor")
        pq, sq = q.get("primary") or {}, q.get("shadow") or {}
        if ex == "primary":
            old_cell = f"{fmt.lag(q.get('primary_p99_same_fires'))} executing"
            new_cell = f"{fmt.lag(q.get('shadow_p99_same_fires'))} observing"
            what = f"same {fmt.fixed(q.get('same_fires'))} fires"
        else:
            base = q.get("baseline") or {}
            old_cell = f"{fmt.lag(base.get('p99'))} before the switch"
            if pq.get("fires"):
                old_cell += f" ({fmt.lag(pq.get('p99'))} observing)"
            new_cell = f"{fmt.lag(sq.get('p99'))} executing"
            what = "against the old store before the switch"
        rows.append(
            [
                f"p99, period {i + 1} (due {lo} to {hi})",
                old_cell,
                new_cell,
                f"{fmt.lag(q.get('regression_p99'))} ({what})",
            ]
        )
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
