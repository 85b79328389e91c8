"""The sweep section (``bench sweep``): each backend's maximum sustainable rate beside
the pgbench ceiling, the per-rate table, and two figures (rate vs p99 lag, rate vs writes per
fire; one line per backend).

It appears only when the report's runs live in a sweep directory, i.e. one holding a
``sweep.json`` (``bench sweep`` writes its runs there; ``bench report runs/sweep-<ts>`` finds it
again). Like every report module it reads files only, never a scheduler.
"""

from __future__ import annotations

import base64
import json
from html import escape
from pathlib import Path
from typing import Any

from metrics.rundir import SWEEP as SWEEP_JSON
from reports import fmt
from reports.model import Report


def find_sweeps(report: Report) -> list[tuple[Path, dict[str, Any]]]:
    """Every distinct ``sweep.json`` beside the report's runs, in the order the runs come."""
    out: list[tuple[Path, dict[str, Any]]] = []
    seen: set[Path] = set()
    for r in report.runs:
        path = Path(r.path).parent / SWEEP_JSON
        key = path.resolve()
        if key in seen or not path.exists():
            continue
        seen.add(key)
        try:
            out.append((path, json.loads(path.read_text())))
        except (OSError, ValueError):
            continue
    return out


def max_rate_rows(data: dict[str, Any]) -> list[list[str]]:
    """Per backend: max sustainable rate, its share of the pgbench ceiling, where and why it stopped."""
    rows = []
    for name, b in (data.get("backends") or {}).items():
        slo = fmt.fixed(b.get("slo_p99_ms"), "{:,.0f} ms") + (f" ({b['slo_source']})" if b.get("slo_source") else "")
        rows.append(
            [
                name,
                fmt.fixed(b.get("max_sustainable_rate"), "{:,.0f}/s", "below the lowest rate"),
                fmt.pct(b.get("fraction_of_ceiling")),
                slo,
                fmt.fixed(b.get("declared_max_lag_s"), "{:g} s"),
                str(b.get("stop_reason") or fmt.MISSING),
                fmt.fixed(b.get("warmup_s"), "{:g} s"),
            ]
        )
    return rows


def rate_rows(data: dict[str, Any]) -> list[list[str]]:
    rows = []
    for name, b in (data.get("backends") or {}).items():
        for key, e in (b.get("rates") or {}).items():
            rows.append(
                [
                    name,
                    f"{key}/s",
                    fmt.fixed(e.get("offered"), "{:,.0f}/s"),
                    fmt.fixed(e.get("achieved"), "{:,.0f}/s"),
                    fmt.fixed(e.get("p99_ms"), "{:,.1f} ms"),
                    " / ".join(fmt.fixed(e.get(k), "{:,}") for k in ("late", "pending", "lost")),
                    fmt.fixed(e.get("writes_per_fire"), "{:.2f}"),
                    ("yes" if e.get("held") else f"no: {e.get('reason')}") + _earlier(e),
                    str(e.get("run_dir") or fmt.MISSING),
                ]
            )
    return rows


def _earlier(e: dict[str, Any]) -> str:
    """The runs of this rate before the last one (a retry after a rate was not held)."""
    earlier = e.get("earlier_attempts") or []
    if not earlier:
        return ""
    return " (after " + "; ".join(f"a run not held: {a.get('reason')}, {a.get('run_dir')}" for a in earlier) + ")"


def pgbench_rows(data: dict[str, Any]) -> list[list[str]]:
    pg = data.get("pgbench") or {}
    rows = []
    for r in pg.get("results") or []:
        if r.get("error"):
            rows.append(
                [str(r.get("batch")), fmt.fixed(r.get("rows")), fmt.MISSING, fmt.MISSING, f"error: {r['error']}"]
            )
        else:
            rows.append(
                [
                    str(r.get("batch")),
                    fmt.fixed(r.get("rows")),
                    fmt.fixed(r.get("tps"), "{:,.1f}"),
                    fmt.fixed(r.get("tps_x_batch")),
                    fmt.fixed(r.get("rearmed_per_s")),
                ]
            )
    return rows


