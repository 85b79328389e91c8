"""``bench inspect``: a team's own timer table, diagnosed read-only.

In order: the table's shape (catalogues and sizes), a watch window sampling its counters (churn,
HOT ratio, dead tuples created and removed, autovacuum runs, ``pg_stat_progress_vacuum`` when a
vacuum runs) and what holds the vacuum horizon, then bloat (``pgstattuple`` when usable, its
approximate form if the exact one times out, an estimate from statistics otherwise: the report
says which) and the cost of finding due work (``EXPLAIN``; ``EXPLAIN ANALYZE`` of a plain
``SELECT`` in a read-only transaction with ``--analyze``). :mod:`reports.diagnosis` then names
the Composio article's failure signatures the figures show and the designs that address them, citing
measured runs when ``--compare`` gives a directory of them. Every statement runs under
:class:`metrics.owntable.Safeguards`; what the role could not read is listed, not hidden.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import job_libraries
from harness.errors import UsageError
from harness.owntable import DUE_CATEGORIES, OpenTable, column, open_table, timeouts_as_errors
from metrics import owntable

SAMPLE_EVERY_S = 1.0  # vacuum progress; the counters are only differenced at the window's ends
HORIZON_EVERY_S = 5.0  # who holds the horizon: a few catalogue reads, so not every second
INSPECT_JSON = "inspect.json"
INSPECT_MD = "inspect.md"
# when guessing the due column: names like these are preferred, names of past events are not
DUE_NAME_HINT = re.compile(r"due|fire|next|run_?at|run_?after|schedul|wake|not_?before|deadline", re.IGNORECASE)
PAST_EVENT_NAME = re.compile(
    r"^(last|created|updated|modified|deleted|locked|claimed|started|finished|completed|"
    r"inserted|polled)_?|_(created|updated|modified|deleted)$",
    re.IGNORECASE,
)


@dataclass
class Filters:
    """The pending rows (``--where`` or the preset's) and a library's finished rows, bound."""

    pending: list
    finished: list


@dataclass
class Inspection:
    data: dict[str, Any]
    json_path: Path
    md_path: Path
    terminal: list[str]


def inspect_table(
    dsn: str,
    table: str,
    *,
    due_column: str | None,
    watch_s: float,
    analyze: bool,
    compare: list[str] | None,
    out_dir: Path,
    guards: owntable.Safeguards,
    say: Callable[[str], None],
    preset_name: str | None = None,
    where: str | None = None,
) -> Inspection:
    from reports import inspect_report
    from reports.diagnosis import diagnose

    runs = _load_compare(compare)  # bad --compare fails before anything is read
    lib = job_libraries.preset(preset_name) if preset_name else None
    opened = open_table(dsn, table or (lib.table if lib else None), guards, owntable.APPLICATION_NAME, partition_of=say)
    try:
        with timeouts_as_errors(guards, opened.ref.qualified):
            columns = opened.reader.columns(opened.ref)
            if lib:
                job_libraries.check_columns(lib, columns, opened.ref.qualified)
            table_name = opened.ref.qualified
            filters = Filters(
                pending=job_libraries.bind_filter(
                    where if where is not None else (lib.pending if lib else None), columns, "--where", table_name
                ),
                finished=job_libraries.bind_filter(lib.finished, columns, f"--preset {lib.name}", table_name)
                if lib
                else [],
            )
            data = _collect(
                opened, guards, due_column or (lib.due if lib else None), watch_s, analyze, say, lib, filters
            )
    finally:
        opened.close()
    data["diagnosis"] = [f.as_dict() for f in diagnose(data, runs)]
    data["compared_runs"] = [str(r.path) for r in runs]
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out_dir / INSPECT_JSON, out_dir / INSPECT_MD
    inspect_report.write_json(json_path, data)
    md_path.write_text(inspect_report.markdown(data))
    return Inspection(data, json_path, md_path, inspect_report.terminal_lines(data))


def _collect(
    opened: OpenTable,
    guards: owntable.Safeguards,
    due_column: str | None,
    watch_s: float,
    analyze: bool,
    say: Callable[[str], None],
    lib: job_libraries.Preset | None = None,
    filters: Filters | None = None,
) -> dict[str, Any]:
    from harness.stack import redact_dsn

    filters = filters or Filters([], [])

    reader, ref = opened.reader, opened.ref
    data: dict[str, Any] = {
        "tool": "bench inspect",
        "inspected_at": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "dsn": redact_dsn(opened.dsn),
        "table": ref.qualified,
        "server": {
            "version": opened.session["server_version"],
            "role": opened.session["role"],
            "database": opened.session["database"],
        },
        "safeguards": {
            "default_transaction_read_only": opened.session["default_transaction_read_only"],
            "statement_timeout_ms": int(opened.session["statement_timeout_ms"]),
            "lock_timeout_ms": int(opened.session["lock_timeout_ms"]),
            "one_statement_per_transaction": True,
            "verified": True,  # owntable.connect read them back before anything else
        },
    }
    _privileges(opened)
    extensions = _extensions(opened, guards)
    data["extensions"] = {k: {"usable": e.usable, "why_not": e.missing} for k, e in extensions.items()}
    say(
        f"inspecting {ref.qualified} read-only (statement_timeout {guards.statement_timeout_ms} ms, "
        f"lock_timeout {guards.lock_timeout_ms} ms)"
    )
    shape = reader.shape(ref)
    data["shape"] = shape
    data["settings"] = reader.settings()
    logs = _log_tables(opened, lib)
    logs_before = {name: reader.counters(r).get(r.relid) for name, r in logs.items()}
    data["watch"], data["churn"], data["horizon"] = _watch(opened, shape, watch_s, say)
    logs_after = {name: reader.counters(r).get(r.relid) for name, r in logs.items()} if watch_s > 0 else {}
    data["bloat"] = _bloat(opened, shape, extensions.get("pgstattuple"))
    data["due_scan"] = _due_scan(opened, shape, due_column, analyze, extensions.get("pgstattuple"), filters.pending)
    if lib is not None:
        data["library"] = _library(opened, lib, filters, shape, data["due_scan"], logs, logs_before, logs_after)
    data["skipped"] = [owntable.as_json(s) for s in reader.skipped]
    return data


def _load_compare(compare: list[str] | None) -> list:
    if not compare:
        return []
    from reports.errors import ReportError
    from reports.load import load_runs

    try:
        return load_runs(compare)
    except ReportError as exc:
        raise UsageError(f"--compare: {exc}") from None


def _privileges(opened: OpenTable) -> None:
    s, reader = opened.session, opened.reader
    if not (s["is_superuser"] or s["reads_all_stats"]):
        reader.skip(
            "other roles' sessions in pg_stat_activity (state, transaction age, snapshot)",
            f"role {s['role']} is not a member of pg_read_all_stats: other roles' sessions show no details",
            "grant pg_read_all_stats (or pg_monitor) to this role",
        )
        reader.skip(
            "vacuum progress of autovacuum workers (pg_stat_progress_vacuum)",
            "without pg_read_all_stats the relation a vacuum works on is hidden",
            "grant pg_read_all_stats (or pg_monitor) to this role",
        )
    if not opened.ref.can_select:
        reader.skip(
            "per-column widths (pg_stats) and the due-work query",
            f"role {s['role']} may not SELECT from {opened.ref.qualified}",
            f"GRANT SELECT ON {opened.ref.qualified} TO {s['role']}",
        )


def _extensions(opened: OpenTable, guards: owntable.Safeguards) -> dict:
    from metrics.extensions import extensions

    # the probe connects on its own: under the same safeguards
    return extensions(owntable.guarded_conninfo(opened.dsn, guards))


# -- the watch window ------------------------------------------------------------------------------


def _watch(opened: OpenTable, shape: dict[str, Any], watch_s: float, say) -> tuple[dict, dict | None, dict]:
    reader, ref = opened.reader, opened.ref
    names = {i["indexrelid"]: i["name"] for i in shape["indexes"]}
    start = time.time()
    c0, i0 = reader.counters(ref), reader.index_counters(ref)
    horizons = [reader.horizon()]
    progress: dict[int, dict[str, Any]] = {}  # pid -> the vacuum seen, first and last
    interrupted = False
    if watch_s > 0:
        say(f"watching {ref.qualified} for {watch_s:g} s (Ctrl-C ends the window early) ...")
        deadline = start + watch_s
        next_horizon = start + HORIZON_EVERY_S
        try:
            while (now := time.time()) < deadline:
                time.sleep(min(SAMPLE_EVERY_S, max(0.0, deadline - now)))
                for p in reader.attempt("vacuum progress", lambda: reader.vacuum_progress(ref)) or []:
                    _track_vacuum(progress, p, ref)
                if time.time() >= next_horizon:
                    horizons.append(reader.horizon())
                    next_horizon += HORIZON_EVERY_S
        except KeyboardInterrupt:
            interrupted = True
            say("watch window ended early (Ctrl-C); using what was seen")
    c1, i1 = reader.counters(ref), reader.index_counters(ref)
    horizons.append(reader.horizon())
    elapsed = time.time() - start
    watch = {"requested_s": watch_s, "elapsed_s": elapsed, "interrupted": interrupted, "horizon_samples": len(horizons)}
    churn = None
    if watch_s > 0:
        table = owntable.relation_churn(c0.get(ref.relid), c1.get(ref.relid))
        toast = owntable.relation_churn(c0.get(ref.toast_relid), c1.get(ref.toast_relid)) if ref.toast_relid else None
        window = table["window_s"] if table else elapsed
        churn = {
            "table": table,
            "toast": toast,
            "indexes": owntable.index_churn(i0, i1, names, window),
            "vacuums_seen": list(progress.values()),
        }
    else:
        reader.skip("churn over a watch window", "--watch 0s: no window", "give --watch 60s (the default)")
    return watch, churn, _horizon(horizons, reader)


def _track_vacuum(seen: dict[int, dict[str, Any]], p: dict[str, Any], ref) -> None:
    now = time.time()
    which = {ref.relid: "table", ref.toast_relid: "TOAST table"}.get(p["relid"], "a relation hidden from this role")
    entry = seen.setdefault(p["pid"], {"relation": which, "first_seen_s": now, "phases": [], "samples": 0})
    entry["samples"] += 1
    entry["last_seen_s"] = now
    entry["seen_for_s"] = now - entry["first_seen_s"]
    if p["phase"] not in entry["phases"]:
        entry["phases"].append(p["phase"])
    for k in ("heap_blks_total", "heap_blks_scanned", "heap_blks_vacuumed", "index_vacuum_count", "num_dead_item_ids"):
        entry[k] = p.get(k)


# -- the vacuum horizon --------------------------------------------------------------------------


def _horizon(samples: list[dict[str, Any]], reader) -> dict[str, Any]:
    """The holders of the worst sample (the oldest holder seen), ages in seconds where Postgres
    gives them and estimated from the window's transaction-id rate where it gives only xids."""
    first, last = samples[0], samples[-1]
    span = float(last["read_at_s"]) - float(first["read_at_s"])
    xids_per_s = (last["next_xid"] - first["next_xid"]) / span if span > 0 else None
    worst, worst_holders = None, []
    for s in samples:
        holders = horizon_holders(s, xids_per_s)
        age = max((h["age_s"] or 0 for h in holders), default=0)
        if worst is None or age > worst:
            worst, worst_holders, worst_sample = age, holders, s
    idle = [x for x in worst_sample["sessions"] if x["kind"] == "idle in transaction"]
    return {
        "samples": len(samples),
        "xids_per_s": xids_per_s,
        "holders": worst_holders,
        "oldest_age_s": worst or None,
        "idle_in_transaction": len(idle),
        "idle_in_transaction_oldest_s": max((x["state_age_s"] or 0 for x in idle), default=None),
        "hidden_sessions": max(s["hidden_sessions"] for s in samples),
        "oldest_running_xid_behind": worst_sample["oldest_running_xid_behind"],
        "oldest_running_age_s_estimated": (worst_sample["oldest_running_xid_behind"] / xids_per_s)
        if xids_per_s
        else None,
        "replication_slots": worst_sample["replication_slots"],
        "prepared_xacts": len(worst_sample["prepared_xacts"]),
        "sampled_at_s": worst_sample["read_at_s"],
    }


def horizon_holders(sample: dict[str, Any], xids_per_s: float | None) -> list[dict[str, Any]]:
    """Everything in one horizon sample that holds back vacuum, oldest first: sessions with a
    snapshot or a transaction id, replication slots with an xmin, prepared transactions and
    standby feedback. Ages from xids alone are estimated and marked so."""

    def seconds(xids):
        return (xids / xids_per_s) if (xids is not None and xids_per_s) else None

    out = []
    for s in sample["sessions"]:
        xids = max((v for v in (s["xmin_age_xids"], s["xid_age_xids"]) if v is not None), default=None)
        if xids is None:
            continue  # an open transaction without a snapshot or an xid holds nothing back
        known = s["xact_age_s"] is not None
        out.append(
            {
                "kind": s["kind"],
                "pid": s["pid"],
                "age_s": s["xact_age_s"] if known else seconds(xids),
                "age_estimated": not known,
                "xid_age": xids,
                "same_database": s["same_database"],
            }
        )
    for slot in sample["replication_slots"]:
        if slot["xmin_age_xids"] is None:
            continue  # catalog_xmin only: holds the catalogue tables, not this one
        kind = (
            f"replication slot {slot['slot_name']} ({slot['slot_type']}, {'active' if slot['active'] else 'inactive'})"
        )
        out.append(
            {
                "kind": kind,
                "pid": None,
                "age_s": seconds(slot["xmin_age_xids"]),
                "age_estimated": True,
                "xid_age": slot["xmin_age_xids"],
                "same_database": slot["same_database"],
            }
        )
    for p in sample["prepared_xacts"]:
        out.append(
            {
                "kind": "prepared transaction",
                "pid": None,
                "age_s": p["age_s"],
                "age_estimated": False,
                "xid_age": p["xid_age_xids"],
                "same_database": p["same_database"],
            }
        )
    for r in sample["standby_feedback"]:
        out.append(
            {
                "kind": "standby feedback (hot_standby_feedback)",
                "pid": r["pid"],
                "age_s": seconds(r["xmin_age_xids"]),
                "age_estimated": True,
                "xid_age": r["xmin_age_xids"],
                "same_database": None,
            }
        )
    out.sort(key=lambda h: (h["age_s"] or 0, h["xid_age"] or 0), reverse=True)
    return out


# -- bloat -------------------------------------------------------------------------------------


def _bloat(opened: OpenTable, shape: dict[str, Any], pgstattuple) -> dict[str, Any]:
    reader, ref = opened.reader, opened.ref
    if pgstattuple is not None and pgstattuple.usable:
        for approximate, method in ((False, "exact (pgstattuple)"), (True, "approximate (pgstattuple_approx)")):
            heap = reader.pgstattuple(ref.relid, pgstattuple.schema, approximate)
            if heap is None:
                continue
            # pgstattuple_approx does not take TOAST tables; the exact form is cheap enough there
            toast = reader.pgstattuple(ref.toast_relid, pgstattuple.schema) if ref.toast_relid else None
            return {"method": method, "heap": _bloat_figures(heap), "toast": _bloat_figures(toast) if toast else None}
        why = "pgstattuple did not finish (see skipped)"
    else:
        why = pgstattuple.missing if pgstattuple is not None else "pgstattuple not probed"
        reader.skip("exact bloat (pgstattuple)", why, "CREATE EXTENSION pgstattuple and grant pg_stat_scan_tables")
    return _bloat_estimate(opened, shape, why)


def _bloat_figures(r: dict[str, Any]) -> dict[str, Any]:
    length = r["table_len"] or 0
    return {
        **r,
        "dead_pct": 100.0 * r["dead_tuple_len"] / length if length else None,
        "free_pct": 100.0 * r["free_space"] / length if length else None,
        "live_pct": 100.0 * r["tuple_len"] / length if length else None,
    }


def _bloat_estimate(opened: OpenTable, shape: dict[str, Any], why: str) -> dict[str, Any]:
    """Bloat from statistics: the bytes the live rows need (ANALYZE's widths, tuple overhead,
    fillfactor) against the heap's size; dead tuples from pg_stat_all_tables."""
    counters = opened.reader.counters(opened.ref).get(opened.ref.relid) or {}
    live, dead = counters.get("n_live_tup"), counters.get("n_dead_tup")
    width = shape.get("avg_inline_row_bytes")
    heap = shape["heap_bytes"]
    expected = (live * width / (shape["fillfactor_pct"] / 100.0)) if (live is not None and width) else None
    return {
        "method": "estimate (statistics: n_live_tup, n_dead_tup, pg_stats widths)",
        "why_not_exact": why,
        "heap": {
            "table_len": heap,
            "tuple_count": live,
            "dead_tuple_count": dead,
            "expected_bytes": expected,
            "bloat_pct": (100.0 * max(0.0, 1 - expected / heap)) if (expected and heap) else None,
        },
        "toast": {"table_len": shape["toast_bytes"]} if opened.ref.toast_relid else None,
    }


# -- the cost of finding due work ---------------------------------------------------------------


def _due_scan(
    opened: OpenTable, shape: dict[str, Any], due_column: str | None, analyze: bool, pgstattuple, pending: list
) -> dict[str, Any] | None:
    reader, ref = opened.reader, opened.ref
    guessed = False
    if due_column is None:
        due_column = guess_due_column(shape)
        guessed = due_column is not None
        if due_column is None:
            reader.skip(
                "the cost of finding due work",
                "no --due-column given and none could be guessed (a timestamp column leading a B-tree index)",
                "give --due-column COLUMN",
            )
            return None
    col = column(shape["columns"], due_column, "--due-column", DUE_CATEGORIES, ref.qualified)
    query, params = reader.due_query(ref, due_column, col["category"], pending)
    out: dict[str, Any] = {
        "due_column": due_column,
        "guessed": guessed,
        "pending_filter": " and ".join(str(c) for c, _ in pending) or None,
        "batch_rows": 800,
        "query": query.as_string(reader.conn),
        "query_params": params,
    }
    if not ref.can_select:
        return out  # said in skipped
    plan = reader.attempt("EXPLAIN of the due-work query", lambda: reader.explain(query, params))
    if plan is not None:
        out["plan"] = owntable.plan_summary(plan)
    if analyze:
        analysed = reader.attempt(
            "EXPLAIN ANALYZE of the due-work query", lambda: reader.explain_analyze(query, params)
        )
        if analysed is not None:
            out["analyze"] = owntable.plan_summary(analysed)
    due_index = next(
        (i for i in shape["indexes"] if i["columns"] and i["columns"][0] == due_column and i["method"] == "btree"), None
    )
    out["due_index"] = due_index["name"] if due_index else None
    if due_index and pgstattuple is not None and pgstattuple.usable:
        stats = reader.pgstatindex(due_index["indexrelid"], pgstattuple.schema)
        if stats:
            out["due_index_stats"] = stats
    return out


def guess_due_column(shape: dict[str, Any]) -> str | None:
    """A timestamp column that leads a B-tree index, preferring due-like names; None if not one."""
    by_name = {c["name"]: c for c in shape["columns"]}
    leading = {i["columns"][0] for i in shape["indexes"] if i["columns"] and i["method"] == "btree"}
    candidates = [n for n in leading if n in by_name and by_name[n]["category"] == "D"]
    hinted = [n for n in candidates if DUE_NAME_HINT.search(n) and not PAST_EVENT_NAME.search(n)]
    if len(hinted) == 1:
        return hinted[0]
    return candidates[0] if len(candidates) == 1 else None


# -- a job library's own signatures ------------------------------------------------------------


def _log_tables(opened: OpenTable, lib: job_libraries.Preset | None) -> dict[str, owntable.TableRef]:
    """The preset's log tables that exist here (schema-less names resolve beside the queue table)."""
    if lib is None:
        return {}
    out = {}
    for name in lib.log_tables:
        qualified = name if "." in name else f"{opened.ref.schema}.{name}"
        ref = opened.reader.resolve(qualified)
        if ref is not None:
            out[name] = ref
    return out


def _library(
    opened: OpenTable,
    lib: job_libraries.Preset,
    filters: Filters,
    shape: dict[str, Any],
    due_scan: dict[str, Any] | None,
    logs: dict[str, owntable.TableRef],
    before: dict[str, Any],
    after: dict[str, Any],
) -> dict[str, Any]:
    """What the library signatures of :mod:`reports.diagnosis` read: rows by kind, the log
    tables' sizes and growth over the watch window, and the indexes on the due column."""
    reader, ref = opened.reader, opened.ref
    counts = None
    if ref.can_select and filters.finished:
        counts = reader.attempt(
            "pending and finished rows (one counting scan)",
            lambda: reader.row_counts(ref, filters.pending, filters.finished),
            fix="raise --statement-timeout if the server can afford one scan of the table",
        )
    log_out = {}
    for name, log in logs.items():
        sizes = reader.rows(owntable.statement("sizes"), {"relid": log.relid})[0]
        churn = owntable.relation_churn(before.get(name), after.get(name))
        log_out[name] = {
            "table": log.qualified,
            "retention": lib.log_tables[name],
            "bytes": sizes["total_bytes"],
            "rows": (after.get(name) or {}).get("n_live_tup"),
            "inserts_per_s": churn["inserts_per_s"] if churn else None,
            "deletes": churn["deletes"] if churn else None,
            "window_s": churn["window_s"] if churn else None,
        }
    due = due_scan["due_column"] if due_scan else lib.due
    pending_columns = sorted({c.expr.column for c, _ in filters.pending})
    due_indexes = []
    for i in shape["indexes"]:
        if i["method"] != "btree" or due not in i["columns"]:
            continue
        predicate = i["predicate"] or ""
        due_indexes.append(
            {
                "name": i["name"],
                "columns": i["columns"],
                "predicate": i["predicate"],
                "restricted_to_pending": bool(predicate)
                and any(re.search(rf"\b{re.escape(c)}\b", predicate) for c in pending_columns),
            }
        )
    return {
        "preset": lib.as_dict(),
        "table": ref.qualified,
        "pending_filter": " and ".join(str(c) for c, _ in filters.pending) or None,
        "finished_filter": " and ".join(str(c) for c, _ in filters.finished) or None,
        "rows": counts,
        "log_tables": log_out,
        "due_column": due,
        "pending_columns": pending_columns,
        "due_indexes": due_indexes,
    }
