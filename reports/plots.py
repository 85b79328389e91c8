"""The report's figures: matplotlib (Agg, no display), PNG bytes, one line per run and one
colour per scheduler in every figure. Time axes are seconds since the run started; the warm-up
(excluded from every summary figure) is shaded."""

from __future__ import annotations

import io
import zlib
from collections.abc import Callable
from dataclasses import dataclass

import matplotlib

matplotlib.use("Agg")  # before pyplot: headless, no display needed

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from reports.load import Run  # noqa: E402

# Fixed colours for the known designs so a scheduler looks the same in every report.
SCHEDULER_COLOURS = {
    "pg_queue": "#d62728",  # red: the "before"
    "pg_leased": "#1f77b4",  # blue
    "pg_partitioned": "#aec7e8",  # light blue: pg_leased split
    "temporal_shards": "#2ca02c",  # green
    "memory": "#7f7f7f",  # grey: the harness reference
}
_SPARE = ["#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#bcbd22"]
_LINESTYLES = ["-", "--", ":", "-."]  # second, third ... run of the same scheduler
DPI = 100


def scheduler_colour(name: str) -> str:
    if name in SCHEDULER_COLOURS:
        return SCHEDULER_COLOURS[name]
    return _SPARE[zlib.crc32(name.encode()) % len(_SPARE)]  # stable across reports


def _styles(runs: list[Run]) -> list[dict]:
    seen: dict[str, int] = {}
    out = []
    for r in runs:
        n = seen.get(r.scheduler, 0)
        seen[r.scheduler] = n + 1
        out.append(
            {"color": scheduler_colour(r.scheduler), "linestyle": _LINESTYLES[n % len(_LINESTYLES)], "label": r.label}
        )
    return out


@dataclass
class Figure:
    key: str
    title: str
    caption: str
    png: bytes
    number: int = 0


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def _shade_warmup(ax, runs: list[Run]) -> None:
    warm = max((r.warmup_s for r in runs), default=0.0)
    if warm > 0:
        ax.axvspan(0, warm, color="#000000", alpha=0.06, lw=0)
        ax.text(warm, 1.0, " warm-up ends", transform=ax.get_xaxis_transform(), fontsize=7, va="top", color="#555")


def _shade_faults(ax, runs: list[Run]) -> None:
    """Each injected fault (``bench run --fault``) as a shaded span, in its run's colour, labelled
    with its spec; an instant fault gets a visible minimum width."""
    from metrics.faults import fault_spans

    for r, st in zip(runs, _styles(runs)):
        spans = fault_spans(r.path)
        s = r.samples
        if not spans or s.empty:
            continue
        origin = float((s["t"] - s["elapsed_s"]).median())  # the samples' elapsed_s = t - origin
        for spec, start, end in spans:
            a, b = start - origin, max(end - origin, start - origin + 0.3)
            ax.axvspan(a, b, color=st["color"], alpha=0.15, lw=0)
            ax.text(
                a,
                0.97,
                f" {spec}",
                transform=ax.get_xaxis_transform(),
                fontsize=6.5,
                va="top",
                rotation=90,
                color=st["color"],
            )