def pgbench_note(data: dict[str, Any]) -> str:
    pg = data.get("pgbench") or {}
    if pg.get("skipped"):
        return f"pgbench ceiling skipped: {pg['skipped']}. Backends are shown without a ceiling."
    if not pg:
        return "pgbench ceiling not measured."
    return (
        f"pg_leased's claim_due + re-arm SQL driven by pgbench ({pg.get('version') or 'pgbench'}; "
        f"-c {pg.get('clients')} -j {pg.get('threads')} -T {pg.get('duration_s')}) against the same server, "
        f"in the same sweep. Ceiling: {fmt.fixed(pg.get('rows_per_s'))} rows re-armed/s (batch "
        f"{pg.get('best_batch')}). "
        "Every row is due and re-armed due again at once, so each claim finds a backlog: the figure is the "
        "cost of the SQL alone. One fire is one row claimed and re-armed."
    )


# -- figures -------------------------------------------------------------------------------------


def _series(data: dict[str, Any], field: str) -> dict[str, list[tuple[float, float, bool]]]:
    out: dict[str, list[tuple[float, float, bool]]] = {}
    for name, b in (data.get("backends") or {}).items():
        pts = [
            (float(e["rate"]), float(e[field]), bool(e.get("held")))
            for e in (b.get("rates") or {}).values()
            if e.get(field) is not None
        ]
        if pts:
            out[name] = sorted(pts)
    return out


def rate_figure(data: dict[str, Any], field: str, ylabel: str, log_y: bool, slo_ms: float | None) -> bytes | None:
    series = _series(data, field)
    if not series:
        return None
    from reports.plots import _png, plt, scheduler_colour

    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    for name, pts in series.items():
        colour = scheduler_colour(name)
        xs, ys = [p[0] for p in pts], [p[1] for p in pts]
        ax.plot(xs, ys, "-", color=colour, label=name)
        held = [p for p in pts if p[2]]
        failed = [p for p in pts if not p[2]]
        ax.scatter([p[0] for p in held], [p[1] for p in held], color=colour, zorder=3)
        ax.scatter(
            [p[0] for p in failed],
            [p[1] for p in failed],
            facecolors="white",
            edgecolors=colour,
            zorder=3,
            marker="X",
            s=60,
        )
    if slo_ms is not None:
        ax.axhline(slo_ms, color="#b3261e", linestyle="--", linewidth=1, label=f"SLO {slo_ms:g} ms (default)")
    ceiling = (data.get("pgbench") or {}).get("rows_per_s")
    if ceiling:
        ax.axvline(ceiling, color="#555", linestyle=":", linewidth=1.2, label=f"pgbench ceiling {ceiling:,.0f} rows/s")
    ax.set_xscale("log")
    rates = sorted({p[0] for pts in series.values() for p in pts})
    ax.set_xticks(rates + ([ceiling] if ceiling else []))
    ax.set_xticklabels([f"{r:,.0f}" for r in rates] + ([f"{ceiling:,.0f}"] if ceiling else []), fontsize=8)
    ax.minorticks_off()
    if log_y:
        ax.set_yscale("log")
    ax.set_xlabel("target fire rate (fires/s, log)")
    ax.set_ylabel(ylabel)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    try:
        return _png(fig)
    finally:
        plt.close(fig)


def figures(data: dict[str, Any]) -> list[tuple[str, str, str, bytes]]:
    """(key, title, caption, png) of the sweep's two figures (those with data)."""
    out = []
    lag = rate_figure(data, "p99_ms", "p99 lag (ms, log)", True, data.get("slo_p99_ms"))
    if lag:
        out.append(
            (
                "sweep-p99",
                "Rate vs p99 lag",
                "p99 lag of the measured window at each target rate; filled: held, ×: the rate that stopped the "
                "backend (not held). Dashed: the default SLO (a backend may have its own, see the table); dotted: "
                "the pgbench ceiling (rows re-armed/s) measured in the same sweep.",
                lag,
            )
        )
    writes = rate_figure(data, "writes_per_fire", "row writes per fire (ins + upd + del, heap + TOAST)", False, None)
    if writes:
        out.append(
            (
                "sweep-writes",
                "Rate vs writes per fire",
                "Inserts + updates + deletes of the scheduler's own tables per fire (TOAST chunks not counted), "
                "measured window. Backends without Postgres tables have no line; dotted: the pgbench ceiling.",
                writes,
            )
        )
    return out


# -- renderers -----------------------------------------------------------------------------------


