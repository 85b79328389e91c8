""""What this says": sentences generated from the numbers, each citing the table row or figure
it rests on. A sentence is only written when its figures exist; nothing is inferred beyond them
(no "faster because ..."), and ties are said as ties."""

from __future__ import annotations

from dataclasses import dataclass

from reports.load import Run
from reports.plots import figure_number
from reports import fmt
from reports.tables import RATE_HELD_FRACTION, SummaryTable, rate_held, rate_share


@dataclass
class Sentence:
    text: str
    cite: str  # "Table 1, Lag p99" / "Figure 4"


def _t1(*rows: str) -> str:
    return "Table 1: " + ", ".join(rows)


def _fig(key: str) -> str:
    return f"Figure {figure_number(key)}"


def dead_tuple_growth(run: Run, toast: bool = False) -> tuple[float, float, float, float] | None:
    """(first, last, seconds, per_second) of summed dead tuples over the measured window
    (from the end of warm-up to the last sample), or None without table samples."""
    df = run.relation_metric("n_dead_tup", toast=toast)
    if len(df) == 0:
        return None
    measured = df[df["elapsed_s"] >= run.warmup_s]
    if len(measured) < 2:
        measured = df
    if len(measured) < 2:
        return None
    first, last = measured.iloc[0], measured.iloc[-1]
    seconds = float(last["elapsed_s"] - first["elapsed_s"])
    if seconds <= 0:
        return None
    return float(first["value"]), float(last["value"]), seconds, (float(last["value"]) - float(first["value"])) / seconds


def _p99(run: Run) -> float | None:
    v = (run.summary.get("lag_ms") or {}).get("p99")
    return None if v is None else float(v)


