"""One self-contained HTML file (inline CSS, PNGs as data: URIs, no script, nothing fetched), so
the report can be mailed. The page is a list of section renderers (``SECTIONS``); each takes the
:class:`Report` and returns HTML, or "" when it has nothing to show, so a new kind of run (such as
a migration dry-run) adds a section without restructuring the page."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from html import escape

from reports import fmt
from reports.capacity import section_capacity_html
from reports.checks import run_checks
from reports.costs import BLOAT_NOTE, PROCESS_NOTE, STATEMENTS_NOTE
from reports.decide import blocks_html, fairness_blocks, gate_blocks, per_day_blocks, recommendation_blocks
from reports.first_screen import first_screen_blocks, notes_blocks
from reports.load import Run
from reports.model import Report
from reports.neighbour import section_neighbour_html
from reports.plots import scheduler_colour
from reports.scale import section_scale_html
from reports.sweep import section_sweep_html
from reports.tables import (
    ENVIRONMENT_ROWS,
    SUMMARY_LEGEND,
    environment_value,
    how_to_read_report,
    migration_lag_rows,
)
from reports.why import why_blocks

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1d1d1f;margin:0;background:#fafafa}
main{max-width:1320px;margin:0 auto;padding:24px 32px 64px}
h1{font-size:24px;margin:0 0 4px} h2{font-size:19px;margin:36px 0 10px;border-bottom:1px solid #ddd;padding-bottom:4px}
h3{font-size:15px;margin:18px 0 6px}
.meta{color:#555;font-size:13px}
.howto{max-width:980px;margin:6px 0 10px}
table{border-collapse:collapse;background:#fff;font-size:13px;margin:6px 0}
th,td{border:1px solid #e1e1e1;padding:4px 9px;text-align:right;vertical-align:top}
th{background:#f3f3f3} td.k,th.k{text-align:left;white-space:nowrap}
tr.group td{background:#f7f7f7;font-weight:600;text-align:left;color:#444}
td.best{background:#e8f6e8;font-weight:600} td.best::before{content:"★ ";color:#2a8a2a}
.ratio{display:block;color:#777;font-size:11px;font-weight:400}
td.text{text-align:left;max-width:360px;overflow-wrap:anywhere}
#environment{table-layout:fixed;width:100%} #environment td.k,#environment th.k{width:130px}
.sw{display:inline-block;width:11px;height:11px;border-radius:2px;margin-right:5px;vertical-align:-1px}
.ok{color:#1d7a1d;font-weight:600} .bad{color:#b3261e;font-weight:600} .unk{color:#8a6d00;font-weight:600}
.warnbox{border-left:5px solid #b3261e;background:#fff4f3;padding:8px 14px;margin:8px 0}
.okbox{border-left:5px solid #1d7a1d;background:#f2fbf2;padding:8px 14px;margin:8px 0}
.warnbox ul,.okbox ul{margin:4px 0;padding-left:20px}
ol.say li{margin:5px 0} .cite{color:#555;font-size:12px;white-space:nowrap}
figure{margin:18px 0;background:#fff;border:1px solid #e1e1e1;padding:10px}
figure img{max-width:100%} figcaption{color:#444;font-size:13px}
details{margin:4px 0} pre{white-space:pre-wrap;font-size:12px;background:#f4f4f4;padding:8px}
td.na{color:#8a6d00} .notes{font-size:12px;color:#444} .notes li{margin:2px 0}
td.q{text-align:left;font-family:ui-monospace,monospace;font-size:11px;max-width:620px;overflow-wrap:anywhere}
.pick{font-size:17px;font-weight:700;margin:8px 0}
.verdict-go{color:#1d7a1d;font-size:20px;font-weight:700} .verdict-nogo{color:#b3261e;font-size:20px;font-weight:700}
table{display:block;max-width:100%;overflow-x:auto} #environment{display:table}
#first h2{margin-top:12px} #first ul{margin:4px 0;padding-left:20px} #first .howto{margin:4px 0}
.first-figs{display:grid;grid-template-columns:1fr 1fr;gap:10px}
.first-figs figure{margin:6px 0;padding:6px} .first-figs figcaption{font-size:12px}
@media (max-width:900px){.first-figs{grid-template-columns:1fr}}
p,li,figcaption{overflow-wrap:anywhere}
@media (max-width:600px){main{padding:12px 10px 40px} #environment{display:block} .cite{white-space:normal}}
"""


def _swatch(run: Run) -> str:
    return f'<span class="sw" style="background:{scheduler_colour(run.scheduler)}"></span>'