def _cell_class(i: int, c: str) -> str:
    """The first column is the key; a cell that is not a number is text."""
    if i == 0:
        return "k"
    return "text" if not c[:1].isdigit() and c != fmt.MISSING else ""


def _html_table(header: list[str], rows: list[list[str]], table_id: str) -> str:
    head = "".join(f'<th class="{"k" if i == 0 else ""}">{escape(h)}</th>' for i, h in enumerate(header))
    body = "".join(
        "<tr>" + "".join(f'<td class="{_cell_class(i, c)}">{escape(c)}</td>' for i, c in enumerate(row)) + "</tr>"
        for row in rows
    )
    return f'<table id="{table_id}"><tr>{head}</tr>{body}</table>'


MAX_HEADER = [
    "backend",
    "max sustainable rate",
    "of pgbench ceiling",
    "p99 SLO",
    "declared bound (information)",
    "stopped because",
    "warm-up",
]
RATE_HEADER = [
    "backend",
    "target",
    "offered (due in window)",
    "achieved",
    "p99 lag",
    "late / pending / lost",
    "writes/fire",
    "held",
    "run directory",
]
PGBENCH_HEADER = ["batch", "table rows", "tps", "tps × batch", "re-armed rows/s"]


def section_sweep_html(report: Report) -> str:
    sweeps = find_sweeps(report)
    if not sweeps:
        return ""
    out = ['<section id="sweep"><h2>Saturation sweep</h2>']
    for path, data in sweeps:
        out.append(
            f'<p class="meta">{escape(str(path))} · rule: {escape(str(data.get("rule", "")))} · workload: '
            f"{escape(str((data.get('workload') or {}).get('note', '')))} · "
            f"{escape(str(data.get('duration')))} measured + {escape(str(data.get('warmup')))} warm-up per rate"
            + (f" ({escape(str(data['warmup_rule']))})" if data.get("warmup_rule") else "")
            + ("" if data.get("complete") else ' · <span class="bad">sweep incomplete</span>')
            + "</p>"
        )
        out.append("<h3>Maximum sustainable rate</h3>" + _html_table(MAX_HEADER, max_rate_rows(data), "sweep-max"))
        pg = data.get("pgbench") or {}
        box = "warnbox" if pg.get("skipped") or not pg else "okbox"
        out.append(f'<div class="{box}" id="pgbench-note">{escape(pgbench_note(data))}</div>')
        if pgbench_rows(data):
            out.append(
                "<h3>Database ceiling (pgbench)</h3>" + _html_table(PGBENCH_HEADER, pgbench_rows(data), "sweep-pgbench")
            )
        out.append("<h3>Every rate</h3>" + _html_table(RATE_HEADER, rate_rows(data), "sweep-rates"))
        for key, title, caption, png in figures(data):
            b64 = base64.b64encode(png).decode("ascii")
            out.append(
                f'<figure id="figure-{key}"><img class="plot" data-figure="{key}" alt="{escape(title)}" '
                f'src="data:image/png;base64,{b64}"><figcaption><b>{escape(title)}.</b> {escape(caption)}'
                "</figcaption></figure>"
            )
    out.append("</section>")
    return "".join(out)


def _md_table(header: list[str], rows: list[list[str]]) -> str:
    def cell(t: str) -> str:
        return str(t).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(["---"] * len(header)) + " |"]
    return "\n".join(lines + ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows])


def section_sweep_markdown(report: Report) -> str:
    sweeps = find_sweeps(report)
    if not sweeps:
        return ""
    out = ["## Saturation sweep"]
    for path, data in sweeps:
        out.append(
            f"`{path}` · rule: {data.get('rule', '')} · workload: {(data.get('workload') or {}).get('note', '')} · "
            f"{data.get('duration')} measured + {data.get('warmup')} warm-up per rate"
            + (f" ({data['warmup_rule']})" if data.get("warmup_rule") else "")
            + ("" if data.get("complete") else " · **sweep incomplete**")
        )
        out.append("### Maximum sustainable rate\n\n" + _md_table(MAX_HEADER, max_rate_rows(data)))
        out.append(pgbench_note(data))
        if pgbench_rows(data):
            out.append("### Database ceiling (pgbench)\n\n" + _md_table(PGBENCH_HEADER, pgbench_rows(data)))
        out.append("### Every rate\n\n" + _md_table(RATE_HEADER, rate_rows(data)))
    return "\n\n".join(out)