def sentences(table: SummaryTable) -> list[Sentence]:
    runs = table.runs
    out: list[Sentence] = []

    # 1. Completeness first: a partial run's figures cover only what was recorded.
    for r in runs:
        if not r.summary.get("complete"):
            reason = fmt.one_line(r.summary.get("incomplete_reason") or "; ".join(r.problems) or "no reason recorded")
            out.append(Sentence(f"{r.label} is incomplete ({reason}); its figures cover only what was recorded.", _t1("Complete")))

    # 2. Rate held, and the lowest p99 among the runs that held it.
    backends = [r for r in runs if r.scheduler != "memory"]
    held = [r for r in backends if rate_held(r) and r.summary.get("complete") and _p99(r) is not None]
    for r in backends:
        share = rate_share(r)
        if share is not None and share < RATE_HELD_FRACTION:
            out.append(Sentence(
                f"{r.label} did not hold its target rate: {fmt.num(r.summary['achieved_rate'])} of "
                f"{fmt.num(r.summary['target_rate'])} fires/s ({share * 100:.1f}%).",
                _t1("Achieved fire rate", "Achieved / target") + f"; {_fig('fire_rate')}"))
    if len(held) == 1:
        only = held[0]
        out.append(Sentence(
            f"{only.label} was the only backend that completed and held its target rate (≥ {RATE_HELD_FRACTION:.0%}); "
            f"its p99 lag was {fmt.ms(_p99(only))}.", _t1("Achieved / target", "Lag p99") + f"; {_fig('lag_cdf')}"))
    elif held:
        ranked = sorted(held, key=_p99)
        best = ranked[0]
        text = f"Of the backends that held their target rate (≥ {RATE_HELD_FRACTION:.0%}), {best.label} had the lowest p99 lag: {fmt.ms(_p99(best))}"
        ties = [r for r in ranked[1:] if _p99(r) == _p99(best)]
        if ties:
            text += f", tied with {', '.join(r.label for r in ties)}"
        others = [r for r in ranked[1:] if _p99(r) != _p99(best)]
        if others:
            text += "; then " + ", ".join(f"{r.label} {fmt.ms(_p99(r))}" for r in others)
        out.append(Sentence(text + ".", _t1("Lag p99") + f"; {_fig('lag_cdf')}"))
    elif backends:
        out.append(Sentence(
            f"No backend run both completed and held its target rate (≥ {RATE_HELD_FRACTION:.0%}), so none is named as lowest-lag; "
            "lag figures here were measured under overload or partial runs.",
            _t1("Complete", "Achieved / target")))
    for r in runs:
        if r.scheduler == "memory" and _p99(r) is not None:
            out.append(Sentence(
                f"memory, the in-process reference with no store, had p99 lag {fmt.ms(_p99(r))} at "
                f"{fmt.num(r.summary.get('achieved_rate') or 0)} fires/s: the lag of the harness itself, for reference.",
                _t1("Lag p99")))

    # 3. Correctness: missed fires and duplicates are stated for every run that has any.
    for r in runs:
        s = r.summary
        if s.get("missed"):
            out.append(Sentence(f"{r.label} missed {int(s['missed']):,} fires (due, never fired; kept in the denominator).", _t1("Missed fires")))
        if s.get("duplicate_effects"):
            out.append(Sentence(f"{r.label} produced {int(s['duplicate_effects']):,} duplicate effects.", _t1("Duplicate effects")))
        elif s.get("duplicate_fires"):
            out.append(Sentence(
                f"{r.label} delivered {int(s['duplicate_fires']):,} duplicate fires, none of which produced a duplicate effect.",
                _t1("Duplicate fires", "Duplicate effects")))
    checked = [r for r in runs if r.summary.get("missed") == 0 and r.summary.get("duplicate_effects") == 0]
    if checked and len(checked) == len(runs):
        out.append(Sentence("Every run fired every due timer (0 missed) with 0 duplicate effects.", _t1("Missed fires", "Duplicate effects")))

    # 4. Dead tuples: how fast they accumulated over the measured window.
    for r in runs:
        growth = dead_tuple_growth(r)
        if growth is None:
            continue
        first, last, seconds, per_s = growth
        peak = (r.summary.get("dead_tuples") or {}).get("table_peak")
        text = (f"In {r.label}, dead tuples in the tables went from {first:,.0f} to {last:,.0f} over the {fmt.num(seconds)} s "
                f"measured window ({per_s:+,.1f}/s)")
        rows = []
        if peak is not None:
            text += f", peak {float(peak):,.0f}"
            rows.append("Dead tuples, table, peak")
        toast = dead_tuple_growth(r, toast=True)
        if toast is not None:
            text += f"; in their TOAST tables {toast[0]:,.0f} → {toast[1]:,.0f} ({toast[3]:+,.1f}/s)"
        av = r.summary.get("autovacuum_runs")
        if av is not None:
            text += f"; autovacuum ran {int(av)} time{'s' if av != 1 else ''}"
            rows.append("Autovacuum runs")
        out.append(Sentence(text + ".", _fig("dead_tuples") + (f"; {_t1(*rows)}" if rows else "")))

    # 5. Write amplification: row writes and WAL per fire.
    amp = []
    for r in runs:
        pf = r.summary.get("per_fire") or {}
        if all(pf.get(k) is not None for k in ("inserts", "updates", "deletes")):
            amp.append((r, float(pf["inserts"]) + float(pf["updates"]) + float(pf["deletes"]), pf))
    if amp:
        parts = []
        for r, total, pf in amp:
            p = (f"{r.label} {fmt.num(total)} row writes per fire ({fmt.num(pf['inserts'])} inserts, "
                 f"{fmt.num(pf['updates'])} updates, {fmt.num(pf['deletes'])} deletes)")
            if pf.get("wal_bytes") is not None:
                p += f" and {fmt.human_bytes(pf['wal_bytes'])} of WAL per fire"
            parts.append(p)
        text = "Write amplification: " + "; ".join(parts) + "."
        if any(pf.get("wal_bytes") is not None for _, _, pf in amp):
            text += " (WAL is measured server-wide, so other writers on the same Postgres count too.)"
        lowest = min(amp, key=lambda a: a[1])
        if len(amp) > 1 and lowest[1] > 0:
            worst = max(amp, key=lambda a: a[1])
            if worst[1] > lowest[1]:
                text += f" {worst[0].label} writes {worst[1] / lowest[1]:.1f}× the rows per fire of {lowest[0].label}."
        out.append(Sentence(text, _t1("Inserts per fire", "Updates per fire", "Deletes per fire", "WAL bytes per fire")))

    # 6. HOT ratio, where updates happened.
    hot = [(r, float(r.summary["hot_ratio"])) for r in runs if r.summary.get("hot_ratio") is not None]
    if hot:
        out.append(Sentence(
            "Share of updates that were HOT (heap-only, no index write): "
            + ", ".join(f"{r.label} {v * 100:.1f}%" for r, v in hot) + ".",
            _t1("HOT ratio") + f"; {_fig('hot_ratio')}"))
    return out
