"""The scale section (``bench scale``): per design, every step with its figures (arming, storage
and RSS per armed timer, claim cost, Postgres CPU per fire, lag of the window's fires and of the
moved long-horizon timers, temporal_shards' shards and payload), the log-log fit of each cost
against the population with its reading and what it predicts at the projected population, and
the step where the design hit a limit, with why, as a finding.

It appears only when the report's runs live in a scale directory (one holding a ``scale.json``).
Like every report module it reads files only.
"""

from __future__ import annotations

import base64
from html import escape
from pathlib import Path
from typing import Any

from reports import fmt
from reports.capacity import find_beside
from reports.decide import Block, blocks_html, blocks_markdown
from reports.model import Report

SCALE_JSON = "scale.json"  # harness.scale writes it beside its step runs
# series shown, in the order of harness.scale.SERIES (key, label, formatter)
SERIES: list[tuple[str, str]] = [
    ("claim_ms_per_call", "claim statement ms per claim"),
    ("claim_buffers_per_call", "claim buffers per claim"),
    ("pg_cpu_ms_per_fire", "Postgres CPU ms per fire"),
    ("lag_p99_ms", "lag p99, fires due in the window (ms)"),
    ("moved_lag_p99_ms", "lag p99, moved long-horizon timers (ms)"),
    ("storage_bytes", "storage, table + indexes + TOAST (bytes)"),
    ("rss_bytes", "run-process peak RSS (bytes)"),
    ("arm_us_per_timer", "arming µs per timer"),
]
READINGS = {
    "flat": "flat (slope ~0): the {axis} does not change it",
    "logarithmic": "logarithmic: grows with log {axis} (an index's depth), slowly",
    "sublinear": "sublinear: grows, slower than the {axis}",
    "linear": "linear (slope ~1): grows with the {axis}",
    "superlinear": "superlinear: grows faster than the {axis}",
    "falling": "falling: lower at the larger {axis} (a fixed cost spread, or noise: see the steps)",
    "fixed + linear": "a fixed cost plus a cost per timer",
}


def find_scale(report: Report) -> list[tuple[Path, dict[str, Any]]]:
    return find_beside(report, SCALE_JSON)


def _value(key: str, v: Any) -> str:
    if v is None:
        return fmt.MISSING
    if key.endswith("bytes_per_timer"):
        return f"{v:,.0f} B"
    if key.endswith("_bytes"):
        return fmt.human_bytes(v)
    if key.endswith("_ms") or key.endswith("ms_per_call") or key.endswith("ms_per_fire"):
        return f"{v:,.3g} ms" if v < 100 else f"{v:,.0f} ms"
    return f"{v:,.3g}" if abs(v) < 100 else f"{v:,.0f}"


def _count(n: float) -> str:
    for div, suffix in ((1e9, "b"), (1e6, "m"), (1e3, "k")):
        if n >= div:
            return f"{n / div:g}{suffix}"
    return f"{n:g}"


def _moved(f: dict[str, Any]) -> str:
    m = f.get("moves")
    if not m:
        return fmt.MISSING
    lag = m.get("lag_ms") or {}
    text = (
        f"{m['moves']:,} moves; {m['delivered']}/{m['due_in_window']} due in window fired, "
        f"p50 {fmt.lag(lag.get('p50'))}, p99 {fmt.lag(lag.get('p99'))}"
    )
    if m.get("fires_at_old_time"):
        text += f"; {m['fires_at_old_time']} fired at an old time (failure)"
    return text


def _temporal(f: dict[str, Any]) -> str:
    t = f.get("temporal")
    if not t:
        return fmt.MISSING if f.get("shards") is None else f"{f['shards']:g} shards"
    share = t.get("payload_share_of_limit")
    return (
        f"{fmt.fixed(t.get('shards'), '{:g}')} shards; payload max {fmt.human_bytes(t.get('max_payload_bytes'))}"
        + (f" ({100 * share:.1f}% of {fmt.human_bytes(t['payload_limit_bytes'])})" if share is not None else "")
        + f"; history max {fmt.fixed(t.get('max_history'), '{:,.0f}')}; forwarded: not exposed"
    )


