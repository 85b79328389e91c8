"""The report model: the runs, Table 1, the figures, the narrative and any failed runs, built once;
the writers (:mod:`reports.html`, :mod:`reports.markdown`) render it and import nothing back."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from reports.costs import BloatRow, ProcessRow, TopStatements, bloat_rows, process_rows, top_statements
from reports.decide import Decision, build_decision
from reports.load import Run
from reports.narrative import Sentence, sentences
from reports.plots import Figure, render_figures
from reports.tables import SummaryTable, build_summary_table


@dataclass
class FailedRun:
    """A run that ``bench compare`` started and that failed: shown in the report, never hidden."""

    scheduler: str
    command: list[str]
    exit_code: int
    output_tail: str
    run_dir: str | None = None


@dataclass
class Report:
    runs: list[Run]
    table: SummaryTable
    narrative: list[Sentence]
    figures: list[Figure] = field(default_factory=list)
    failures: list[FailedRun] = field(default_factory=list)
    generated_at: str = ""
    bloat: list[BloatRow] = field(default_factory=list)
    statements: list[TopStatements] = field(default_factory=list)
    processes: list[ProcessRow] = field(default_factory=list)
    decision: Decision | None = None  # recommendation, fairness, cost per day, gate

    @property
    def baseline(self) -> Run | None:
        return self.runs[self.table.baseline] if self.runs else None


def _uses_postgres(run: Run) -> bool:
    return (
        run.statements is not None
        or bool((run.summary.get("unavailable") or {}).get("statements"))
        or "postgres" in ((run.summary.get("bill") or {}).get("stores") or [])
    )


def build_report(
    runs: list[Run],
    baseline: int = 0,
    failures: list[FailedRun] | None = None,
    with_figures: bool = True,
    slo: str | None = None,
    project_rate: float | None = None,
    gate=None,
) -> Report:
    """``slo``: the recommendation's thresholds (:mod:`reports.recommend`); ``project_rate``: the
    rate of the cost-per-day table; ``gate``: a :class:`reports.gate.GateVerdict` to show."""
    table = build_summary_table(runs, baseline)
    return Report(
        runs=runs,
        table=table,
        narrative=sentences(table) if runs else [],
        figures=render_figures(runs) if (with_figures and runs) else [],
        failures=list(failures or []),
        generated_at=dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
        bloat=bloat_rows(runs),
        statements=[top_statements(r) for r in runs if _uses_postgres(r)],
        processes=process_rows(runs),
        decision=build_decision(runs, slo, project_rate, gate) if runs else None,
    )
