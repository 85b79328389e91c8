""" "What this says": sentences generated from the numbers, each citing the table row or figure
it rests on. A sentence is only written when its figures exist; nothing is inferred beyond them
(no "faster because ..."), and ties are said as ties."""

from __future__ import annotations

import math
from dataclasses import dataclass

from metrics.accounting import NOT_DELIVERED
from reports import fmt
from reports.load import Run
from reports.plots import figure_number
from reports.rows import RATE_HELD_FRACTION, offered_share, rate_held, rate_share
from reports.tables import SummaryTable


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
    return (
        float(first["value"]),
        float(last["value"]),
        seconds,
        (float(last["value"]) - float(first["value"])) / seconds,
    )


def _row_writes(pf: dict) -> float | None:
    """Heap + TOAST row writes per fire (heap only for a summary older than the TOAST columns)."""
    if pf.get("row_writes") is not None:
        return float(pf["row_writes"])
    heap = [pf.get(k) for k in ("inserts", "updates", "deletes")]
    return None if any(v is None for v in heap) else float(sum(heap))


VACUUM_KNOBS = ("autovacuum_tuned", "autovacuum_scale_factor", "autovacuum_threshold_rows", "autovacuum_cost_delay_ms")


def _vacuum(run: Run) -> tuple | None:
    opts = run.config.get("options") or {}
    if not all(k in opts for k in VACUUM_KNOBS):
        return None
    return tuple(opts[k] if opts["autovacuum_tuned"] or k == "autovacuum_tuned" else None for k in VACUUM_KNOBS)


def _tuning_and_design(runs: list[Run]) -> list[Sentence]:
    """For a design run twice with different vacuum settings, what tuning changed; and against
    another design run with the tuned settings, what the design changed."""
    out = []
    for a in runs:
        for b in runs:
            va, vb = _vacuum(a), _vacuum(b)
            if a is b or a.scheduler != b.scheduler or va is None or vb is None or va == vb or va[0] or not vb[0]:
                continue
            peers = [c for c in runs if c.scheduler != b.scheduler and _vacuum(c) == vb]
            figures = [
                ("dead tuples peak", lambda r: (r.summary.get("dead_tuples") or {}).get("table_peak"), fmt.num),
                ("row writes per fire", lambda r: _row_writes(r.summary.get("per_fire") or {}), fmt.num),
                ("p99 lag", _p99, fmt.ms),
            ]
            said = []
            for name, read, show in figures:
                x, y = read(a), read(b)
                if x is None or y is None:
                    continue
                part = f"{name} {show(x)} → {show(y)}"
                for c in peers:
                    z = read(c)
                    if z is not None:
                        part += f" → {show(z)} ({c.label})"
                said.append(part)
            if not said:
                continue
            text = (
                f"Tuning alone ({a.label} → {b.label}, the same design with per-table autovacuum settings)"
                + (
                    f", then the design ({b.label} → {', '.join(c.label for c in peers)}, the same settings)"
                    if peers
                    else ""
                )
                + ": "
                + "; ".join(said)
                + "."
            )
            out.append(Sentence(text, _t1("Dead tuples, table, peak", "Row writes per fire, heap + TOAST", "Lag p99")))
    return out


def _p99(run: Run) -> float | None:
    """The p99 lag in ms; ``inf`` when it falls among fires never delivered."""
    v = (run.summary.get("lag_ms") or {}).get("p99")
    if v is None:
        return None
    return math.inf if isinstance(v, str) else float(v)


def _lag_text(v: float | None) -> str:
    return NOT_DELIVERED if v is not None and math.isinf(v) else fmt.ms(v)


