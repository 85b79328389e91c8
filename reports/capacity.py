"""The capacity section (``bench capacity``): the rate found, its bracket, its share of
the pgbench ceiling, and every step of the search with the test that decided it (the SLO checks
and the lag trend), plus rate vs p99 lag and rate vs writes per fire.

It appears only when the report's runs live in a capacity directory (one holding a
``capacity.json``). Like every report module it reads files only.
"""

from __future__ import annotations

import base64
import json
from html import escape
from pathlib import Path
from typing import Any

from reports import fmt
from reports.decide import Block, blocks_html, blocks_markdown
from reports.model import Report
from reports.sweep import rate_figure

CAPACITY_JSON = "capacity.json"  # harness.capacity writes it beside its step runs


def find_capacity(report: Report) -> list[tuple[Path, dict[str, Any]]]:
    return find_beside(report, CAPACITY_JSON)


def find_beside(report: Report, name: str) -> list[tuple[Path, dict[str, Any]]]:
    """The JSON file ``name`` beside the report's runs (a search's or a scale's), once each."""
    out: list[tuple[Path, dict[str, Any]]] = []
    seen: set[Path] = set()
    for r in report.runs:
        path = Path(r.path).parent / name
        if path.resolve() in seen or not path.exists():
            continue
        seen.add(path.resolve())
        try:
            out.append((path, json.loads(path.read_text())))
        except (OSError, ValueError):
            continue
    return out


def _trend(step: dict[str, Any]) -> str:
    t = (step.get("figures") or {}).get("trend")
    if not t or t.get("climb_s") is None:
        return fmt.MISSING
    return f"{t['climb_s']:+.2f} s ± {t['stderr_climb_s']:.2f} (limit {t['limit_s']:.2f} s)" + (
        ": rising" if t.get("rising") else ""
    )


def blocks(path: Path, data: dict[str, Any]) -> list[Block]:
    s = data.get("search") or {}
    found = s.get("rate")
    ceiling = (data.get("pgbench") or {}).get("rows_per_s")
    head = (
        f"{data.get('scheduler')}: "
        + (f"{found:,.0f} fires/s sustained" if found else "no rate found")
        + (f", held at {s['held_below']:,.0f}/s" if s.get("held_below") else "")
        + (f" and not at {s['failed_at']:,.0f}/s" if s.get("failed_at") else "")
        + (
            f"; {100 * found / ceiling:.1f}% of the pgbench ceiling ({ceiling:,.0f} rows re-armed/s)"
            if found and ceiling
            else ""
        )
        + f". {s.get('stop_reason') or ''}"
    )
    rows = []
    for st in s.get("steps") or []:
        f = st.get("figures") or {}
        rows.append(
            [
                f"{st['rate']:,.0f}/s" + (" (confirmation)" if st.get("confirmation") else ""),
                fmt.fixed(f.get("offered"), "{:,.0f}/s"),
                fmt.fixed(f.get("achieved"), "{:,.0f}/s"),
                fmt.lag(f.get("p99_ms")),
                fmt.fixed(f.get("lost"), "{:,}"),
                fmt.fixed(f.get("writes_per_fire"), "{:.2f}"),
                _trend(st),
                "yes" if st.get("held") else f"no: {st.get('why')}",
                str(st.get("run_dir") or fmt.MISSING),
            ]
        )
    return [
        Block("h2", "Capacity search"),
        Block("strong", head),
        Block(
            "p",
            f"{path} · SLO: {data.get('slo')}"
            + (
                f" (the design's own declared bound, for information: {data['declared_max_lag_s']:g} s)"
                if data.get("declared_max_lag_s") is not None
                else ""
            )
            + f" · rule: {data.get('rule')} · {data.get('duration')} measured + "
            f"{data.get('warmup_s')} s warm-up per step" + ("" if data.get("complete") else " · search incomplete"),
        ),
        *([] if data.get("scheduler") == "memory" else [Block("p", _harness_line(data.get("harness"), found))]),
        Block(
            "table",
            header=[
                "step",
                "offered",
                "achieved",
                "p99 lag",
                "lost",
                "writes/fire",
                "lag trend over the window",
                "sustained",
                "run directory",
            ],
            rows=rows,
        ),
    ]


def _harness_line(h: dict[str, Any] | None, found: float | None) -> str:
    """The harness's own ceiling at 3x the rate found (bench capacity's calibration)."""
    if not h:
        return (
            "Harness ceiling: not measured (`--no-calibrate`, or no rate found); "
            "`bench calibrate` with the steps' workload at 3x the rate found measures it."
        )
    if h.get("achieved") is None:
        return f"Harness ceiling: the calibration run failed (exit {h.get('exit_code')}): not measured."
    held = h.get("held")
    cores = h.get("cores")
    text = (
        f"Harness ceiling: the memory scheduler (no store) on the same workload "
        f"{'held' if held else 'did not hold'} {h.get('offered'):,.0f} fires/s (3× the rate found; achieved "
        f"{h['achieved']:,.0f}/s" + ("" if cores is None else f", harness process {cores:.2f} core") + "). "
    )
    if held:
        return text + "The rate found is the backend's, not the harness's."
    if found and found > h["achieved"] / 3:
        return text + "The rate found is above a third of it: it may be the harness's limit, not the backend's."
    return text + "The rate found is below a third of it."


def _as_sweep(data: dict[str, Any]) -> dict[str, Any]:
    """The steps in the shape of sweep.json, for the shared rate figures."""
    rates = {}
    for i, st in enumerate((data.get("search") or {}).get("steps") or []):
        f = st.get("figures") or {}
        p99 = f.get("p99_ms")
        rates[f"{st['rate']:g}#{i}"] = {
            "rate": st["rate"],
            "held": st.get("held"),
            "p99_ms": p99 if isinstance(p99, (int, float)) else None,
            "writes_per_fire": f.get("writes_per_fire"),
        }
    return {"backends": {data.get("scheduler") or "?": {"rates": rates}}, "pgbench": data.get("pgbench")}


def section_capacity_html(report: Report) -> str:
    out = []
    for path, data in find_capacity(report):
        out.append(blocks_html(blocks(path, data), "capacity"))
        for key, field, label, log_y in (
            ("capacity-p99", "p99_ms", "p99 lag (ms, log)", True),
            ("capacity-writes", "writes_per_fire", "row writes per fire", False),
        ):
            png = rate_figure(_as_sweep(data), field, label, log_y, None)
            if png:
                out.append(
                    f'<figure id="figure-{key}"><img class="plot" data-figure="{key}" alt="{escape(label)}" '
                    f'src="data:image/png;base64,{base64.b64encode(png).decode("ascii")}"><figcaption>'
                    f"<b>Rate vs {escape(label)}.</b> Every step of the search; filled: sustained, ×: not "
                    "sustained; dotted: the pgbench ceiling.</figcaption></figure>"
                )
    return "".join(out)


def section_capacity_markdown(report: Report) -> str:
    return "\n\n".join(blocks_markdown(blocks(path, data)) for path, data in find_capacity(report))