def _run_headers(report: Report, first: str = "") -> str:
    cells = [f'<th class="k">{escape(first)}</th>']
    for i, r in enumerate(report.runs):
        base = " <small>(baseline)</small>" if i == report.table.baseline and len(report.runs) > 1 else ""
        cells.append(f'<th data-run="{escape(r.label)}">{_swatch(r)}{escape(r.label)}{base}</th>')
    return "<tr>" + "".join(cells) + "</tr>"


def section_header(report: Report) -> str:
    names = ", ".join(escape(r.label) for r in report.runs) or "none"
    base = report.baseline
    return (
        "<header><h1>timerbench report</h1>"
        f'<div class="meta">Generated {escape(report.generated_at)} · {len(report.runs)} run(s): {names}'
        + (f" · ratios are against <b>{escape(base.label)}</b>" if base is not None and len(report.runs) > 1 else "")
        + "</div></header>"
    )


FIRST_SCREEN_FIGURES = ("lag_cdf", "cost_by_store")  # the deciding pictures, beside the answer


def _figure_html(f, caption: bool = True) -> str:
    data = base64.b64encode(f.png).decode("ascii")
    return (
        f'<figure id="figure-{f.key}"><img class="plot" data-figure="{f.key}" alt="{escape(f.title)}" '
        f'src="data:image/png;base64,{data}"><figcaption><b>Figure {f.number} · {escape(f.title)}.</b> '
        + (escape(f.caption) if caption else "")
        + "</figcaption></figure>"
    )


def section_first_screen(report: Report) -> str:
    """The answer, the per-design lines, the workload, what makes a figure unusable, and the
    deciding pictures: what a reader sees before scrolling."""
    html = blocks_html(first_screen_blocks(report.decision, report.runs), "first")
    figs = [f for key in FIRST_SCREEN_FIGURES for f in report.figures if f.key == key]
    if not figs:
        return html
    legend = " ".join(f"{_swatch(r)}{escape(r.label)}" for r in report.runs)
    pictures = "".join(_figure_html(f, caption=False) for f in figs)
    return html.replace(
        "</section>",
        f'<div class="meta">Colours: {legend}. Captions in the Figures section.</div>'
        f'<div class="first-figs">{pictures}</div></section>',
        1,
    )


def section_notes(report: Report) -> str:
    return blocks_html(notes_blocks(report.runs, report.decision), "notes")


def section_checks(report: Report) -> str:
    """Checks and warnings of every run, at the top where nobody misses them."""
    if not report.runs and not report.failures:
        return '<section id="checks-section"><h2>Checks</h2><div class="warnbox">No runs to report.</div></section>'
    rows = []
    names = ["complete", "rate held", "steady state", "no lost fires", "no duplicate keyed effects"]
    per_run = [run_checks(r) for r in report.runs]
    extra = sorted({c.name for checks in per_run for c in checks} - set(names))
    for name in names + extra:
        cells = [f'<td class="k">{escape(name)}</td>']
        for checks in per_run:
            c = next((c for c in checks if c.name == name), None)
            if c is None:
                cells.append("<td>—</td>")
                continue
            cls, mark = ("ok", "✔") if c.ok else (("unk", "?") if c.ok is None else ("bad", "✘"))
            cells.append(
                f'<td class="text" data-check="{escape(name)}" data-ok="{c.ok}"><span class="{cls}">{mark}</span> '
                f"{escape(c.detail)}</td>"
            )
        rows.append("<tr>" + "".join(cells) + "</tr>")
    out = ['<section id="checks-section"><h2>Checks</h2>']
    if report.runs:
        out.append('<table id="checks">' + _run_headers(report, "check") + "".join(rows) + "</table>")
    out.append("</section>")
    return "".join(out)


def section_failures(report: Report) -> str:
    if not report.failures:
        return ""
    out = ['<section id="failures"><h2>Failed runs</h2>']
    for f in report.failures:
        out.append(
            f'<div class="warnbox" data-failed="{escape(f.scheduler)}"><b>{escape(f.scheduler)}</b>: '
            f"<code>{escape(' '.join(f.command))}</code> exited with {f.exit_code}"
            + (f"; partial run directory: <code>{escape(f.run_dir)}</code>" if f.run_dir else "; no run directory")
            + f"<details open><summary>last output</summary><pre>{escape(f.output_tail)}</pre></details></div>"
        )
    out.append("</section>")
    return "".join(out)