def _arming(f: dict[str, Any]) -> str:
    a = f.get("arming")
    if not a:
        return fmt.MISSING
    return f"{a['seconds']:,.1f} s, {a['timers_per_s']:,.0f}/s" + (
        " (into the window)" if f.get("arming_before_window") is False else ""
    )


def design_blocks(name: str, d: dict[str, Any], data: dict[str, Any]) -> list[Block]:
    axis = data.get("axis", "population")
    project = data.get("project_population")
    rows = []
    for st in d.get("steps") or []:
        f = st.get("figures") or {}
        rows.append(
            [
                f"{st['population']:,}",
                f"{st['rate']:,.0f}/s",
                fmt.pct(st.get("long_horizon_share")),
                st.get("status", "?") + (f": {st['why']}" if st.get("why") else ""),
                _arming(f),
                _value("storage_bytes_per_timer", f.get("storage_bytes_per_timer")),
                _value("rss_bytes_per_timer", f.get("rss_bytes_per_timer")),
                _value("claim_ms_per_call", f.get("claim_ms_per_call")),
                _value("claim_buffers_per_call", f.get("claim_buffers_per_call")),
                _value("pg_cpu_ms_per_fire", f.get("pg_cpu_ms_per_fire")),
                f"{fmt.lag(f.get('lag_p50_ms'))} / {fmt.lag(f.get('lag_p99_ms'))}",
                _moved(f),
                _temporal(f),
                str(st.get("run_dir") or fmt.MISSING),
            ]
        )
    fits = d.get("fits") or {}
    fit_rows = []
    for key, label in SERIES:
        fit = fits.get(key)
        if not fit:
            continue
        se = fit.get("stderr")
        pred = fit.get("predicted")
        fit_rows.append(
            [
                label,
                f"{fit['slope']:+.2f}" + ("" if se is None else f" ± {se:.2f}"),
                READINGS.get(fit["reading"], fit["reading"]).format(axis=axis)
                + (f" ({fmt.human_bytes(fit['per_added'])} per added timer)" if fit.get("per_added") else ""),
                fmt.MISSING if pred is None else _value(key, pred),
                str(fit.get("points")),
            ]
        )
    limit = d.get("limit")
    head = f"{name}: " + (f"limit at {limit['at']}: {limit['why']}" if limit else "no limit reached over the steps run")
    out = [Block("h3", name), Block("strong", head)]
    out.append(
        Block(
            "table",
            header=[
                "population",
                "rate",
                "long-horizon",
                "step",
                "arming",
                "storage / timer",
                "RSS / timer",
                "claim ms / claim",
                "buffers / claim",
                "PG CPU / fire",
                "lag p50 / p99",
                "moved long-horizon timers",
                "temporal_shards",
                "run directory",
            ],
            rows=rows,
        )
    )
    if fit_rows:
        out.append(
            Block(
                "table",
                header=[
                    "cost",
                    f"log-log slope against the {axis}",
                    "reading",
                    f"predicted at {_count(project)} timers" if axis == "population" and project else "predicted",
                    "steps",
                ],
                rows=fit_rows,
            )
        )
    storage, rss = fits.get("storage_bytes"), fits.get("rss_bytes")
    if axis == "population" and project and storage and storage.get("predicted"):
        out.append(
            Block(
                "p",
                f"At {project:,} armed timers the fits predict {fmt.human_bytes(storage['predicted'])} of store "
                f"({storage['predicted'] / project:,.0f} B per timer)"
                + (
                    f" and {fmt.human_bytes(rss['predicted'])} of run-process memory"
                    if (rss or {}).get("predicted")
                    else ""
                )
                + ". A prediction from a few steps is a line through them: read it as an order of magnitude.",
            )
        )
    findings = [
        f"{st['population']:,} timers at {st['rate']:g}/s: {st['status']}: {st['why']}"
        for st in d.get("steps") or []
        if st.get("why")
    ]
    if findings:
        out.append(Block("list", items=findings))
    return out