def _no_data(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", color="#666", fontsize=10)


def lag_cdf(runs: list[Run]) -> bytes:
    fig, ax = plt.subplots(figsize=(9, 4.2))
    drawn = False
    for r, st in zip(runs, _styles(runs)):
        every = np.sort(r.measured_lags_ms.to_numpy())
        total = every.size  # every fire due in the window: an undelivered one (inf) keeps the curve below 1
        lags = every[np.isfinite(every) & (every > 0)]  # a log axis has no zero; a 0 ms lag is below any plotted value
        if lags.size == 0:
            continue
        y = (np.arange(1, lags.size + 1) + int(np.sum(every <= 0))) / total
        if lags.size > 5000:  # thin the line, keep the tail exact
            idx = np.unique(
                np.concatenate(
                    [np.linspace(0, lags.size - 1, 4000).astype(int), np.arange(max(0, lags.size - 1000), lags.size)]
                )
            )
            lags, y = lags[idx], y[idx]
        ax.step(lags, y, where="post", **st)
        drawn = True
    ax.set_xscale("log")
    ax.set_xlabel("fire lag (ms, log scale) — every fire due in the measured window")
    ax.set_ylabel("share of due fires with lag ≤ x")
    ax.set_ylim(0, 1.01)
    for q in (0.5, 0.99):
        ax.axhline(q, color="#999", lw=0.6, ls=":")
    ax.grid(True, which="both", alpha=0.25)
    if drawn:
        ax.legend(fontsize=8, loc="lower right")
    else:
        _no_data(ax, "no fires recorded in the measured window")
    return _png(fig)


def _time_series(
    runs: list[Run],
    panels: list[tuple[str, Callable[[Run], object], str]],
    logy: bool = False,
    extra: Callable | None = None,
    ylabel_fmt=None,
) -> bytes:
    fig, axes = plt.subplots(len(panels), 1, figsize=(9, 3.2 * len(panels)), sharex=True, squeeze=False)
    for ax, (title, series, empty_note) in zip(axes[:, 0], panels):
        drawn = False
        for r, st in zip(runs, _styles(runs)):
            df = series(r)
            if df is None or len(df) == 0:
                continue
            ax.plot(df["elapsed_s"], df["value"], lw=1.3, **st)
            drawn = True
            if extra:
                extra(ax, r, st)
        ax.set_title(title, fontsize=10, loc="left")
        ax.grid(True, alpha=0.25)
        if drawn:
            _shade_warmup(ax, runs)
            _shade_faults(ax, runs)
            if logy:
                ax.set_yscale("symlog", linthresh=1.0)
            if ylabel_fmt:
                ax.yaxis.set_major_formatter(ylabel_fmt)
            ax.legend(fontsize=8, loc="best")
        else:
            _no_data(ax, empty_note)
    axes[-1, 0].set_xlabel("seconds since the run started")
    return _png(fig)


def lag_over_time(runs: list[Run]) -> bytes:
    return _time_series(
        runs,
        [
            ("lag p99 (ms), per sample", lambda r: r.run_metric("lag_p99_ms"), "no lag samples"),
            ("lag p50 (ms), per sample", lambda r: r.run_metric("lag_p50_ms"), "no lag samples"),
        ],
        logy=True,
    )


def fire_rate_over_time(runs: list[Run]) -> bytes:
    def target(ax, r: Run, st: dict) -> None:
        t = r.summary.get("target_rate")
        if t:
            ax.axhline(float(t), color=st["color"], lw=0.8, ls=(0, (1, 3)))

    return _time_series(
        runs,
        [
            ("achieved fires/s (dotted: each run's target)", lambda r: r.run_metric("fires_per_s"), "no rate samples"),
            (
                "offered fires/s: fires that became due (dotted: each run's target)",
                lambda r: r.offered_per_s(),
                "no fires recorded",
            ),
        ],
        extra=target,
    )


_NO_TABLES = "no Postgres tables in these runs"


def dead_tuples_over_time(runs: list[Run]) -> bytes:
    return _time_series(
        runs,
        [
            (
                "dead tuples, tables (sum over the run's tables)",
                lambda r: r.relation_metric("n_dead_tup", toast=False),
                _NO_TABLES,
            ),
            (
                "dead tuples, TOAST (sum over the tables' TOAST)",
                lambda r: r.relation_metric("n_dead_tup", toast=True),
                "no TOAST tables in these runs",
            ),
        ],
    )


def hot_ratio_series(r: Run):
    """HOT share of all updates since the run started, over the run's tables (not TOAST, where
    Postgres does no HOT): cumulative HOT updates over cumulative updates."""
    hot = r.relation_metric("n_tup_hot_upd", toast=False)
    upd = r.relation_metric("n_tup_upd", toast=False)
    if len(hot) == 0 or len(upd) == 0:
        return None
    m = hot.merge(upd, on="elapsed_s", suffixes=("_hot", "_upd"))
    m = m[m["value_upd"] > 0]
    return m.assign(value=m["value_hot"] / m["value_upd"])[["elapsed_s", "value"]]


def hot_ratio_over_time(runs: list[Run]) -> bytes:
    from matplotlib.ticker import PercentFormatter

    return _time_series(
        runs,
        [
            ("HOT updates / all updates, cumulative, tables", hot_ratio_series, _NO_TABLES),
        ],
        ylabel_fmt=PercentFormatter(1.0),
    )


def sizes_over_time(runs: list[Run]) -> bytes:
    from matplotlib.ticker import FuncFormatter

    mib = FuncFormatter(lambda v, _: f"{v / 2**20:.1f} MiB")

    def total(metric: str):
        def read(r: Run):
            a, b = r.relation_metric(metric, toast=False), r.relation_metric(metric, toast=True)
            if len(b) == 0:
                return a
            m = a.merge(b, on="elapsed_s", how="outer", suffixes=("", "_t")).fillna(0.0)
            return m.assign(value=m["value"] + m["value_t"])[["elapsed_s", "value"]]

        return read

    return _time_series(
        runs,
        [
            ("table size incl. TOAST", total("table_bytes"), _NO_TABLES),
            ("index size", total("index_bytes"), _NO_TABLES),
        ],
        ylabel_fmt=mib,
    )


ARTICLE_BATCH_SIZES = (200, 250)  # batch-200-250: "Our actual batches contain about 200 to 250 timers" (556/s)
_HATCHES = {"-": None, "--": "//", ":": "..", "-.": "xx"}  # a second run of one scheduler, as its line style


def has_batch_sizes(runs: list[Run]) -> bool:
    return any((b := r.batch_sizes()) and b["batches"] > 0 for r in runs)


def batch_size_histogram(runs: list[Run]) -> bytes:
    """Share of batches by size (bins of the backend's gauges) in the measured window, one bar
    group per run, the Composio article's 200-250 shaded; the legend says each run's mean and why its
    batches closed."""
    fig, ax = plt.subplots(figsize=(9, 4.2))
    drawn = [(r, st, b) for r, st in zip(runs, _styles(runs)) if (b := r.batch_sizes()) and b["batches"] > 0]
    lo, hi = ARTICLE_BATCH_SIZES
    ax.axvspan(
        lo, hi, color="#f2c14e", alpha=0.3, lw=0, label=f"the Composio article: {lo}-{hi} timers a batch at 556 fires/s"
    )
    for j, (r, st, b) in enumerate(drawn):
        width = float(b["bin_width"])
        edges = np.array(sorted(b["bins"]), dtype=float)
        share = np.array([b["bins"][int(e)] for e in edges]) / b["batches"]
        closed = ", ".join(f"{why.replace('_', ' ')} {n / b['batches']:.0%}" for why, n in b["closed"].items())
        label = f"{r.label}: {b['batches']:,.0f} batches, mean {b['mean']:,.0f}" + (
            f"; closed {closed}" if closed else ""
        )
        ax.bar(
            edges - width + width * (j + 0.5) / len(drawn),
            share,
            width=width / len(drawn),
            color=st["color"],
            hatch=_HATCHES.get(st["linestyle"]),
            edgecolor="white",
            lw=0.4,
            label=label,
        )
    ax.set_xlabel("timers in a batch (bins of 25, named by their upper edge) — measured window")
    ax.set_ylabel("share of the run's batches")
    ax.set_xlim(left=0)
    ax.grid(True, axis="y", alpha=0.25)
    ax.legend(fontsize=8, loc="best")
    return _png(fig)


# key, title, caption, renderer. The order is the figure numbering the narrative cites.
FIGURE_SPECS: list[tuple[str, str, str, Callable[[list[Run]], bytes]]] = [
    (
        "lag_cdf",
        "Lag distribution",
        "Cumulative distribution of the lag of every fire due in the measured window (warm-up excluded); log x. Lag = "
        "fired − max(due, armed); a fire never delivered counts as infinitely late, so its run's curve stays below 1.",
        lag_cdf,
    ),
    (
        "lag_over_time",
        "Lag p50 and p99 over time",
        "Per-sample lag percentiles as the sampler recorded them, warm-up shaded.",
        lag_over_time,
    ),
    (
        "fire_rate",
        "Achieved and offered fire rate over time",
        "Top: fires received per second per sample. Bottom: fires that became due per second, from the fire log (the "
        "load the workload offered; with fixed cadence it stays at the target however late a backend is). The dotted "
        "line is each run's target.",
        fire_rate_over_time,
    ),
    (
        "dead_tuples",
        "Dead tuples over time",
        "n_dead_tup summed over each run's tables (top) and their TOAST tables (bottom).",
        dead_tuples_over_time,
    ),
    (
        "hot_ratio",
        "HOT ratio over time",
        "Share of updates that were heap-only (HOT), cumulative since the run started.",
        hot_ratio_over_time,
    ),
    (
        "sizes",
        "Table and index size over time",
        "Heap size (pg_relation_size) of each run's tables plus their TOAST tables (top) and the size of their indexes "
        "(bottom), as sampled.",
        sizes_over_time,
    ),
]


# Figures only some runs can have: (key, title, caption, renderer, whether these runs have it),
# numbered after FIGURE_SPECS in this order when present.
# The cost bars: what each store wrote per fire, in two units that do not add up together.
COST_WRITES = (
    ("Postgres heap", ("per_fire", "heap_writes"), "#4c72b0"),
    ("Postgres TOAST", ("per_fire", "toast_writes"), "#8da0cb"),
    ("Temporal persistence", ("servers", "temporal", "per_fire", "persistence_writes"), "#55a868"),
)
COST_BYTES = (
    ("Postgres WAL", ("per_fire", "wal_bytes"), "#4c72b0"),
    ("Temporal (kernel count)", ("servers", "temporal", "per_fire", "write_bytes"), "#55a868"),
)


def _dig(summary: dict, path: tuple[str, ...]) -> float | None:
    v: object = summary
    for key in path:
        v = v.get(key) if isinstance(v, dict) else None
    return float(v) if isinstance(v, int | float) and np.isfinite(v) else None


def has_cost_by_store(runs: list[Run]) -> bool:
    return any(_dig(r.summary, path) for r in runs for _, path, _ in COST_WRITES + COST_BYTES)


def cost_by_store(runs: list[Run]) -> bytes:
    """Per run, one stacked bar per unit: the writes and the bytes each store paid per fire."""
    fig, axes = plt.subplots(1, 2, figsize=(9, 0.9 + 0.45 * max(2, len(runs))))
    labels = [r.label for r in runs]
    y = np.arange(len(runs))
    for ax, parts, unit in ((axes[0], COST_WRITES, "row writes per fire"), (axes[1], COST_BYTES, "bytes per fire")):
        left = np.zeros(len(runs))
        for name, path, colour in parts:
            vals = np.array([_dig(r.summary, path) or 0.0 for r in runs])
            if vals.any():
                ax.barh(y, vals, left=left, color=colour, label=name, height=0.6)
                left += vals
        ax.set_yticks(y, labels, fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel(unit)
        ax.grid(True, axis="x", alpha=0.25)
        if left.any():
            ax.legend(fontsize=7, loc="lower right")
        else:
            _no_data(ax, "not measured")
    axes[1].set_yticks(y, [""] * len(runs))
    fig.tight_layout()
    return _png(fig)


OPTIONAL_FIGURE_SPECS: list[tuple[str, str, str, Callable[[list[Run]], bytes], Callable[[list[Run]], bool]]] = [
    (
        "batch_sizes",
        "Batch sizes",
        "Share of the batches each backend handed to its processors by size, in the measured window "
        "(from the backend's batch counters: temporal_shards counts each flushed batch once, with the reason "
        "it closed: full at its batch size, or its oldest timer had waited MaxLag). Shaded: the 200-250 timers "
        "a batch the Composio article reports at 556 fires/s. At a steady rate a shard flushes about every "
        "MaxLag, so its batches hold about rate × MaxLag / shards timers.",
        batch_size_histogram,
        has_batch_sizes,
    ),
    (
        "cost_by_store",
        "Cost per fire by store",
        "What each fire cost each store over the measured window: row writes (the design's heap rows, their "
        "TOAST chunks, Temporal's persistence writes) and bytes (Postgres WAL, and what the kernel charged "
        "Temporal's process). The two units do not add up together; Table 1 has every figure of the bill.",
        cost_by_store,
        has_cost_by_store,
    ),
]


def figure_number(key: str) -> int:
    return next(i for i, spec in enumerate(FIGURE_SPECS, 1) if spec[0] == key)


def figure_plan(runs: list[Run]) -> list[tuple[int, str, str, str, Callable[[list[Run]], bytes]]]:
    """The figures a report of these runs shows, in order, not yet rendered: ``(number, key, title,
    caption, renderer)``; every fixed figure, then the optional ones these runs have."""
    plan = [(i, key, title, caption, render) for i, (key, title, caption, render) in enumerate(FIGURE_SPECS, 1)]
    for key, title, caption, render, present in OPTIONAL_FIGURE_SPECS:
        if present(runs):
            plan.append((len(plan) + 1, key, title, caption, render))
    return plan


def render_figures(runs: list[Run]) -> list[Figure]:
    return [Figure(key, title, caption, render(runs), number=n) for n, key, title, caption, render in figure_plan(runs)]


def tenant_p99(runs: list[Run]) -> bytes:
    """Per-tenant lag p99, tenants ordered by how many fires they had due (largest first): a fair
    design is a flat line; a starved tenant is a spike, a never-delivered one a cross at the top."""
    from reports.thresholds import run_scorecard

    fig, ax = plt.subplots(figsize=(9, 4.2))
    drawn = False
    top = 1.0
    cards = [(r, st, run_scorecard(r).tenants) for r, st in zip(runs, _styles(runs))]
    for _, _, t in cards:
        finite = t["p99_ms"][np.isfinite(t["p99_ms"])] if len(t) else []
        if len(finite):
            top = max(top, float(np.max(finite)))
    for _, st, t in cards:
        if len(t) == 0:
            continue
        rank = np.arange(1, len(t) + 1)
        p99 = t["p99_ms"].to_numpy(float)
        finite = np.isfinite(p99)
        ax.plot(rank[finite], np.maximum(p99[finite], 0.1), marker="o", markersize=3, **st)
        if (~finite).any():
            ax.scatter(rank[~finite], np.full((~finite).sum(), top * 2), marker="x", color=st["color"], s=30)
        drawn = True
    if not drawn:
        _no_data(ax, "no fires were due in the measured windows")
    ax.set_yscale("log")
    ax.set_xlabel("tenant, by fires due in the window (largest first)")
    ax.set_ylabel("lag p99 (ms)")
    ax.grid(True, which="both", alpha=0.3)
    if drawn:
        ax.legend(fontsize=8)
    return _png(fig)


FIGURE_SPECS.append(
    (
        "tenant_p99",
        "Lag p99 per tenant",
        "Each tenant's lag p99 over its fires due in the measured window, tenants ordered by size (largest first). A "
        "flat line is a fair design; a cross at the top is a tenant with a fire never delivered.",
        tenant_p99,
    ),
)


def overloaded(run: Run) -> bool:
    """Offered more than it achieved (the summary's rate rule failed on achieved vs offered)."""
    offered, achieved = run.summary.get("offered_rate"), run.summary.get("achieved_rate")
    return bool(offered and achieved is not None and achieved < 0.95 * float(offered))


def overload_profile(runs: list[Run]) -> bytes:
    """Goodput, backlog and work per fire over time, for the runs offered more than they achieved:
    congestion collapse shows as goodput falling while the backlog and the work per fire climb."""
    over = [r for r in runs if overloaded(r)] or runs
    return _time_series(
        over,
        [
            ("goodput (fires delivered per second)", lambda r: r.run_metric("fires_per_s"), "no fire-rate samples"),
            ("backlog (fires due, not yet delivered)", lambda r: r.backlog(), "no fire log"),
            (
                "row writes per fire delivered (inserts + updates + deletes of the design's tables)",
                lambda r: r.work_per_fire(("n_tup_ins", "n_tup_upd", "n_tup_del")),
                "no tables (memory) or no samples",
            ),
        ],
    )


OVERLOAD_SPEC = (
    "overload",
    "Overload profile",
    "Only for runs offered more than they achieved (achieved < 95% of offered). Top: goodput; middle: the "
    "backlog of fires due and not delivered (from the fire log); bottom: row writes per fire delivered, "
    "sample to sample. A design that collapses under overload shows goodput falling while the backlog and "
    "the work per fire climb; one that degrades gracefully keeps its goodput and lets lag grow.",
    overload_profile,
)


def has_overload(runs: list[Run]) -> bool:
    return any(overloaded(r) for r in runs)


OPTIONAL_FIGURE_SPECS.insert(0, (*OVERLOAD_SPEC, has_overload))  # the overload profile first, as before