def section_summary(report: Report) -> str:
    if not report.runs:
        return ""
    t = report.table
    rows, group = [], None
    for row in t.rows:
        if row.spec.group != group:
            group = row.spec.group
            rows.append(f'<tr class="group"><td colspan="{len(report.runs) + 1}">{escape(group)}</td></tr>')
        cells = [f'<td class="k">{escape(row.label)}</td>']
        for r, c in zip(report.runs, row.cells):
            classes = ["best"] if c.best else []
            if row.spec.kind == "text":
                classes.append("text")
            value = "" if c.value is None else (c.value if isinstance(c.value, str) else repr(c.value))
            ratio = f'<span class="ratio">{escape(c.ratio)} vs baseline</span>' if c.ratio else ""
            if c.note:
                classes.append("na")
            title = f' title="{escape(c.note)}"' if c.note else ""
            text = escape(c.text)
            if row.spec.key == "options" and c.text:  # folded: up to 30 key=value pairs per design
                n = len([x for x in c.text.split(",") if "=" in x])
                text = f"<details><summary>{n} options</summary>{text}</details>"
            cells.append(
                f'<td class="{" ".join(classes)}" data-row="{row.spec.key}" data-run="{escape(r.label)}" '
                f'data-value="{escape(str(value))}"{title}>{text}{ratio}</td>'
            )
        rows.append(f'<tr data-row="{row.spec.key}">' + "".join(cells) + "</tr>")
    notes = t.notes()
    note_html = ""
    if notes:
        note_html = (
            '<div class="notes" id="unavailable"><b>not available</b>, and why:<ul>'
            + "".join(f"<li>{escape(label)}: {escape(reason)}</li>" for label, reason in notes)
            + "</ul></div>"
        )
    return (
        '<section id="summary-section"><h2>Table 1 · Summary</h2>'
        + "".join(f'<p class="howto">{escape(text)}</p>' for text in how_to_read_report(report.runs))
        + f'<table id="summary">{_run_headers(report, "figure")}'
        + "".join(rows)
        + f'</table><p class="meta">{escape(SUMMARY_LEGEND)}</p>{note_html}</section>'
    )


def section_bloat(report: Report) -> str:
    """Table 2: dead tuples by relation at the end of each run, exact beside the estimate."""
    if not report.bloat:
        return ""
    head = (
        '<tr><th class="k">run</th><th class="k">relation</th><th>dead tuples (pgstattuple)</th>'
        "<th>n_dead_tup (statistics)</th><th>dead, % of bytes</th><th>live tuples</th><th>free space</th>"
        "<th>free %</th><th>agree?</th></tr>"
    )
    rows = []
    for b in report.bloat:
        agree = '<span class="bad">✘ off by more than 20%</span>' if b.disagree else '<span class="ok">✔</span>'
        rows.append(
            f'<tr data-bloat="{escape(b.relation)}" data-run="{escape(b.run)}"><td class="k">{escape(b.run)}</td>'
            f'<td class="k">{escape(b.relation)}</td><td>{fmt.fixed(b.dead_exact)}</td>'
            f"<td>{fmt.fixed(b.n_dead_tup)}</td><td>{fmt.fixed(b.dead_percent, '{:.1f}%')}</td>"
            f"<td>{fmt.fixed(b.live_exact)}</td><td>{fmt.human_bytes(b.free_bytes)}</td>"
            f"<td>{fmt.fixed(b.free_percent, '{:.1f}%')}</td><td>{agree}</td></tr>"
        )
    return (
        f'<section id="bloat-section"><h2>Table 2 · Dead tuples by relation at the end of each run</h2>'
        f'<table id="bloat">{head}{"".join(rows)}</table><p class="meta">{escape(BLOAT_NOTE)}</p></section>'
    )


def section_processes(report: Report) -> str:
    """Table 4: bytes written and CPU per fire by server and kind of process."""
    if not report.processes:
        return ""
    head = (
        '<tr><th class="k">run</th><th class="k">server</th><th class="k">process</th>'
        "<th>bytes passed to write() / fire</th><th>kernel's storage charge / fire</th><th>CPU ms / fire</th></tr>"
    )
    rows = "".join(
        f'<tr data-process="{escape(p.kind)}" data-run="{escape(p.run)}"><td class="k">{escape(p.run)}</td>'
        f'<td class="k">{escape(p.server)}</td><td class="k">{escape(p.kind)}</td>'
        f"<td>{fmt.human_bytes(p.write_chars_per_fire)}</td><td>{fmt.human_bytes(p.write_bytes_per_fire)}</td>"
        f"<td>{fmt.num(p.cpu_ms_per_fire)}</td></tr>"
        for p in report.processes
    )
    return (
        f'<section id="processes-section"><h2>Table 4 · Bytes written and CPU per fire, by server process</h2>'
        f'<table id="processes">{head}{rows}</table><p class="meta">{escape(PROCESS_NOTE)}</p></section>'
    )


