"""The deciding part of a report: the recommendation (top), the fairness scorecard, the cost per
day at a rate, and the regression gate's verdict. Each section is a list of neutral blocks
(heading, paragraph, list, table) that :mod:`reports.html` and :mod:`reports.markdown` both
render, so the two writers cannot disagree."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from html import escape
from typing import Any

from reports.fairness import Scorecard
from reports.gate import GateVerdict
from reports.load import Run
from reports.per_day import Projection, far_projection, projections, rate_of
from reports.recommend import Recommendation, recommend
from reports.thresholds import FIGURES, fmt_figure, run_scorecard


@dataclass
class Decision:
    recommendation: Recommendation
    scorecards: dict[str, Scorecard]
    per_day: dict[str, list[Projection]]
    rates: dict[str, float | None]
    project_rate: float | None = None
    gate: GateVerdict | None = None


def build_decision(
    runs: list[Run], slo: str | None = None, project_rate: float | None = None, gate: GateVerdict | None = None
) -> Decision:
    rates = {r.label: rate_of(r.summary, project_rate) for r in runs}
    return Decision(
        recommendation=recommend(runs, slo),
        scorecards={r.label: run_scorecard(r) for r in runs},
        per_day={r.label: projections(r.summary, r.samples, r.window, rates[r.label]) for r in runs},
        rates=rates,
        project_rate=project_rate,
        gate=gate,
    )


# -- blocks ---------------------------------------------------------------------------------


@dataclass
class Block:
    kind: str  # "h2", "h3", "p", "strong", "list", "table", "alert" (a red box)
    text: str = ""
    items: list[str] = field(default_factory=list)
    header: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)


def _ms(v: float | None) -> str:
    if v is None:
        return "—"
    if math.isinf(v):
        return "not delivered"
    return f"{v:,.0f} ms" if v >= 10 else f"{v:.1f} ms"


def _declared(run: Run) -> str:
    from reports.recommend import declared_bound_s

    b = declared_bound_s(run)
    return "—" if b is None else f"lag within {b:g} s"


def recommendation_blocks(d: Decision) -> list[Block]:
    rec = d.recommendation
    # the headline, the SLO and the cost figure are on the first screen (reports.first_screen)
    out = [Block("h2", "Recommendation: why")]
    if rec.why:
        out += [Block("h3", "Why"), Block("list", items=rec.why)]
    if rec.would_change:
        out += [Block("h3", "What would change the answer"), Block("list", items=rec.would_change)]
    if rec.not_measured:
        out.append(Block("p", "What was not measured, and every other caveat, is in the Notes at the end."))
    if rec.verdicts and len(rec.verdicts) > 1:
        out.append(
            Block(
                "table",
                header=["run", "meets the SLO", "checks", "declared bound (information)", "cost per fire"],
                rows=[
                    [
                        v.run.label,
                        "yes" if v.meets else "no",
                        "; ".join(f"{t}: {m}{'' if ok else ' ✘'}" for t, m, ok in v.checks),
                        _declared(v.run),
                        "—" if v.cost is None else fmt_figure(FIGURES[rec.cost_name], v.cost),
                    ]
                    for v in rec.verdicts
                ],
            )
        )
    return out if len(out) > 1 else []


def fairness_blocks(d: Decision, runs: list[Run]) -> list[Block]:
    if not d.scorecards:
        return []
    out = [
        Block("h2", "Fairness across tenants"),
        Block(
            "p",
            "Over the fires due in the measured window, a fire never delivered counted as infinitely late. "
            "Jain's index is over each tenant's on-time share of its own due fires (1 = every tenant served "
            "alike); the starvation bound is the longest a tenant with due work went without a fire while "
            "other tenants fired.",
        ),
    ]
    declared = [(r.label, (r.config.get("capabilities") or {}).get("per_tenant_fairness")) for r in runs]
    if any(d is not None for _, d in declared):
        out.append(
            Block(
                "p",
                "Per-tenant fairness as each design declares it for the options it ran with (config.json "
                "capabilities: pg_leased only with one claim statement in flight, claimers=1): "
                + ", ".join(f"{label} {'—' if d is None else ('yes' if d else 'no')}" for label, d in declared)
                + ".",
            )
        )
    rows = [
        ["tenants"],
        ["Jain's index"],
        ["worst tenant's lag p99"],
        ["median tenant's lag p99"],
        ["worst / median p99"],
        ["starvation bound"],
        ["tenants with a late or missed fire"],
    ]
    for r in runs:
        sc = d.scorecards[r.label]
        t = sc.tenants
        rows[0].append(str(sc.n_tenants))
        rows[1].append("—" if sc.jain is None else f"{sc.jain:.3f}")
        rows[2].append(_ms(sc.worst_p99_ms) + (f" ({sc.worst_tenant})" if sc.worst_tenant else ""))
        rows[3].append(_ms(sc.median_p99_ms))
        rows[4].append("—" if sc.worst_over_median is None else f"{sc.worst_over_median:.1f}x")
        rows[5].append(
            "—"
            if sc.starved_s is None
            else f"{sc.starved_s:.2f} s" + (f" ({sc.starved_tenant})" if sc.starved_tenant else "")
        )
        rows[6].append("—" if not len(t) else str(int(((t["late"] + t["missed"]) > 0).sum())))
    out.append(Block("table", header=["figure"] + [r.label for r in runs], rows=rows))
    for r in runs:
        t = d.scorecards[r.label].tenants
        if len(t) < 2:
            continue
        shown = t if len(t) <= 12 else t.head(10)
        out.append(Block("h3", f"{r.label}: per tenant" + ("" if len(t) <= 12 else f" (the 10 largest of {len(t)})")))
        out.append(
            Block(
                "table",
                header=["tenant", "due", "on time", "late", "missed", "lag p50", "lag p99"],
                rows=[
                    [
                        str(x.tenant),
                        f"{x.due:,}",
                        f"{x.on_time:,}",
                        f"{x.late:,}",
                        f"{x.missed:,}",
                        _ms(x.p50_ms),
                        _ms(x.p99_ms),
                    ]
                    for x in shown.itertuples()
                ],
            )
        )
    return out


def _value(p: Projection) -> str:
    if p.value is None:
        return f"— ({p.why})" if p.why else "—"
    text = f"{p.value:,.3g}" if abs(p.value) < 100 else f"{p.value:,.0f}"
    if p.spread is not None:
        text += f" ± {p.spread:,.2g}"
    return text


def per_day_blocks(d: Decision, runs: list[Run]) -> list[Block]:
    if not runs:
        return []
    rates = {d.rates.get(r.label) for r in runs}
    at = (
        f"at {d.project_rate:g} fires/s (--project-rate)"
        if d.project_rate
        else "at each run's target rate"
        if len(rates) > 1
        else f"at {next(iter(rates)) or 0:g} fires/s (the runs' target rate)"
    )
    out = [
        Block("h2", "Cost per day " + at),
        Block(
            "p",
            "Per-fire figures of the measured window times the rate: exact arithmetic on a measured figure, "
            "as good as the window it was measured over (its length is in each run's column header). "
            "Growth is the one extrapolation: a least-squares slope of the table and index sizes over the "
            "window, ± one standard error.",
        ),
    ]
    names: list[str] = []
    for r in runs:
        names += [p.figure for p in d.per_day[r.label] if p.figure not in names]
    rows = []
    notes: list[str] = [f"{r.label}: {why}." for r in runs if (why := far_projection(r.summary, d.rates.get(r.label)))]
    for name in names:
        row = [name]
        for r in runs:
            p = next((p for p in d.per_day[r.label] if p.figure == name), None)
            row.append("—" if p is None else _value(p))
            if p is not None and p.value is not None and p.why:
                notes.append(f"{r.label}, {name}: {p.why}.")
        rows.append(row)
    header = ["per day (dead tuples per hour)"] + [
        f"{r.label} ({(r.summary.get('measured_s') or 0):.0f} s window)" for r in runs
    ]
    out.append(Block("table", header=header, rows=rows))
    if notes:
        out.append(Block("list", items=notes))
    return out


def gate_blocks(d: Decision) -> list[Block]:
    g = d.gate
    if g is None:
        return []
    rows = [[line.threshold.text, "failed" if line.failed else "passed", line.why] for line in g.lines]
    return [
        Block("h2", "Regression gate: " + ("FAIL" if g.failed else "PASS")),
        Block("p", f"Baseline: {', '.join(g.baseline_runs)}; candidate: {', '.join(g.candidate_runs)}."),
        Block("table", header=["threshold", "result", "why"], rows=rows),
    ]


# -- writers ----------------------------------------------------------------------------------


def blocks_html(blocks: list[Block], section_id: str) -> str:
    if not blocks:
        return ""
    out = [f'<section id="{escape(section_id)}">']
    for b in blocks:
        if b.kind in ("h2", "h3"):
            out.append(f"<{b.kind}>{escape(b.text)}</{b.kind}>")
        elif b.kind == "strong":
            out.append(f'<p class="pick">{escape(b.text)}</p>')
        elif b.kind == "p":
            out.append(f'<p class="howto">{escape(b.text)}</p>')
        elif b.kind == "alert":
            out.append(f'<div class="warnbox">{escape(b.text)}</div>')
        elif b.kind == "list":
            out.append("<ul>" + "".join(f"<li>{escape(i)}</li>" for i in b.items) + "</ul>")
        elif b.kind == "table":
            head = "".join(f'<th class="{"k" if i == 0 else ""}">{escape(h)}</th>' for i, h in enumerate(b.header))
            body = "".join(
                "<tr>"
                + "".join(f'<td class="{"k" if i == 0 else "text"}">{escape(c)}</td>' for i, c in enumerate(row))
                + "</tr>"
                for row in b.rows
            )
            out.append(f"<table><tr>{head}</tr>{body}</table>")
    return "\n".join(out) + "</section>"


def _md_cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def blocks_markdown(blocks: list[Block]) -> str:
    out = []
    for b in blocks:
        if b.kind == "h2":
            out.append(f"## {b.text}")
        elif b.kind == "h3":
            out.append(f"### {b.text}")
        elif b.kind == "strong":
            out.append(f"**{b.text}**")
        elif b.kind == "p":
            out.append(b.text)
        elif b.kind == "alert":
            out.append(f"> **Unusable:** {b.text}")
        elif b.kind == "list":
            out.append("\n".join(f"- {i}" for i in b.items))
        elif b.kind == "table":
            lines = [
                "| " + " | ".join(_md_cell(h) for h in b.header) + " |",
                "| " + " | ".join(["---"] + ["---:"] * (len(b.header) - 1)) + " |",
            ]
            lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in b.rows]
            out.append("\n".join(lines))
    return "\n\n".join(out)
