"""The report as Markdown. By default a summary that fits a CI comment: the first screen as text
(the answer, a line per design, the workload, what makes a figure unusable), the deciding figures
as a small table, the notes, and where the full report is. ``full=True``: every table of the HTML
page and the narrative (the figures stay in the HTML file). Like the HTML page, a list of section
renderers; "" means nothing to show."""

from __future__ import annotations

import json
from collections.abc import Callable

from reports import fmt
from reports.capacity import section_capacity_markdown
from reports.checks import run_checks
from reports.costs import BLOAT_NOTE, PROCESS_NOTE, STATEMENTS_NOTE
from reports.decide import blocks_markdown, fairness_blocks, gate_blocks, per_day_blocks, recommendation_blocks
from reports.first_screen import first_screen_blocks, key_figures_block, notes_blocks
from reports.model import Report
from reports.neighbour import neighbour_summary_markdown, section_neighbour_markdown
from reports.scale import section_scale_markdown
from reports.sweep import section_sweep_markdown
from reports.tables import (
    ENVIRONMENT_ROWS,
    SUMMARY_LEGEND,
    environment_value,
    how_to_read_report,
    migration_lag_rows,
)
from reports.why import why_blocks


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _table(header: list[str], rows: list[list[str]]) -> str:
    align = ["---"] + ["---:"] * (len(header) - 1)
    lines = ["| " + " | ".join(_cell(h) for h in header) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _headers(report: Report, first: str) -> list[str]:
    return [first] + [
        r.label + (" (baseline)" if i == report.table.baseline and len(report.runs) > 1 else "")
        for i, r in enumerate(report.runs)
    ]


def md_header(report: Report) -> str:
    return (
        f"# timerbench report\n\nGenerated {report.generated_at} · {len(report.runs)} run(s): "
        + (", ".join(r.label for r in report.runs) or "none")
        + ". Figures are in the HTML report."
    )


def md_checks(report: Report) -> str:
    if not report.runs:
        return "## Checks\n\nNo runs to report."
    per_run = [run_checks(r) for r in report.runs]
    names: list[str] = []
    for checks in per_run:
        names += [c.name for c in checks if c.name not in names]
    rows = []
    for name in names:
        row = [name]
        for checks in per_run:
            c = next((c for c in checks if c.name == name), None)
            row.append("—" if c is None else f"{'✔' if c.ok else ('?' if c.ok is None else '✘')} {c.detail}")
        rows.append(row)
    return "## Checks\n\n" + _table(_headers(report, "check"), rows)


def md_first_screen(report: Report) -> str:
    return blocks_markdown(first_screen_blocks(report.decision, report.runs))


def md_key_figures(report: Report) -> str:
    block = key_figures_block(report.decision)
    return blocks_markdown([block]) if block else ""


def md_notes(report: Report) -> str:
    return blocks_markdown(notes_blocks(report.runs, report.decision))


def md_failures(report: Report) -> str:
    if not report.failures:
        return ""
    out = ["## Failed runs"]
    for f in report.failures:
        out.append(
            f"- **{f.scheduler}**: `{' '.join(f.command)}` exited with {f.exit_code}"
            + (f"; partial run directory `{f.run_dir}`" if f.run_dir else "; no run directory")
            + "\n\n  ```\n"
            + "\n".join("  " + line for line in f.output_tail.splitlines())
            + "\n  ```"
        )
    return "\n".join(out)


def md_summary(report: Report) -> str:
    if not report.runs:
        return ""
    rows = []
    for row in report.table.rows:
        cells = [row.label]
        for c in row.cells:
            text = f"**★ {c.text}**" if c.best else c.text
            if c.ratio:
                text += f" ({c.ratio})"
            cells.append(text)
        rows.append(cells)
    return (
        "## Table 1 · Summary\n\n"
        + "".join(f"{text}\n\n" for text in how_to_read_report(report.runs))
        + _table(_headers(report, "figure"), rows)
        + "\n\n"
        + SUMMARY_LEGEND
        + " (×r) is the ratio to the baseline."
        + ("\n\n**not available**, and why:\n" if report.table.notes() else "")
        + "\n".join(f"- {label}: {reason}" for label, reason in report.table.notes())
    )


def md_bloat(report: Report) -> str:
    if not report.bloat:
        return ""
    rows = [
        [
            b.run,
            b.relation,
            fmt.fixed(b.dead_exact),
            fmt.fixed(b.n_dead_tup),
            fmt.fixed(b.dead_percent, "{:.1f}%"),
            fmt.fixed(b.live_exact),
            fmt.human_bytes(b.free_bytes),
            fmt.fixed(b.free_percent, "{:.1f}%"),
            "✘ off by more than 20%" if b.disagree else "✔",
        ]
        for b in report.bloat
    ]
    header = [
        "run",
        "relation",
        "dead tuples (pgstattuple)",
        "n_dead_tup (statistics)",
        "dead, % of bytes",
        "live tuples",
        "free space",
        "free %",
        "agree?",
    ]
    return (
        "## Table 2 · Dead tuples by relation at the end of each run\n\n" + _table(header, rows) + "\n\n" + BLOAT_NOTE
    )


def md_statements(report: Report) -> str:
    if not report.statements:
        return ""
    out = ["## Table 3 · Top statements per design"]
    header = [
        "statement",
        "calls / fire",
        "ms / fire",
        "mean ms",
        "WAL / fire",
        "FPI / fire",
        "blocks dirtied / fire",
        "rows / call",
    ]
    for top in report.statements:
        out.append(f"### {top.run}")
        if not top.by_time:
            out.append(f"{fmt.UNAVAILABLE}: {top.unavailable or 'no statements were recorded in the window'}")
            continue
        for title, rows in (("by time", top.by_time), ("by WAL", top.by_wal)):
            out.append(
                f"**{title}**\n\n"
                + _table(
                    header,
                    [
                        [
                            f"`{x.query}`",
                            fmt.num(x.calls_per_fire),
                            fmt.num(x.ms_per_fire),
                            fmt.num(x.mean_ms),
                            fmt.human_bytes(x.wal_bytes_per_fire),
                            fmt.num(x.fpi_per_fire),
                            fmt.num(x.dirtied_per_fire),
                            fmt.num(x.rows_per_call),
                        ]
                        for x in rows
                    ],
                )
            )
    out.append(STATEMENTS_NOTE)
    return "\n\n".join(out)


def md_processes(report: Report) -> str:
    if not report.processes:
        return ""
    rows = [
        [
            p.run,
            p.server,
            p.kind,
            fmt.human_bytes(p.write_chars_per_fire),
            fmt.human_bytes(p.write_bytes_per_fire),
            fmt.num(p.cpu_ms_per_fire),
        ]
        for p in report.processes
    ]
    return (
        "## Table 4 · Bytes written and CPU per fire, by server process\n\n"
        + _table(
            [
                "run",
                "server",
                "process",
                "bytes passed to write() / fire",
                "kernel's storage charge / fire",
                "CPU ms / fire",
            ],
            rows,
        )
        + "\n\n"
        + PROCESS_NOTE
    )


def md_narrative(report: Report) -> str:
    if not report.narrative:
        return ""
    return "## What this says\n\n" + "\n".join(f"{i}. {s.text} [{s.cite}]" for i, s in enumerate(report.narrative, 1))


def md_migration(report: Report) -> str:
    runs = [r for r in report.runs if r.migration]
    if not runs:
        return ""
    out = ["## Migration dry-run"]
    for r in runs:
        m = r.migration or {}
        out.append(f"### {r.label}: **{m.get('verdict', '?')}**")
        scalars = {k: v for k, v in m.items() if k not in ("verdict", "origin") and not isinstance(v, (dict, list))}
        counts = m.get("counts") if isinstance(m.get("counts"), dict) else {}
        reasons = m.get("reasons") or []
        if reasons:
            out.append("\n".join(f"- **{reason}**" for reason in reasons))
        if scalars or counts:
            out.append(_table(["figure", "value"], [[str(k), str(v)] for k, v in {**scalars, **counts}.items()]))
        header, rows = migration_lag_rows(m)
        if rows:
            out.append(_table(header, rows))
    return "\n\n".join(out)


def md_environment(report: Report) -> str:
    if not report.runs:
        return ""
    rows = [[label] + [environment_value(r, key) for r in report.runs] for key, label in ENVIRONMENT_ROWS]
    out = ["## Environment", _table(_headers(report, ""), rows)]
    for r in report.runs:
        settings = r.environment.get("postgres_settings") or {}
        if settings:
            out.append(
                f"<details><summary>{r.label}: Postgres settings</summary>\n\n"
                + _table(["setting", "value"], [[str(k), str(v)] for k, v in sorted(settings.items())])
                + "\n\n</details>"
            )
        out.append(
            f"<details><summary>{r.label}: resolved workload and options</summary>\n\n```json\n"
            + json.dumps(
                {"workload": r.workload, "options": r.config.get("options") or {}},
                indent=2,
                sort_keys=True,
                default=str,
            )
            + "\n```\n\n</details>"
        )
    return "\n\n".join(out)


def md_runs(report: Report) -> str:
    if not report.runs:
        return ""
    return "## Run directories\n\n" + "\n".join(
        f"- **{r.label}**: `{r.path}`" + (" (files damaged: see the checks)" if r.problems else "") for r in report.runs
    )


def md_decision(part: Callable) -> Callable[[Report], str]:
    def render(report: Report) -> str:
        d = report.decision
        if d is None:
            return ""
        return blocks_markdown(part(d) if part in (recommendation_blocks, gate_blocks) else part(d, report.runs))

    render.__name__ = f"md_{part.__name__}"
    return render


def md_why(report: Report) -> str:
    return blocks_markdown(why_blocks(report.runs))


SECTIONS: list[Callable[[Report], str]] = [
    md_header,
    md_first_screen,
    md_failures,
    section_sweep_markdown,
    section_capacity_markdown,
    section_scale_markdown,
    md_migration,
    md_decision(recommendation_blocks),
    md_decision(gate_blocks),
    md_checks,
    md_summary,
    section_neighbour_markdown,
    md_narrative,
    md_bloat,
    md_statements,
    md_processes,
    md_decision(fairness_blocks),
    md_why,
    md_decision(per_day_blocks),
    md_notes,
    md_environment,
    md_runs,
]

# The summary: what a CI comment or a chat message carries.
SUMMARY_SECTIONS: list[Callable[[Report], str]] = [
    md_header,
    md_first_screen,
    md_key_figures,
    md_failures,
    md_decision(gate_blocks),
    neighbour_summary_markdown,  # "neighbour p99 xN against the neighbour alone", soak verdicts
    section_sweep_markdown,  # a sweep's, a capacity search's or a rehearsal's verdict, when it is one
    section_capacity_markdown,
    section_scale_markdown,
    md_migration,
    md_notes,
]


def render_markdown(report: Report, full: bool = False, html_name: str | None = None) -> str:
    sections = SECTIONS if full else SUMMARY_SECTIONS
    out = "\n\n".join(s for s in (render(report) for render in sections) if s)
    if not full:
        where = f"`{html_name}`" if html_name else "the HTML report"
        out += f"\n\nThe full report, with every figure and table: {where}."
    return out + "\n"
