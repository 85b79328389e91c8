"""``bench capture``: a workload derived from a team's own table, read-only.

``--map id=EXPR,tenant=EXPR,due=COL[,interval=COL][,state=EXPR]`` says where a trigger's identity,
tenant, due time and state live: columns, or JSON paths into json, jsonb, text or bytea columns
(:mod:`metrics.owntable_expr`); ``--where`` which rows are pending; ``--preset NAME`` both for a
job library (:mod:`harness.job_libraries`). Paths are checked first, against ANALYZE's samples of
their columns. During the watch window the rows are sampled (one read-only statement per sample,
spaced so the samples take at most a tenth of one backend): a due time not seen before for an
identity is a re-arm, whether the row moved or a library inserted the next one. A library that
keeps finished rows also gives their due times, read once. The last sample is the population:
keyed hashes of ids and tenants (computed in the database), due times, intervals and state sizes
(``pg_column_size``, or the byte length of a JSON value: a size, never the value).
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

from harness import job_libraries
from harness.errors import UsageError
from harness.owntable import DUE_CATEGORIES, column, open_table, timeouts_as_errors
from metrics import owntable

MAP_KEYS = ("id", "tenant", "due", "interval", "state")
REQUIRED_KEYS = ("id", "tenant", "due")
MAP_HELP = "id=EXPR,tenant=EXPR,due=COL[,interval=COL][,state=EXPR] (EXPR: a column or a JSON path, args.trigger_id)"
INTERVAL_CATEGORIES = {"T": "an interval", "N": "seconds"}
MIN_POLL_EVERY_S = 1.0
POLL_SHARE = 0.1  # samples take at most this share of one backend's time
HISTORY_WINDOW_S = 86400.0  # finished rows' due times are read back this far


@dataclass
class Capture:
    out_dir: Path
    trace: Path
    workload: Path
    stats: dict[str, Any]
    lines: list[str]


def parse_map(text: str | None, required: bool = True) -> dict[str, str]:
    """``id=EXPR,tenant=EXPR,due=COL[,interval=COL][,state=EXPR]`` as a dict; a usage error
    otherwise. With a preset (``required`` False) any subset overrides the preset's."""
    out: dict[str, str] = {}
    for part in (p.strip() for p in (text or "").split(",") if p.strip()):
        key, sep, col = part.partition("=")
        key, col = key.strip(), col.strip()
        if not sep or not col or key not in MAP_KEYS:
            raise UsageError(f"bad --map entry {part!r}; give {MAP_HELP}")
        if key in out:
            raise UsageError(f"--map names {key} twice ({out[key]!r} and {col!r})")
        out[key] = col
    missing = [k for k in REQUIRED_KEYS if k not in out] if required else []
    if missing:
        raise UsageError(f"--map lacks {', '.join(missing)}; give {MAP_HELP}, or --preset NAME")
    return out


