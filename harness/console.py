"""What a run prints: the live status line and the end-of-run table (rich)."""

from __future__ import annotations

from typing import Any

from metrics.accounting import how_to_read
from reports import fmt


def status_line(
    *,
    elapsed_s: float,
    measuring: bool,
    target: float,
    achieved: float,
    lag_p50_ms,
    lag_p99_ms,
    overdue: int,
    dead: float | None,
    toast_dead: float | None,
    hot: float | None,
) -> str:
    parts = [
        f"[{elapsed_s:6.1f}s {'measure' if measuring else 'warm-up'}]",
        f"target {target:,.0f}/s achieved {achieved:,.0f}/s",
        f"lag p50 {fmt.lag(lag_p50_ms)} p99 {fmt.lag(lag_p99_ms)}",
        f"overdue {overdue}",  # due longer ago than the on-time bound and not delivered yet
    ]
    if dead is not None:
        parts.append(f"dead {dead:,.0f} (toast {toast_dead or 0:,.0f})")
        parts.append(f"HOT {fmt.pct(hot, 0)}")
    return "  ".join(parts)


def _rates(s: dict[str, Any]) -> str:
    held = s.get("rate_held")
    verdict = "" if held is None else ("  held" if held else "  NOT HELD")
    return (
        f"{fmt.fixed(s.get('target_rate'), '{:,.1f}')} / {fmt.fixed(s.get('offered_rate'), '{:,.1f}')} / "
        f"{fmt.fixed(s.get('achieved_rate'), '{:,.1f}')} fires/s{verdict}"
    )


def _cycles(s: dict[str, Any]) -> str:
    cycles = s.get("cycles_per_trigger")
    if cycles is None:
        return fmt.MISSING
    return f"{cycles:.2f}" + ("" if s.get("steady_state") else "  NOT STEADY STATE")


def _outcomes(s: dict[str, Any]) -> str:
    o = s.get("outcomes") or {}
    return (
        f"due {fmt.count(o.get('due'))}: on time {fmt.count(o.get('on_time'))}, late {fmt.count(o.get('late'))}, "
        f"pending {fmt.count(o.get('pending'))}, lost {fmt.count(o.get('lost'))}"
    )


def summary_table(s: dict[str, Any]):
    """The end-of-run table of a ``summary.json``."""
    from rich.table import Table

    t = Table(
        title=f"{s['scheduler']} / {s['workload_name']}",
        show_header=False,
        caption=how_to_read(s),
        caption_justify="left",
    )
    t.add_column("figure")
    t.add_column("value", justify="right")
    lag = s["lag_ms"]
    dead = s["dead_tuples"]
    pf = s["per_fire"]
    per_fire = " / ".join(fmt.fixed(pf[k], "{:,.2f}") for k in ("inserts", "updates", "deletes"))
    toast = " / ".join(fmt.fixed(pf.get(k), "{:,.2f}") for k in ("toast_inserts", "toast_updates", "toast_deletes"))
    bill = s.get("bill") or {}
    correct = "yes" if s.get("correct", True) else "NO: " + "; ".join(s.get("failures") or [])
    rows = [
        ("complete", "yes" if s["complete"] else "NO (the reason is below)"),
        ("correct (0 lost, 0 duplicate keyed effects)", correct),
        ("cadence", str(s.get("cadence"))),
        (
            "warm-up / measured / drained",
            f"{s['warmup_s']:.1f} s / {s['measured_s']:.1f} s / {fmt.fixed(s.get('drained_s'), '{:.1f} s')}",
        ),
        ("cycles per trigger in the window", _cycles(s)),
        ("target / offered / achieved", _rates(s)),
        ("claim rate", fmt.fixed(s["claim_rate"], "{:,.1f}/s")),
        (f"fires due in the window (on time: lag <= {s.get('on_time_s', 10.0):g} s)", _outcomes(s)),
        ("lag p50 / p90 / p99 (every due fire)", " / ".join(fmt.lag(lag[k]) for k in ("p50", "p90", "p99"))),
        ("lag p99.9 / max", f"{fmt.lag(lag['p999'])} / {fmt.lag(lag['max'])}"),
        ("lost in warm-up / early fires", f"{fmt.count(s.get('lost_in_warmup'))} / {fmt.count(s.get('early'))}"),
        ("skipped periods (in the window)", fmt.count(s.get("skipped_periods"))),
        (
            "redelivered / duplicate fires",
            f"{fmt.count(s.get('redelivered_fires'))} / {fmt.count(s['duplicate_fires'])}",
        ),
        (
            "duplicate keyed / external effects",
            f"{fmt.count(s['duplicate_effects'])} / "
            f"{fmt.count(s.get('duplicate_external_effects'))} "
            f"(of {fmt.count(s.get('external_effects'))} external)",
        ),
        ("dead tuples peak / end", f"{fmt.fixed(dead['table_peak'])} / {fmt.fixed(dead['table_end'])}"),
        ("TOAST dead peak / end", f"{fmt.fixed(dead['toast_peak'])} / {fmt.fixed(dead['toast_end'])}"),
        ("HOT ratio", fmt.pct(s["hot_ratio"])),
        ("ins / upd / del per fire", per_fire),
        ("TOAST ins / upd / del per fire", toast),
        ("row writes per fire, heap + TOAST", fmt.fixed(pf.get("row_writes"), "{:,.2f}")),
        (
            "WAL bytes / records / FPI per fire",
            f"{fmt.fixed(pf['wal_bytes'])} / {fmt.fixed(pf.get('wal_records'), '{:,.2f}')} "
            f"/ {fmt.fixed(pf.get('wal_fpi'), '{:,.2f}')}",
        ),
        ("durable writes per fire, all stores", fmt.fixed(bill.get("durable_writes"), "{:,.2f}")),
        ("bytes written per fire, all stores", fmt.human_bytes(bill.get("bytes_written"))),
        ("autovacuum runs", fmt.fixed(s["autovacuum_runs"])),
        ("table / index bytes", f"{fmt.fixed(s['table_bytes_end'])} / {fmt.fixed(s['index_bytes_end'])}"),
    ]
    for k, v in rows:
        t.add_row(k, v)
    return t


def problem_lines(s: dict[str, Any]) -> list[str]:
    """What went wrong, one short line per problem: why the run is incomplete (if it is), then
    the other warnings, each said once; then the measurement notes (caveats of the cost figures)."""
    reason = s.get("incomplete_reason")
    first = [f"incomplete: {fmt.one_line(reason, limit=400)}"] if not s["complete"] and reason else []
    return (
        first
        + [f"warning: {w}" for w in fmt.collapse(s["warnings"], known=[reason])]
        + [f"note: {n}" for n in s.get("measurement_notes") or []]
    )
