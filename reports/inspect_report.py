"""``inspect.json``, ``inspect.md`` and the terminal summary of ``bench inspect``, from one
dictionary (written by :mod:`harness.inspect_run`, diagnosed by :mod:`reports.diagnosis`)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from reports import fmt

VERDICT = {True: "SHOWN", False: "not shown", None: "unknown"}


def write_json(path: Path, data: dict[str, Any]) -> None:
    def default(o: Any) -> Any:
        if isinstance(o, float) and math.isnan(o):
            return None
        return str(o)

    path.write_text(json.dumps(data, indent=2, default=default, sort_keys=False) + "\n")


def _b(n: Any) -> str:
    return fmt.human_bytes(n)


def terminal_lines(d: dict[str, Any]) -> list[str]:
    """A short summary: the shape in one line, churn in one, the horizon, bloat, the due query,
    the diagnosis (one line per signature), what was skipped."""
    s = d["shape"]
    out = [
        f"{d['table']} on {d['dsn']} (Postgres {d['server']['version']}, role {d['server']['role']}; "
        f"read-only, statement_timeout {d['safeguards']['statement_timeout_ms']} ms, "
        f"lock_timeout {d['safeguards']['lock_timeout_ms']} ms)",
        f"  shape: ~{fmt.fixed(s['row_estimate'])} rows, heap {_b(s['heap_bytes'])}, TOAST {_b(s['toast_bytes'])}, "
        f"{s['index_count']} indexes {_b(s['index_bytes'])}, fillfactor {s['fillfactor_pct']}",
    ]
    c = (d.get("churn") or {}).get("table")
    if c:
        out.append(
            f"  churn over {fmt.num(c['window_s'])} s: {fmt.num(c['inserts_per_s'])} ins/s, "
            f"{fmt.num(c['updates_per_s'])} upd/s, {fmt.num(c['deletes_per_s'])} del/s, HOT {fmt.pct(c['hot_ratio'])}, "
            f"dead created {fmt.fixed(c['dead_created'])} / removed {fmt.fixed(c['dead_removed'])}, "
            f"autovacuum runs {c['autovacuum_runs']}"
        )
    h = d.get("horizon") or {}
    top = next(iter(h.get("holders") or []), None)
    if top:
        out.append(
            f"  horizon: oldest holder {top['kind']}, {'~' if top['age_estimated'] else ''}"
            f"{fmt.num(top['age_s'])} s, {fmt.fixed(top['xid_age'])} xids behind"
        )
    else:
        out.append("  horizon: nothing holding it in the samples")
    b = d.get("bloat") or {}
    heap = b.get("heap") or {}
    if b:
        out.append(
            f"  bloat ({b['method']}): dead {fmt.fixed(heap.get('dead_tuple_count'))} rows, "
            + (
                f"{fmt.num(heap.get('dead_pct'))}% dead, {fmt.num(heap.get('free_pct'))}% free"
                if heap.get("dead_pct") is not None
                else f"estimated bloat {fmt.num(heap.get('bloat_pct'))}%"
            )
        )
    due = d.get("due_scan")
    if due and due.get("plan"):
        p = due["plan"]
        out.append(
            f"  due query on {due['due_column']}: {' > '.join(p['node_types'])}"
            f"{' using ' + p['index_used'] if p.get('index_used') else ''}, est. {fmt.fixed(p['estimated_rows'])} rows"
            + (
                f"; analysed: {fmt.fixed(due['analyze'].get('rows'))} rows, "
                f"{fmt.num(due['analyze'].get('buffers_per_row'))} buffers/row"
                if due.get("analyze")
                else ""
            )
        )
    lib = d.get("library")
    if lib:
        out.append("  " + library_line(lib))
    out.append("  diagnosis:")
    for f in d.get("diagnosis", []):
        designs = ", ".join(a["design"] for a in f["addressed_by"])
        out.append(f"    [{VERDICT[f['shown']]}] {f['name']}: {f['figure']}" + (f" -> {designs}" if f["shown"] else ""))
    for sk in d.get("skipped", []):
        out.append(f"  skipped: {sk['what']}: {sk['why']} (fix: {sk['fix']})")
    return out


def markdown(d: dict[str, Any]) -> str:
    s = d["shape"]
    lines = [
        f"# `bench inspect`: {d['table']}",
        "",
        f"{d['inspected_at']} on `{d['dsn']}` (Postgres {d['server']['version']}, role `{d['server']['role']}`, "
        f"database `{d['server']['database']}`). Read-only: `default_transaction_read_only` "
        f"{d['safeguards']['default_transaction_read_only']}, `statement_timeout` "
        f"{d['safeguards']['statement_timeout_ms']} ms, `lock_timeout` {d['safeguards']['lock_timeout_ms']} ms, "
        "one statement per transaction (checked on the connection before anything was read).",
        "",
    ]

    if d.get("library"):
        lines += [library_line(d["library"]), ""]
    lines += ["## Diagnosis", "", "| signature | verdict | figure | addressed by |", "|---|---|---|---|"]
    for f in d.get("diagnosis", []):
        designs = "<br>".join(f"**{a['design']}**: {a['how']}" for a in f["addressed_by"]) if f["shown"] else ""
        lines.append(
            f"| {f['name']} | {VERDICT[f['shown']]} | {_cell(f['figure'])} ({_cell(f['source'])}) | {designs} |"
        )
    measured = [f for f in d.get("diagnosis", []) if f.get("measured") and f["shown"]]
    if measured:
        lines += ["", "Measured runs (`--compare`):", ""]
        for f in measured:
            lines.append(f"- {f['name']}: " + "; ".join(f["measured"]))
    lines.append("")

    lines += [
        "## Shape",
        "",
        f"- rows: ~{fmt.fixed(s['row_estimate'])} (planner estimate), {fmt.fixed(s['pages'])} pages",
        f"- heap {_b(s['heap_bytes'])}, TOAST {_b(s['toast_bytes'])} (+ its index {_b(s['toast_index_bytes'])}), "
        f"indexes {_b(s['index_bytes'])}, total {_b(s['total_bytes'])}",
        f"- average in-line row: {fmt.fixed(s['avg_inline_row_bytes'], '{:,.0f} B')}"
        + (f" ({s['avg_inline_row_source']})" if s.get("avg_inline_row_source") else ""),
        f"- fillfactor {s['fillfactor_pct']}; per-table autovacuum settings: "
        f"{_kv(s['table_autovacuum']) or 'none (server defaults)'}; TOAST: {_kv(s['toast_autovacuum']) or 'none'}",
        f"- partial indexes: {', '.join(s['partial_indexes']) or 'none'}",
        "",
        "| index | method | columns | predicate | size | scans | entries read | rows fetched |",
        "|---|---|---|---|--:|--:|--:|--:|",
    ]
    for i in s["indexes"]:
        flags = " (primary)" if i["is_primary"] else (" (unique)" if i["is_unique"] else "")
        lines.append(
            f"| {i['name']}{flags} | {i['method']} | {', '.join(i['columns'])} | {i['predicate'] or ''} | "
            f"{_b(i['bytes'])} | {fmt.fixed(i['idx_scan'])} | {fmt.fixed(i['idx_tup_read'])} | "
            f"{fmt.fixed(i['idx_tup_fetch'])} |"
        )
    lines += ["", "| column | type | storage | avg width (pg_stats) |", "|---|---|---|--:|"]
    for col in s["columns"]:
        lines.append(f"| {col['name']} | {col['type']} | {col['storage']} | {fmt.fixed(col['avg_width'], '{:,} B')} |")
    lines.append("")

    lines += ["## Churn over the watch window", ""]
    churn = d.get("churn")
    if churn and churn.get("table"):
        lines += [
            "Dead versions created = updates + deletes; removed = created minus the growth of `n_dead_tup`, "
            "which vacuum lowers but page pruning does not (the bloat section's exact count is the truth).",
            "",
            "| relation | window | ins/s | upd/s | del/s | HOT | dead created | dead removed | n_dead_tup at end | "
            "autovacuum runs | autovacuum time |",
            "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
        ]
        for label in ("table", "toast"):
            c = churn.get(label)
            if not c:
                continue
            lines.append(
                f"| {label} | {fmt.num(c['window_s'])} s | {fmt.num(c['inserts_per_s'])} | "
                f"{fmt.num(c['updates_per_s'])} | {fmt.num(c['deletes_per_s'])} | {fmt.pct(c['hot_ratio'])} | "
                f"{fmt.fixed(c['dead_created'])} | {fmt.fixed(c['dead_removed'])} | {fmt.fixed(c['dead_rows_end'])} | "
                f"{c['autovacuum_runs']} | {fmt.ms(c['autovacuum_ms_in_window'])} |"
            )
        busy = [i for i in churn["indexes"] if i["scans"]]
        if busy:
            lines += [
                "",
                "Index use in the window: "
                + "; ".join(
                    f"{i['index']} {fmt.fixed(i['scans'])} scans, {fmt.fixed(i['entries_read'])} entries read "
                    f"({fmt.num(i['entries_per_scan'])} per scan), {fmt.fixed(i['rows_fetched'])} rows fetched"
                    for i in busy
                ),
            ]
        for v in churn.get("vacuums_seen") or []:
            lines.append(
                f"- a vacuum ran on the {v['relation']}, seen in {v['samples']} sample(s) over "
                f"{fmt.num(v['seen_for_s'])} s "
                f"(phases {', '.join(v['phases'])}; heap blocks {fmt.fixed(v.get('heap_blks_scanned'))}"
                f"/{fmt.fixed(v.get('heap_blks_total'))} scanned)"
            )
    else:
        lines.append("Not measured (no watch window).")
    lines.append("")

    h = d.get("horizon") or {}
    lines += [
        "## What holds the vacuum horizon",
        "",
        f"Worst of {h.get('samples', 0)} samples; transaction ids consumed at "
        f"{fmt.num(h.get('xids_per_s'))}/s over the window (ages marked ~ are estimated from it). "
        "By age and kind only: no query text, no role, no client.",
        "",
    ]
    if h.get("holders"):
        lines += ["| holder | pid | age | transactions behind | same database |", "|---|--:|--:|--:|---|"]
        for x in h["holders"][:10]:
            lines.append(
                f"| {x['kind']} | {x['pid'] or ''} | {'~' if x['age_estimated'] else ''}{fmt.num(x['age_s'])} s | "
                f"{fmt.fixed(x['xid_age'])} | "
                f"{'' if x['same_database'] is None else ('yes' if x['same_database'] else 'no')} |"
            )
    else:
        lines.append("Nothing held it.")
    lines += [
        "",
        f"- idle in transaction: {h.get('idle_in_transaction', 0)} session(s)"
        + (f", the oldest {fmt.num(h['idle_in_transaction_oldest_s'])} s" if h.get("idle_in_transaction") else ""),
        f"- oldest running transaction: {fmt.fixed(h.get('oldest_running_xid_behind'))} transactions behind the next "
        f"(seen through this session's snapshot, visible to any role)",
        f"- prepared transactions: {h.get('prepared_xacts', 0)}; replication slots holding xmin: "
        f"{len(h.get('replication_slots') or [])}",
        f"- sessions of other roles hidden from this role: {h.get('hidden_sessions', 0)}",
        "",
    ]

    b = d.get("bloat") or {}
    lines += [
        "## Bloat",
        "",
        f"Method: **{b.get('method', 'not measured')}**"
        + (f" ({b['why_not_exact']})" if b.get("why_not_exact") else "")
        + ".",
        "",
    ]
    for label in ("heap", "toast"):
        r = b.get(label)
        if r:
            lines.append(f"- {label}: " + ", ".join(f"{k} {_fig(v)}" for k, v in r.items()))
    lines.append("")

    due = d.get("due_scan")
    lines += ["## The cost of finding due work", ""]
    if due:
        lines += [
            f"Due column `{due['due_column']}`{' (guessed: give --due-column to choose)' if due['guessed'] else ''}; "
            f"due index: {due.get('due_index') or 'none'}.",
            "",
            "```sql",
            due["query"],
            "```",
            "",
        ]
        if due.get("plan"):
            p = due["plan"]
            lines.append(
                f"- EXPLAIN: {' > '.join(p['node_types'])}"
                f"{' using ' + p['index_used'] if p.get('index_used') else ''}; estimated "
                f"{fmt.fixed(p['estimated_rows'])} "
                f"rows, cost {fmt.num(p['startup_cost'])}..{fmt.num(p['total_cost'])}"
            )
        if due.get("analyze"):
            a = due["analyze"]
            lines.append(
                f"- EXPLAIN ANALYZE (read-only transaction): {fmt.fixed(a['rows'])} rows, "
                f"{fmt.fixed(a['shared_hit_blocks'])} buffers hit + {fmt.fixed(a['shared_read_blocks'])} read "
                f"({fmt.num(a['buffers_per_row'])} per row), heap fetches {fmt.fixed(a['heap_fetches'])}, "
                f"{fmt.ms(a['execution_ms'])}"
            )
        else:
            lines.append(
                "- not executed (EXPLAIN only; `--analyze` runs it as a plain SELECT in a read-only transaction)"
            )
        if due.get("due_index_stats"):
            st = due["due_index_stats"]
            lines.append(
                f"- {due['due_index']} (pgstatindex): leaf density {fmt.num(st['avg_leaf_density'])}%, "
                f"{fmt.fixed(st['leaf_pages'])} leaf pages, {fmt.fixed(st['deleted_pages'])} deleted, "
                f"{fmt.fixed(st['empty_pages'])} empty"
            )
    else:
        lines.append("Not examined (no due column).")
    lines.append("")

    lines += ["## Skipped", ""]
    if d.get("skipped"):
        for sk in d["skipped"]:
            lines.append(f"- {sk['what']}: {sk['why']}. Fix: {sk['fix']}.")
    else:
        lines.append("Nothing: the role could read everything inspect looks at.")
    if d.get("compared_runs"):
        lines += ["", "Runs compared: " + ", ".join(f"`{p}`" for p in d["compared_runs"])]
    return "\n".join(lines) + "\n"


def library_line(lib: dict[str, Any]) -> str:
    """The preset in one line: whose schema, which rows are pending, how many of each kind."""
    p, rows = lib["preset"], lib.get("rows") or {}
    counts = (
        f"; {fmt.fixed(rows.get('pending'))} pending, {fmt.fixed(rows.get('finished'))} finished of "
        f"{fmt.fixed(rows.get('total'))} rows"
        if rows
        else ""
    )
    logs = ", ".join(g["table"] for g in (lib.get("log_tables") or {}).values()) or "none here"
    return (
        f"preset {p['name']} (the schema of {p['schema']}): pending rows {lib['pending_filter']}{counts}; "
        f"log tables: {logs}"
    )


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _kv(d: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in d.items())


def _fig(v: Any) -> str:
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return fmt.num(v)
    return str(v)