def sentences(table: SummaryTable) -> list[Sentence]:
    runs = table.runs
    out: list[Sentence] = []

    # 1. Completeness first: a partial run's figures cover only what was recorded.
    for r in runs:
        if not r.summary.get("complete"):
            reason = fmt.one_line(r.summary.get("incomplete_reason") or "; ".join(r.problems) or "no reason recorded")
            out.append(
                Sentence(
                    f"{r.label} is incomplete ({reason}); its figures cover only what was recorded.", _t1("Complete")
                )
            )

    # 2. Correctness before performance: a lost fire or a duplicated keyed effect fails a run.
    for r in runs:
        for failure in r.summary.get("failures") or []:
            out.append(
                Sentence(
                    f"{r.label} FAILED its correctness promise: {failure}.",
                    _t1("Lost fires, warm-up included", "Duplicate keyed effects"),
                )
            )
    judged = [r for r in runs if r.summary.get("correct") is not None]
    if judged and len(judged) == len(runs) and all(r.summary.get("correct") for r in runs):
        out.append(
            Sentence(
                "Every run kept the correctness promise: 0 lost fires and 0 duplicate keyed effects.",
                _t1("Lost fires, warm-up included", "Duplicate keyed effects"),
            )
        )

    # 3. Steady state: figures from a window of first fires do not describe the re-arm cycle.
    for r in runs:
        if r.summary.get("steady_state") is False:
            cycles = r.summary.get("cycles_per_trigger")
            out.append(
                Sentence(
                    f"{r.label}'s window was not steady state ({fmt.fixed(cycles, '{:.2f}')} cycles per trigger; "
                    "steady state needs ≥ 2 "
                    f"after a warm-up of one maximum interval): its figures lean on first fires, not the re-arm cycle.",
                    _t1("Cycles per trigger in the window", "Steady state"),
                )
            )

    # 4. Rate held (achieved vs offered, offered vs target), and the lowest p99 among those that held it.
    backends = [r for r in runs if r.scheduler != "memory"]
    held = [r for r in backends if rate_held(r) and r.summary.get("complete") and _p99(r) is not None]
    for r in backends:
        if rate_held(r) is False:
            s = r.summary
            out.append(
                Sentence(
                    f"{r.label} did not hold its target rate: it achieved {fmt.num(s.get('achieved_rate'))} of the "
                    f"{fmt.num(s.get('offered_rate'))} fires/s offered ({fmt.pct(rate_share(r))}), and the workload "
                    f"offered {fmt.pct(offered_share(r))} of the {fmt.num(s.get('target_rate'))} fires/s target"
                    + (
                        f" ({int(s['skipped_periods']):,} periods skipped by fires more than one interval late)"
                        if s.get("skipped_periods")
                        else ""
                    )
                    + ".",
                    _t1("Achieved / offered", "Offered / target") + f"; {_fig('fire_rate')}",
                )
            )
    if len(held) == 1:
        only = held[0]
        out.append(
            Sentence(
                f"{only.label} was the only backend that completed and held its rate (≥ {RATE_HELD_FRACTION:.0%} of "
                f"offered, offered ≥ {RATE_HELD_FRACTION:.0%} of target); its p99 lag over every due fire was "
                f"{_lag_text(_p99(only))}.",
                _t1("Achieved / offered", "Lag p99") + f"; {_fig('lag_cdf')}",
            )
        )
    elif held:
        ranked = sorted(held, key=_p99)
        best = ranked[0]
        text = (
            f"Of the backends that held their rate (≥ {RATE_HELD_FRACTION:.0%}), {best.label} had the lowest p99 lag "
            f"over every due fire: {_lag_text(_p99(best))}"
        )
        ties = [r for r in ranked[1:] if _p99(r) == _p99(best)]
        if ties:
            text += f", tied with {', '.join(r.label for r in ties)}"
        others = [r for r in ranked[1:] if _p99(r) != _p99(best)]
        if others:
            text += "; then " + ", ".join(f"{r.label} {_lag_text(_p99(r))}" for r in others)
        out.append(Sentence(text + ".", _t1("Lag p99") + f"; {_fig('lag_cdf')}"))
    elif backends:
        out.append(
            Sentence(
                f"No backend run both completed and held its rate (≥ {RATE_HELD_FRACTION:.0%}), so none is named as "
                "lowest-lag; lag figures here were measured under overload or partial runs.",
                _t1("Complete", "Achieved / offered", "Offered / target"),
            )
        )
    for r in runs:
        if r.scheduler == "memory" and _p99(r) is not None:
            out.append(
                Sentence(
                    f"memory, the in-process reference with no store, had p99 lag {_lag_text(_p99(r))} at "
                    f"{fmt.num(r.summary.get('achieved_rate') or 0)} fires/s: the lag of the harness itself, for "
                    "reference.",
                    _t1("Lag p99"),
                )
            )

    # 5. The outcomes of the fires due in each window, and what at-least-once cost.
    for r in runs:
        s = r.summary
        o = s.get("outcomes")
        if not o or any(o.get(k) is None for k in ("due", "on_time", "late", "pending", "lost")):
            continue  # no accounting (an older run), or a killed run that never judged it
        text = (
            f"Of the {o['due']:,} fires due in {r.label}'s window, {o['on_time']:,} were on time (lag ≤ "
            f"{fmt.fixed(s.get('on_time_s'), '{:g}')} s), {o['late']:,} late, {o['pending']:,} still pending after "
            f"the {float(s.get('drained_s') or 0):.1f} s drain and {o['lost']:,} lost."
        )
        out.append(
            Sentence(
                text,
                _t1(
                    "Fires due in the window",
                    "On time (lag ≤ on-time bound)",
                    "Late (delivered, lag over the bound)",
                    "Pending at the end (backlog still held)",
                    "Lost (never delivered, not held)",
                ),
            )
        )
        costs = []
        if s.get("redelivered_fires"):
            costs.append(f"{int(s['redelivered_fires']):,} redelivered fires")
        if s.get("duplicate_fires"):
            costs.append(f"{int(s['duplicate_fires']):,} duplicate fires")
        if s.get("duplicate_external_effects"):
            costs.append(f"{int(s['duplicate_external_effects']):,} duplicate external effects (a webhook sent twice)")
        if costs:
            out.append(
                Sentence(
                    f"At-least-once in {r.label}: "
                    + ", ".join(costs)
                    + f"; the keyed effects stayed de-duplicated ({int(s.get('duplicate_effects') or 0):,} "
                    "duplicates).",
                    _t1(
                        "Redelivered fires (attempt > 1)",
                        "Duplicate fires",
                        "Duplicate external effects",
                        "Duplicate keyed effects",
                    ),
                )
            )
        claims, achieved = s.get("claim_rate"), s.get("achieved_rate")
        if claims and achieved and claims > 1.05 * achieved:
            out.append(
                Sentence(
                    f"{r.label} claimed {fmt.num(claims)} timers/s against {fmt.num(achieved)} fires/s delivered: "
                    f"{claims / achieved:.2f} claims per fire (re-claims after lapsed leases or stale claims).",
                    _t1("Claim throughput (timers claimed, re-claims included)", "Achieved fire rate"),
                )
            )

    # 6. Dead tuples: how fast they accumulated over the measured window.
    for r in runs:
        growth = dead_tuple_growth(r)
        if growth is None:
            continue
        first, last, seconds, per_s = growth
        peak = (r.summary.get("dead_tuples") or {}).get("table_peak")
        text = (
            f"In {r.label}, dead tuples in the tables went from {first:,.0f} to {last:,.0f} over the "
            f"{fmt.num(seconds)} s measured window ({per_s:+,.1f}/s)"
        )
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

    # 7. Write amplification: row writes (heap + TOAST) and WAL per fire.
    amp = []
    for r in runs:
        pf = r.summary.get("per_fire") or {}
        total = _row_writes(pf)
        if total is not None:
            amp.append((r, total, pf))
    if amp:
        parts = []
        for r, total, pf in amp:
            p = (
                f"{r.label} {fmt.num(total)} row writes per fire ({fmt.num(pf.get('inserts'))} inserts, "
                f"{fmt.num(pf.get('updates'))} updates, {fmt.num(pf.get('deletes'))} deletes"
            )
            if pf.get("toast_writes") is not None:
                p += (
                    f"; TOAST {fmt.num(pf.get('toast_inserts'))} inserts, {fmt.num(pf.get('toast_updates'))} updates, "
                    f"{fmt.num(pf.get('toast_deletes'))} deletes"
                )
            else:
                p += "; TOAST not recorded"
            p += ")"
            if pf.get("wal_bytes") is not None:
                p += f" and {fmt.human_bytes(pf['wal_bytes'])} of WAL per fire"
                if pf.get("wal_fpi") is not None:
                    p += f" ({fmt.num(pf['wal_fpi'])} full-page images)"
            parts.append(p)
        text = "Write amplification: " + "; ".join(parts) + "."
        if any(pf.get("wal_bytes") is not None for _, _, pf in amp):
            text += " (WAL is measured server-wide, so other writers on the same Postgres count too.)"
        lowest = min(amp, key=lambda a: a[1])
        if len(amp) > 1 and lowest[1] > 0:
            worst = max(amp, key=lambda a: a[1])
            if worst[1] > lowest[1]:
                text += f" {worst[0].label} writes {worst[1] / lowest[1]:.1f}× the rows per fire of {lowest[0].label}."
        out.append(Sentence(text, _t1("Row writes per fire, heap + TOAST", "WAL bytes per fire")))

    # 7b. The bill across stores: what each design pays on every store it writes to.
    bill = [(r, r.summary.get("bill") or {}) for r in runs]
    bill = [(r, b) for r, b in bill if b.get("durable_writes") is not None or b.get("bytes_written") is not None]
    if bill:
        parts = []
        for r, b in bill:
            stores = " + ".join(b.get("stores") or []) or "no store"
            p = f"{r.label} ({stores}): {fmt.num(b.get('durable_writes'))} durable writes"
            if b.get("bytes_written") is not None:
                p += f" and {fmt.human_bytes(b['bytes_written'])} written"
            tw = ((r.summary.get("servers") or {}).get("temporal") or {}).get("per_fire", {}).get("persistence_writes")
            if tw is not None:
                p += f", of which {fmt.num(tw)} Temporal persistence writes"
            parts.append(p)
        out.append(
            Sentence(
                "Per fire, counting every store a design writes to: " + "; ".join(parts) + ".",
                _t1("Durable writes per fire", "Bytes written per fire, all stores"),
            )
        )

    # 7c. Tuning against design: the same design with other vacuum settings, then another design
    # with the same settings (bench compare --tuned-control).
    out.extend(_tuning_and_design(runs))

    # 8. HOT ratio, where updates happened.
    hot = [(r, float(r.summary["hot_ratio"])) for r in runs if r.summary.get("hot_ratio") is not None]
    if hot:
        out.append(
            Sentence(
                "Share of updates that were HOT (heap-only, no index write): "
                + ", ".join(f"{r.label} {v * 100:.1f}%" for r, v in hot)
                + ".",
                _t1("HOT ratio") + f"; {_fig('hot_ratio')}",
            )
        )
    return out
