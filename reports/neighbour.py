"""The neighbour and soak section: what each design did to the rest of its database.

With ``--neighbour``: per design, the neighbour's p99 against the same neighbour alone ("neighbour
p99 ×N against the neighbour alone"), its tx/s, p50 and p99.9 in both windows, and a figure of its
p99 over time. With ``--readers``: how many snapshots they held. With ``--soak``: per design and
per series, the first and last bin, the verdict (steady / growing) and the recovery after the
readers, marked interrupted when the soak did not finish. Files only (``summary.json``).
"""

from __future__ import annotations

import base64
from html import escape
from typing import Any

from metrics.neighbour import ratio_text
from metrics.soak import JUDGED
from reports import fmt
from reports.model import Report

NEIGHBOUR_HEADER = [
    "design",
    "neighbour p99 ×N",
    "p99 alone / beside",
    "p50 alone / beside",
    "p99.9 alone / beside",
    "tx/s alone / beside",
    "readers' snapshots",
]
SOAK_HEADER = ["design", "series", "first bin", "last bin", "verdict", "recovery after the readers"]
LABELS = {
    "dead_tuples": "dead tuples (n_dead_tup, sampled)",
    "bytes": "table + index + TOAST bytes",
    "claim_ms": "claim ms per call",
    "claim_buffers": "buffers per claim",
    "lag_p99_ms": "lag p99 ms",
    "neighbour_p99_ms": "neighbour p99 ms",
    "autovacuum_runs": "autovacuum runs per bin",
    "xmin_age_s": "oldest xmin age s (max per bin)",
}
NOTE = (
    "The neighbour is pgbench's TPC-B-like transaction (or the given script), open-loop at a fixed rate, in "
    "its own tables on the same server and database; its latency counts from each transaction's scheduled "
    "start (a stalled server shows as latency, not as fewer transactions). Alone: the same neighbour, for "
    "the window's length, before the scheduler's workers started. Server-wide figures (WAL, bytes written) "
    "include the neighbour's own writes in these runs."
)


def _pair(a: Any, b: Any, pattern: str = "{:,.1f}") -> str:
    return f"{fmt.fixed(a, pattern)} / {fmt.fixed(b, pattern)}"


def neighbour_rows(report: Report) -> list[list[str]]:
    rows = []
    for r in report.runs:
        n = r.summary.get("neighbour")
        if not n:
            continue
        b, w = n.get("baseline") or {}, n.get("run") or {}
        readers = r.summary.get("readers") or {}
        rows.append(
            [
                r.label,
                fmt.fixed(n.get("p99_ratio"), "×{:.2f}"),
                _pair(b.get("p99_ms"), w.get("p99_ms")) + " ms",
                _pair(b.get("p50_ms"), w.get("p50_ms")) + " ms",
                _pair(b.get("p999_ms"), w.get("p999_ms")) + " ms",
                _pair(b.get("tx_per_s"), w.get("tx_per_s"), "{:,.0f}"),
                f"{len(readers.get('holds') or [])} of {readers.get('hold_s'):g} s by {readers.get('count')}"
                if readers
                else "—",
            ]
        )
    return rows


def soak_rows(report: Report) -> list[list[str]]:
    rows = []
    for r in report.runs:
        s = r.summary.get("soak")
        if not s:
            continue
        label = r.label + ("" if s.get("state") == "complete" else " (interrupted: trends so far)")
        for key, title in LABELS.items():
            values = [v for v in (s.get("series") or {}).get(key) or [] if v is not None]
            if key not in (s.get("series") or {}):
                continue
            tr = (s.get("trends") or {}).get(key)
            rec = (s.get("recovery") or {}).get(key)
            if rec is None:
                recovery = "—"
            elif rec.get("recovered_after_s") is not None:
                recovery = f"{rec['recovered_after_s']:.0f} s"
            else:
                recovery = str(rec.get("note"))
            verdict = "—" if key not in JUDGED else (tr or {}).get("verdict") or "too few bins"
            rows.append(
                [
                    label,
                    title,
                    fmt.num(values[0]) if values else "—",
                    fmt.num(values[-1]) if values else "—",
                    verdict,
                    recovery,
                ]
            )
    return rows


def soak_meta(report: Report) -> list[str]:
    out = []
    for r in report.runs:
        s = r.summary.get("soak")
        if not s:
            continue
        span = s.get("trend_span") or {}
        readers = (
            ""
            if s.get("readers_start_s") is None
            else f"; readers held from {s['readers_start_s']:.0f} s to {s['readers_stop_s']:.0f} s"
        )
        out.append(
            f"{r.label}: {s.get('state')}, {len(s.get('t_s') or [])} bins of {s.get('bin_s'):g} s; verdicts over "
            f"{span.get('what')} ({span.get('start_s', 0):.0f}-{span.get('end_s', 0):.0f} s){readers}"
        )
    return out


