"""``bench capture``: a workload derived from a team's own table, read-only.

``--map id=COL,tenant=COL,due=COL[,interval=COL][,state=COL]`` names the table's columns. During
the watch window every trigger's due time is sampled (one read-only statement per sample, spaced
so the samples take at most a tenth of one backend) and a changed due time counts as a re-arm;
then one statement reads the population: keyed hashes of ids and tenants (computed in the
database), due times, intervals and state sizes (``pg_column_size``, a size, never the value).
:mod:`loadgen.capture` turns that into ``trace.csv`` and ``workload.yaml``; ``capture.json``
holds the figures. Same safeguards as ``bench inspect`` (:mod:`metrics.owntable`).
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.errors import UsageError
from harness.owntable import DUE_CATEGORIES, column, open_table, timeouts_as_errors
from metrics import owntable

MAP_KEYS = ("id", "tenant", "due", "interval", "state")
REQUIRED_KEYS = ("id", "tenant", "due")
INTERVAL_CATEGORIES = {"T": "an interval", "N": "seconds"}
MIN_POLL_EVERY_S = 1.0
POLL_SHARE = 0.1  # samples take at most this share of one backend's time


@dataclass
class Capture:
    out_dir: Path
    trace: Path
    workload: Path
    stats: dict[str, Any]
    lines: list[str]


def parse_map(text: str) -> dict[str, str]:
    """``id=COL,tenant=COL,due=COL[,interval=COL][,state=COL]`` as a dict; a usage error otherwise."""
    out: dict[str, str] = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        key, sep, col = part.partition("=")
        key, col = key.strip(), col.strip()
        if not sep or not col or key not in MAP_KEYS:
            raise UsageError(f"bad --map entry {part!r}; give id=COL,tenant=COL,due=COL[,interval=COL][,state=COL]")
        if key in out:
            raise UsageError(f"--map names {key} twice ({out[key]!r} and {col!r})")
        out[key] = col
    missing = [k for k in REQUIRED_KEYS if k not in out]
    if missing:
        raise UsageError(f"--map lacks {', '.join(missing)}; give id=COL,tenant=COL,due=COL[,interval=COL][,state=COL]")
    return out


def capture_table(
    dsn: str,
    table: str,
    mapping: dict[str, str],
    *,
    watch_s: float,
    out_dir: Path,
    guards: owntable.Safeguards,
    say: Callable[[str], None],
) -> Capture:
    from harness.stack import redact_dsn
    from loadgen import capture as cap

    if watch_s <= 0 and "interval" not in mapping:
        raise UsageError(
            "without an interval column capture learns intervals from re-arms: give --watch "
            "(e.g. 5m, longer than most intervals) or --map interval=COL"
        )
    opened = open_table(dsn, table, guards, application_name="timerbench capture")
    reader, ref = opened.reader, opened.ref
    try:
        if not ref.can_select:
            raise UsageError(
                f"role {opened.session['role']} may not SELECT from {ref.qualified}; "
                f"GRANT SELECT ON {ref.qualified} TO {opened.session['role']}"
            )
        with timeouts_as_errors(guards, ref.qualified):
            cols = _columns(reader.columns(ref), mapping, ref.qualified)
            key = secrets.token_hex(16)  # the hashes' key: random, never written, gone with this process
            tracker = cap.RearmTracker() if watch_s > 0 else None
            if tracker is not None:
                _watch(reader, ref, cols, key, tracker, watch_s, say)
            say("reading the population (hashes, due times, sizes) ...")
            rows = reader.capture_rows(ref, cols, key)
    finally:
        opened.close()
    try:
        captured = cap.derive(rows, tracker, watch_s)
    except ValueError as exc:
        raise UsageError(f"{ref.qualified}: {exc}") from None
    header = [
        f"captured by `bench capture` from {ref.qualified} on {redact_dsn(dsn)}, "
        f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}",
        f"columns: {', '.join(f'{k}={v}' for k, v in mapping.items())}; ids and tenants are keyed hashes",
        f"{captured.stats['triggers']:,} triggers, {captured.stats['rate_per_s']:,.2f} fires/s at steady state; "
        + cap.rate_note(captured.stats),
        "replay: bench compare --workload THIS_FILE (or --trace trace.csv with your own workload)",
    ]
    trace_path, yaml_path = cap.write(out_dir, captured, header, name=f"capture-{ref.name}")
    record = {
        "tool": "bench capture",
        "table": ref.qualified,
        "dsn": redact_dsn(dsn),
        "map": mapping,
        "safeguards": {
            "default_transaction_read_only": opened.session["default_transaction_read_only"],
            "statement_timeout_ms": guards.statement_timeout_ms,
            "lock_timeout_ms": guards.lock_timeout_ms,
            "verified": True,
        },
        "watch_requested_s": watch_s,
        **captured.stats,
        "skipped": [owntable.as_json(s) for s in reader.skipped],
    }
    (out_dir / cap.CAPTURE_JSON).write_text(json.dumps(record, indent=2) + "\n")
    return Capture(out_dir, trace_path, yaml_path, captured.stats, _lines(ref.qualified, captured.stats))


def _columns(columns: list[dict[str, Any]], mapping: dict[str, str], table: str) -> owntable.CaptureColumns:
    for k in ("id", "tenant", "state"):
        if k in mapping:
            column(columns, mapping[k], f"--map {k}", {}, table)
    due = column(columns, mapping["due"], "--map due", DUE_CATEGORIES, table)
    interval = (
        column(columns, mapping["interval"], "--map interval", INTERVAL_CATEGORIES, table)
        if "interval" in mapping
        else None
    )
    return owntable.CaptureColumns(
        id=mapping["id"],
        tenant=mapping["tenant"],
        due=mapping["due"],
        due_category=due["category"],
        interval=mapping.get("interval"),
        interval_category=interval["category"] if interval else None,
        state=mapping.get("state"),
    )


def _watch(reader, ref, cols, key: str, tracker, watch_s: float, say) -> None:
    say(f"watching {ref.qualified} for {watch_s:g} s to see re-arms (Ctrl-C ends the window early) ...")
    deadline = time.time() + watch_s
    try:
        while True:
            began = time.time()
            tracker.observe(reader.capture_poll(ref, cols, key))
            took = time.time() - began
            pause = max(MIN_POLL_EVERY_S, took / POLL_SHARE) - took
            if time.time() + pause > deadline:
                break
            time.sleep(pause)
    except KeyboardInterrupt:
        say("watch window ended early (Ctrl-C); using what was seen")


def _lines(table: str, s: dict[str, Any]) -> list[str]:
    from loadgen.capture import rate_note
    from reports import fmt

    iv = s["interval_s"] or {}
    out = [
        f"{table}: {s['triggers']:,} triggers, {s['rate_per_s']:,.2f} fires/s at steady state ({rate_note(s)})",
        f"  intervals: p5 {fmt.num(iv.get('p5'))} s, median {fmt.num(iv.get('p50'))} s, p95 {fmt.num(iv.get('p95'))} s "
        f"(sources: {', '.join(f'{k} {v:,}' for k, v in s['interval_sources'].items())})",
        f"  tenants: {s['tenants']:,} (largest {fmt.pct(s['largest_tenant_share'])}, Zipf exponent "
        f"{s['tenant_skew']:g}); "
        f"long-horizon share {fmt.pct(s['long_horizon_share'])}; overdue at capture {s['overdue_at_capture']:,}",
    ]
    if s.get("state_bytes"):
        st = s["state_bytes"]
        out.append(f"  state size (pg_column_size): median {fmt.num(st['p50'])} B, p95 {fmt.num(st['p95'])} B")
    if s.get("watch"):
        w = s["watch"]
        out.append(
            f"  watch: {fmt.num(w['window_s'])} s, {w['polls']} samples, {w['rearms_seen']:,} re-arms seen "
            f"({fmt.num(w['rearms_per_s'])}/s)"
        )
    return out