def section_statements(report: Report) -> str:
    """Table 3: each design's top statements by time and by WAL, per fire."""
    if not report.statements:
        return ""
    out = ['<section id="statements-section"><h2>Table 3 · Top statements per design</h2>']
    head = (
        '<tr><th class="k">statement</th><th>calls / fire</th><th>ms / fire</th><th>mean ms</th>'
        "<th>WAL / fire</th><th>FPI / fire</th><th>blocks dirtied / fire</th><th>rows / call</th></tr>"
    )
    for top in report.statements:
        run = next(r for r in report.runs if r.label == top.run)
        out.append(f"<h3>{_swatch(run)}{escape(top.run)}</h3>")
        if not top.by_time:
            why = top.unavailable or "no statements were recorded in the window"
            out.append(f'<div class="notes" data-statements="{escape(top.run)}">{fmt.UNAVAILABLE}: {escape(why)}</div>')
            continue
        for title, rows in (("by time", top.by_time), ("by WAL", top.by_wal)):
            body = "".join(
                f'<tr><td class="q">{escape(x.query)}</td><td>{fmt.num(x.calls_per_fire)}</td>'
                f"<td>{fmt.num(x.ms_per_fire)}</td><td>{fmt.num(x.mean_ms)}</td>"
                f"<td>{fmt.human_bytes(x.wal_bytes_per_fire)}</td><td>{fmt.num(x.fpi_per_fire)}</td>"
                f"<td>{fmt.num(x.dirtied_per_fire)}</td><td>{fmt.num(x.rows_per_call)}</td></tr>"
                for x in rows
            )
            out.append(
                f'<table class="statements" data-run="{escape(top.run)}" '
                f'data-by="{title}"><caption>{escape(title)}</caption>'
                f"{head}{body or '<tr><td colspan=8>none</td></tr>'}</table>"
            )
    out.append(f'<p class="meta">{escape(STATEMENTS_NOTE)}</p></section>')
    return "".join(out)


def section_narrative(report: Report) -> str:
    if not report.narrative:
        return ""
    items = "".join(f'<li>{escape(s.text)} <span class="cite">[{escape(s.cite)}]</span></li>' for s in report.narrative)
    return f'<section id="narrative"><h2>What this says</h2><ol class="say">{items}</ol></section>'


def section_figures(report: Report) -> str:
    if not report.figures:
        return ""
    legend = " ".join(f"{_swatch(r)}{escape(r.label)}" for r in report.runs)
    out = [f'<section id="figures"><h2>Figures</h2><div class="meta">Colours: {legend}</div>']
    for f in report.figures:
        if f.key in FIRST_SCREEN_FIGURES:  # drawn at the top; its caption here
            out.append(
                f'<p class="meta" data-caption="{f.key}"><b>Figure {f.number} · {escape(f.title)}</b> (at the top). '
                f"{escape(f.caption)}</p>"
            )
        else:
            out.append(_figure_html(f))
    out.append("</section>")
    return "".join(out)


def _resolved_json(r: Run) -> str:
    """A run's resolved workload and options, as the environment section shows them."""
    resolved = {"workload": r.workload, "options": r.config.get("options") or {}}
    return json.dumps(resolved, indent=2, sort_keys=True, default=str)


def section_environment(report: Report) -> str:
    if not report.runs:
        return ""
    rows = []
    for key, label in ENVIRONMENT_ROWS:
        values = [environment_value(r, key) for r in report.runs]
        cells = "".join(f'<td class="text">{escape(v)}</td>' for v in values)
        rows.append(f'<tr data-env="{key}"><td class="k">{escape(label)}</td>{cells}</tr>')
    out = [
        '<section id="environment-section"><h2>Environment</h2><table '
        f'id="environment">{_run_headers(report, "")}{"".join(rows)}</table>'
    ]
    for r in report.runs:
        settings = r.environment.get("postgres_settings") or {}
        body = "".join(
            f'<tr><td class="k">{escape(str(k))}</td><td class="text">{escape(str(v))}</td></tr>'
            for k, v in sorted(settings.items())
        )
        out.append(
            f"<details><summary>{_swatch(r)}{escape(r.label)}: resolved workload, options"
            + (f" and {len(settings)} Postgres settings" if settings else "")
            + "</summary>"
            f"<pre>{escape(_resolved_json(r))}</pre>"
            + (f'<table class="pgsettings">{body}</table>' if settings else "")
            + "</details>"
        )
    out.append("</section>")
    return "".join(out)