def neighbour_figure(report: Report) -> bytes | None:
    """The neighbour's p99 per bin (soak bins, else minutes) beside each design, with the alone
    level dashed."""
    runs = [r for r in report.runs if r.summary.get("neighbour")]
    if not runs:
        return None
    from reports.plots import _png, _styles, plt

    fig, ax = plt.subplots(figsize=(9, 3.2))
    for r, st in zip(runs, _styles(runs)):
        n = r.summary["neighbour"]
        soak = r.summary.get("soak") or {}
        if soak.get("series", {}).get("neighbour_p99_ms"):
            t, y = soak["t_s"], soak["series"]["neighbour_p99_ms"]
        else:
            t, y = (n.get("per_minute") or {}).get("t_s") or [], (n.get("per_minute") or {}).get("p99_ms") or []
        pts = [(a, b) for a, b in zip(t, y) if b is not None]
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=3, lw=1.3, **st)
        base = (n.get("baseline") or {}).get("p99_ms")
        if base:
            ax.axhline(base, color=st["color"], ls=":", lw=1)
    ax.set_title("neighbour p99 (ms) per bin; dotted: the neighbour alone", fontsize=10, loc="left")
    ax.set_xlabel("seconds since the measured window opened")
    ax.grid(True, alpha=0.25)
    ax.legend(fontsize=8, loc="best")
    return _png(fig)


def _html_table(header: list[str], rows: list[list[str]], table_id: str) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table id="{table_id}"><tr>{head}</tr>{body}</table>'


def _md_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(["---"] * len(header)) + " |"]
    return "\n".join(lines + ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows])


def _sentences(report: Report) -> list[str]:
    return [f"{r.label}: {ratio_text(r.summary['neighbour'])}" for r in report.runs if r.summary.get("neighbour")]


def section_neighbour_html(report: Report) -> str:
    n_rows, s_rows = neighbour_rows(report), soak_rows(report)
    if not n_rows and not s_rows:
        return ""
    out = ['<section id="neighbour"><h2>The rest of the database: neighbour, readers, soak</h2>']
    if n_rows:
        out.append("<ul>" + "".join(f"<li>{escape(s)}</li>" for s in _sentences(report)) + "</ul>")
        out.append(_html_table(NEIGHBOUR_HEADER, n_rows, "neighbour-table"))
        out.append(f'<p class="meta">{escape(NOTE)}</p>')
        png = neighbour_figure(report)
        if png:
            b64 = base64.b64encode(png).decode("ascii")
            img = f'<img alt="neighbour p99 over time" src="data:image/png;base64,{b64}">'
            out.append(f'<figure id="fig-neighbour">{img}</figure>')
    if s_rows:
        out.append("<h3>Soak trends</h3>")
        out.append("<ul>" + "".join(f"<li>{escape(m)}</li>" for m in soak_meta(report)) + "</ul>")
        out.append(_html_table(SOAK_HEADER, s_rows, "soak-table"))
    out.append("</section>")
    return "\n".join(out)


def neighbour_summary_markdown(report: Report) -> str:
    """The summary's lines: each design's neighbour ratio and each soak's verdicts, one line each."""
    lines = [f"- {s}" for s in _sentences(report)]
    for r in report.runs:
        s = r.summary.get("soak")
        if not s:
            continue
        verdicts = ", ".join(
            f"{LABELS[k].split(' (')[0]} {v['verdict']}" for k, v in (s.get("trends") or {}).items() if v.get("verdict")
        )
        state = "" if s.get("state") == "complete" else " (interrupted: trends so far)"
        lines.append(f"- {r.label} soak{state}: {verdicts or 'too few bins to judge'}")
    return "\n".join(lines)


def section_neighbour_markdown(report: Report) -> str:
    n_rows, s_rows = neighbour_rows(report), soak_rows(report)
    if not n_rows and not s_rows:
        return ""
    out = ["## The rest of the database: neighbour, readers, soak"]
    if n_rows:
        out.append("\n".join(f"- {s}" for s in _sentences(report)))
        out.append(_md_table(NEIGHBOUR_HEADER, n_rows))
        out.append(NOTE)
    if s_rows:
        out.append("### Soak trends")
        out.append("\n".join(f"- {m}" for m in soak_meta(report)))
        out.append(_md_table(SOAK_HEADER, s_rows))
    return "\n\n".join(out)