def blocks(path: Path, data: dict[str, Any]) -> list[Block]:
    axis = data.get("axis", "population")
    head = (
        f"Populations {', '.join(f'{n:,}' for n in data.get('populations') or [])} at "
        f"{(data.get('rates') or [0])[0]:g} fires/s"
        if axis == "population"
        else f"Rates {', '.join(f'{r:g}/s' for r in data.get('rates') or [])} at "
        f"{(data.get('populations') or [0])[0]:,} timers"
    )
    out = [
        Block(
            "h2", "Scale: cost against the armed population" if axis == "population" else "Scale: cost against the rate"
        ),
        Block(
            "p",
            f"{path} · {head}; long-horizon share {data.get('long_horizon_share')} "
            f"({data.get('long_horizon_state_bytes')} B state, {100 * (data.get('move_share') or 0):.2g}% moved while "
            f"armed during the window) · {data.get('duration')} measured per step · rule: {data.get('rule')}"
            + ("" if data.get("complete") else " · scale incomplete"),
        ),
    ]
    for name, d in (data.get("designs") or {}).items():
        out += design_blocks(name, d, data)
    return out


def scale_figure(name: str, d: dict[str, Any], axis: str) -> bytes | None:
    """Each cost relative to its first step against the axis, log-log, with slopes 0 and 1 for reference."""
    done = [s for s in d.get("steps") or [] if s.get("status") in ("ok", "finding")]
    if len(done) < 2:
        return None
    from reports.plots import _png, plt

    fig, ax = plt.subplots(figsize=(7.5, 4.4))
    xs_all = [s[axis] for s in done]
    x0 = xs_all[0]
    plotted = 0
    for key, label in SERIES:
        pts = [(s[axis], (s.get("figures") or {}).get(key)) for s in done]
        pts = [(x, y) for x, y in pts if isinstance(y, (int, float)) and y > 0]
        if len(pts) < 2:
            continue
        y0 = pts[0][1]
        fit = (d.get("fits") or {}).get(key) or {}
        slope = fit.get("slope")
        ax.plot(
            [p[0] for p in pts],
            [p[1] / y0 for p in pts],
            "o-",
            label=label + ("" if slope is None else f" (slope {slope:+.2f})"),
        )
        plotted += 1
    if not plotted:
        plt.close(fig)
        return None
    x1 = max(xs_all)
    ax.plot([x0, x1], [1, 1], ":", color="#555", linewidth=1, label="slope 0 (flat)")
    ax.plot([x0, x1], [1, x1 / x0], "--", color="#555", linewidth=1, label="slope 1 (linear)")
    from matplotlib.ticker import FuncFormatter

    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(xs_all)
    ax.set_xticklabels([_count(x) if axis == "population" else f"{x:g}/s" for x in xs_all], fontsize=8)
    ax.minorticks_off()
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}×"))
    ax.set_xlabel("armed timers (log)" if axis == "population" else "fire rate (fires/s, log)")
    ax.set_ylabel("relative to the first step (log)")
    ax.set_title(name, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left")
    return _png(fig)


def section_scale_html(report: Report) -> str:
    out = []
    for path, data in find_scale(report):
        out.append(blocks_html(blocks(path, data), "scale"))
        axis = data.get("axis", "population")
        for name, d in (data.get("designs") or {}).items():
            png = scale_figure(name, d, axis)
            if png:
                key = f"scale-{name}"
                out.append(
                    f'<figure id="figure-{escape(key)}"><img class="plot" data-figure="{escape(key)}" '
                    f'alt="{escape(name)}: cost against the {axis}" '
                    f'src="data:image/png;base64,{base64.b64encode(png).decode("ascii")}"><figcaption>'
                    f"<b>{escape(name)}: each cost against the {axis}, log-log.</b> Relative to the first step; "
                    "dotted: flat (slope 0), dashed: linear (slope 1); the slope of each fit in the legend."
                    "</figcaption></figure>"
                )
    return "".join(out)


def section_scale_markdown(report: Report) -> str:
    return "\n\n".join(blocks_markdown(blocks(path, data)) for path, data in find_scale(report))