def capture_table(
    dsn: str,
    table: str | None,
    mapping: dict[str, str],
    *,
    watch_s: float,
    out_dir: Path,
    guards: owntable.Safeguards,
    say: Callable[[str], None],
    where: str | None = None,
    preset_name: str | None = None,
) -> Capture:
    from harness.stack import redact_dsn
    from loadgen import capture as cap

    lib = job_libraries.preset(preset_name) if preset_name else None
    mapping = {**(_preset_map(lib) if lib else {}), **mapping}
    table = table or (lib.table if lib else None)
    if watch_s <= 0 and "interval" not in mapping and not (lib and lib.finished):
        raise UsageError(
            "without an interval column capture learns intervals from re-arms: give --watch "
            "(e.g. 5m, longer than most intervals) or --map interval=COL"
        )
    opened = open_table(dsn, table, guards, application_name="timerbench capture", partitioned_ok=True)
    reader, ref = opened.reader, opened.ref
    try:
        if not ref.can_select:
            raise UsageError(
                f"role {opened.session['role']} may not SELECT from {ref.qualified}; "
                f"GRANT SELECT ON {ref.qualified} TO {opened.session['role']}"
            )
        with timeouts_as_errors(guards, ref.qualified):
            columns = reader.columns(ref)
            if lib:
                job_libraries.check_columns(lib, columns, ref.qualified)
            spec = _spec(columns, mapping, where if where is not None else (lib.pending if lib else None), lib, ref)
            checks = _check_paths(reader, ref, spec)
            key = secrets.token_hex(16)  # the hashes' key: random, never written, gone with this process
            tracker = cap.RearmTracker()
            if watch_s > 0:
                _watch(reader, ref, spec, key, tracker, watch_s, say)
            history = None
            if spec.finished:
                say(f"reading the due times of finished rows still in {ref.qualified} ...")
                history = reader.attempt(
                    "due times of finished rows (intervals from the table's own history)",
                    lambda: reader.capture_history(ref, spec, key, HISTORY_WINDOW_S),
                )
            say("reading the population (hashes, due times, sizes) ...")
            tracker.observe(reader.capture_poll(ref, spec, key))
            if history:
                tracker.add_history(history)
    finally:
        opened.close()
    try:
        captured = cap.derive(tracker, watch_s, empty="no rows" + (" match the pending filter" if spec.pending else ""))
    except ValueError as exc:
        raise UsageError(f"{ref.qualified}: {exc}") from None
    where_text = " and ".join(str(c) for c, _ in spec.pending)
    header = [
        f"captured by `bench capture` from {ref.qualified} on {redact_dsn(dsn)}, "
        f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}",
        (f"preset {lib.name} ({lib.schema}); " if lib else "")
        + f"map: {', '.join(f'{k}={v}' for k, v in mapping.items())}"
        + (f"; pending rows: {where_text}" if where_text else "")
        + "; ids and tenants are keyed hashes",
        f"{captured.stats['triggers']:,} triggers, {captured.stats['rate_per_s']:,.2f} fires/s at steady state; "
        + cap.rate_note(captured.stats),
        "replay: bench compare --workload THIS_FILE (or --trace trace.csv with your own workload)",
    ]
    trace_path, yaml_path = cap.write(out_dir, captured, header, name=f"capture-{ref.name}")
    record = {
        "tool": "bench capture",
        "table": ref.qualified,
        "dsn": redact_dsn(dsn),
        "preset": lib.as_dict() if lib else None,
        "map": mapping,
        "where": where_text or None,
        "row_per_fire": bool(lib and lib.row_per_fire),
        "path_checks": checks,
        "history": {
            "read": history is not None,
            "window_s": HISTORY_WINDOW_S,
            "identities": len(history or {}),
        }
        if spec.finished
        else None,
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


def _preset_map(lib: job_libraries.Preset) -> dict[str, str]:
    found = {"id": lib.id, "tenant": lib.tenant, "due": lib.due, "state": lib.state}
    return {k: v for k, v in found.items() if v}


def _spec(columns, mapping: dict[str, str], where: str | None, lib, ref) -> owntable.CaptureSpec:
    table = ref.qualified
    due = _bare(columns, mapping["due"], "--map due", DUE_CATEGORIES, table)
    interval = (
        _bare(columns, mapping["interval"], "--map interval", INTERVAL_CATEGORIES, table)
        if "interval" in mapping
        else None
    )
    ident = job_libraries.bind_identity
    return owntable.CaptureSpec(
        id=ident(mapping["id"], columns, "--map id", table),
        tenant=ident(mapping["tenant"], columns, "--map tenant", table) if "tenant" in mapping else None,
        due=due,
        interval=interval,
        state=ident(mapping["state"], columns, "--map state", table)[0] if "state" in mapping else None,
        pending=job_libraries.bind_filter(where, columns, "--where", table),
        finished=job_libraries.bind_filter(lib.finished, columns, f"--preset {lib.name}", table)
        if (lib and lib.finished and lib.row_per_fire)
        else None,
    )


def _bare(columns, text: str, option: str, categories: dict[str, str], table: str):
    """A due or interval: a column of the table, no path."""
    from metrics import owntable_expr as expr

    try:
        e = expr.parse_expr(text)
    except expr.ExpressionError as exc:
        raise UsageError(f"{option}: {exc}") from None
    if e.path:
        raise UsageError(f"{option}: give a column of {table} ({text!r} is a JSON path)")
    col = column(columns, e.column, option, categories, table)
    return expr.Bound(e, col)


def _check_paths(reader: owntable.Reader, ref: owntable.TableRef, spec: owntable.CaptureSpec) -> list[dict[str, Any]]:
    """Every JSON path of the map checked before anything else is read: present in the column's
    sampled values (ANALYZE's, in pg_stats), or in the first rows when there are none; one line
    naming the path otherwise."""
    out = []
    mapped = [("id", b) for b in spec.id] + [("tenant", b) for b in spec.tenant or []]
    mapped += [("state", spec.state)] if spec.state else []
    for key, b in mapped:
        if not b.expr.path:
            continue
        found = reader.path_check(ref, b)
        out.append({"map": key, "expression": str(b.expr), **found})
        if not found["sampled"]:
            continue  # an empty table: nothing to check against, and nothing to capture
        where = f"{found['sampled']:,} values sampled from {found['method']}"
        if not found["decoded"]:
            raise UsageError(
                f"--map {key}: column {b.expr.column} of {ref.qualified} ({b.column['type']}) holds no JSON "
                f"({where}); give the column alone, or a column holding JSON"
            )
        if not found["present"]:
            raise UsageError(
                f"--map {key}: path {'.'.join(b.expr.path)} is never present in {b.expr.column} of {ref.qualified} "
                f"({where}); check the key names (case matters)"
            )
    return out


def _watch(reader, ref, spec, key: str, tracker, watch_s: float, say) -> None:
    say(f"watching {ref.qualified} for {watch_s:g} s to see re-arms (Ctrl-C ends the window early) ...")
    deadline = time.time() + watch_s
    try:
        while True:
            began = time.time()
            tracker.observe(reader.capture_poll(ref, spec, key))
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