def section_migration(report: Report) -> str:
    """Migration dry-runs: the verdict and the comparison counts of every run that has a
    ``migration.json``. Absent for ordinary runs."""
    runs = [r for r in report.runs if r.migration]
    if not runs:
        return ""
    out = ['<section id="migration"><h2>Migration dry-run</h2>']
    for r in runs:
        m = r.migration or {}
        verdict = str(m.get("verdict", "?"))
        cls = "verdict-go" if verdict.upper() == "GO" else "verdict-nogo"
        out.append(f'<h3>{_swatch(r)}{escape(r.label)}</h3><div class="{cls}">{escape(verdict)}</div>')
        reasons = m.get("reasons") or []
        if reasons:
            out.append(
                '<div class="warnbox"><ul>' + "".join(f"<li>{escape(str(x))}</li>" for x in reasons) + "</ul></div>"
            )
        scalars = {k: v for k, v in m.items() if k not in ("verdict", "origin") and not isinstance(v, (dict, list))}
        counts = m.get("counts") if isinstance(m.get("counts"), dict) else {}
        body = "".join(
            f'<tr><td class="k">{escape(str(k))}</td><td>{escape(str(v))}</td></tr>'
            for k, v in {**scalars, **counts}.items()
        )
        if body:
            out.append(f'<table class="migration">{body}</table>')
        header, rows = migration_lag_rows(m)
        if rows:
            head = "".join(f"<th>{escape(h)}</th>" for h in header)
            cells = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>" for row in rows)
            out.append(f'<table class="migration-lag"><tr>{head}</tr>{cells}</table>')
        rest = {k: v for k, v in m.items() if k not in scalars and k not in ("verdict", "counts", "reasons")}
        if rest:
            out.append(
                "<details><summary>details</summary>"
                f"<pre>{escape(json.dumps(rest, indent=2, default=str))}</pre></details>"
            )
    out.append("</section>")
    return "".join(out)


def section_runs(report: Report) -> str:
    if not report.runs:
        return ""
    items = "".join(
        f"<li>{_swatch(r)}<b>{escape(r.label)}</b>: <code>{escape(str(r.path))}</code>"
        + (' <span class="bad">(files damaged: see the checks)</span>' if r.problems else "")
        + "</li>"
        for r in report.runs
    )
    return f'<section id="runs"><h2>Run directories</h2><ul>{items}</ul></section>'


# The page, in order. A new kind of run adds its renderer here.
def section_recommendation(report: Report) -> str:
    d = report.decision
    return blocks_html(recommendation_blocks(d), "recommendation") if d else ""


def section_gate(report: Report) -> str:
    d = report.decision
    return blocks_html(gate_blocks(d), "gate") if d else ""


def section_fairness(report: Report) -> str:
    d = report.decision
    return blocks_html(fairness_blocks(d, report.runs), "fairness") if d else ""


def section_why(report: Report) -> str:
    return blocks_html(why_blocks(report.runs), "why")


def section_per_day(report: Report) -> str:
    d = report.decision
    return blocks_html(per_day_blocks(d, report.runs), "per-day") if d else ""


SECTIONS: list[Callable[[Report], str]] = [
    section_header,
    section_first_screen,  # the answer, the per-design lines, the deciding pictures
    section_failures,
    # a sweep's, a capacity search's or a rehearsal's own verdict, right below the answer
    section_sweep_html,  # reports/sweep.py: only when the runs come from a `bench sweep`
    section_capacity_html,  # reports/capacity.py: only when the runs come from a `bench capacity`
    section_scale_html,  # reports/scale.py: only when the runs come from a `bench scale`
    section_migration,  # only for a `bench migrate dry-run`
    section_recommendation,  # reports/recommend.py: the reasons behind the answer
    section_gate,  # only with --fail-on
    section_checks,
    section_summary,
    section_neighbour_html,  # reports/neighbour.py: only with --neighbour, --readers or --soak
    section_narrative,
    section_bloat,
    section_statements,
    section_processes,
    section_fairness,
    section_why,  # reports/why.py: only beside a rejected alternative of the Composio article
    section_per_day,
    section_figures,
    section_notes,  # every warning once, with the figure it qualifies
    section_environment,
    section_runs,
]


def render_html(report: Report) -> str:
    body = "\n".join(s for s in (render(report) for render in SECTIONS) if s)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<link rel="icon" href="data:,">'
        f"<title>timerbench report · {escape(', '.join(r.label for r in report.runs))}</title>"
        f"<style>{CSS}</style></head><body><main>\n{body}\n</main></body></html>\n"
    )
