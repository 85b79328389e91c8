"""Which of the Composio article's failure signatures an inspected table shows, each with the figure behind
it, and which design of the toolkit addresses it (citing measured runs when some are given).

The five signatures are the parts of the article's "MVCC doom loop" (docs/sources.md): delete+reinsert churn, a low
HOT ratio on a table with many indexes, wide rows stored out of line in TOAST, a vacuum horizon
held by a long transaction, and a due-work scan walking dead tuples. Each finding is ``shown``
True or False from its figure, or None when the figure could not be read (no watch window, no
updates in it, no privilege); the thresholds below say where each line is drawn and why.

Pure: works on the ``inspect.json`` dictionary and :class:`reports.load.Run` objects only.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from reports import fmt

# -- where the lines are drawn ----------------------------------------------------------------
# Churn: every live row deleted and re-inserted at least once an hour, deletes and inserts
# balanced (a table that only grows or only drains is not re-arming). Our line; the Composio article
# re-armed every row every minute or two (interval-60-120s).
CHURN_REPLACED_PER_ROW_PER_H = 1.0
CHURN_BALANCE = (0.5, 2.0)  # deletes / inserts
# HOT: the Composio article measured 18% of updates HOT with six indexes; after the move, 100%.
LOW_HOT_RATIO = 0.5
MANY_INDEXES = 4  # the Composio article's table had six; the designs here keep 2-3 per table
# TOAST: bytes stored out of line per live row. A row's values go out of line only once the row
# passes ~2 KB (TOAST_TUPLE_THRESHOLD), so 1 KiB per row on average means most rows do.
WIDE_TOAST_BYTES_PER_ROW = 1024
# Due scan: dead versions outnumbering live rows (dead-872m: 872M dead against 99k live), an
# index handing back several entries per live row it leads to, or a due query touching several
# buffers per row it returns.
DEAD_PER_LIVE = 1.0
ENTRIES_PER_ROW_FETCHED = 2.0
BUFFERS_PER_DUE_ROW = 3.0

SIGNATURES = {
    "delete_reinsert_churn": "delete+reinsert churn",
    "low_hot_many_indexes": "low HOT ratio with many indexes",
    "wide_toasted_rows": "wide TOASTed rows",
    "horizon_held": "vacuum horizon held",
    "due_scan_dead_tuples": "due-work scan walking dead tuples",
}

# A job library's own signatures (inspect --preset): finished rows kept beside the pending ones
# in the queue table, a log table growing with nothing removing its rows, a due-time index that
# holds finished rows, and no index on the due time restricted to pending rows.
FINISHED_PER_PENDING = 1.0  # the due scan's table holds at least as many finished rows as pending
LIBRARY_SIGNATURES = {
    "finished_rows_kept": "finished jobs kept in the queue table",
    "log_table_unbounded": "a log table growing without retention",
    "due_index_includes_finished": "a due-time index that includes finished rows",
    "missing_partial_index": "no partial index on the due time of pending rows",
}
SIGNATURES.update(LIBRARY_SIGNATURES)

# What the Composio article reported for each signature (inspect.json's ``source``).
ARTICLE_FIGURE = {
    "delete_reinsert_churn": "the Composio article: each poll deleted its row and inserted the next run "
    "(four writes per poll: an insert, two updates, a delete)",
    "low_hot_many_indexes": "the Composio article: 18% of updates HOT, six indexes",
    "wide_toasted_rows": "the Composio article: wide rows, large encrypted columns stored out of line in TOAST",
    "horizon_held": "the Composio article: a long transaction or an idle session with an open transaction kept "
    "the queue's dead tuples from being reclaimed",
    "due_scan_dead_tuples": "the Composio article: 872M dead tuples against 99k live rows; the due query walked an "
    "index full of dead entries",
}

ARTICLE_FIGURE.update(
    {
        "finished_rows_kept": "the timer-wheel article: the due query reads scheduled rows "
        "only, through a partial index; every finished row left in the table is dead weight to it",
        "log_table_unbounded": "the durable-workflows article: step records need a retention "
        "policy, or the history outgrows the work",
        "due_index_includes_finished": "the timer-wheel article: an index on the fire time of "
        "every row grows with history, one on scheduled rows only stays the size of the backlog",
        "missing_partial_index": "the timer-wheel article: a partial index WHERE status = 'scheduled' on the fire time",
    }
)

# Which design addresses each signature, and how (the designs' own docstrings and the articles).
ADDRESSED_BY = {
    "delete_reinsert_churn": [
        (
            "pg_leased",
            "rows are updated in place and never deleted per fire (the timer-wheel and durable-workflows articles)",
        ),
        (
            "temporal_shards",
            "timers live in shard workflows; the trigger row is read and written by key, "
            "never deleted per fire (the Composio article)",
        ),
    ],
    "low_hot_many_indexes": [
        (
            "temporal_shards",
            "no index on the fire time and fillfactor 50 on the trigger table: the Composio article "
            "measured 100% HOT updates after the move",
        ),
        (
            "pg_leased",
            "wide state in its own table updated by key (split_state) and fillfactor knobs; its "
            "schedule table still changes indexed columns on every claim "
            "(schedulers/pg_leased/MEASUREMENTS.md)",
        ),
    ],
    "wide_toasted_rows": [
        (
            "pg_leased",
            "state in its own table, kept inline and written only when it changed (split_state, "
            "inline_state, skip_unchanged_state; schedulers/pg_leased/MEASUREMENTS.md)",
        ),
        (
            "temporal_shards",
            "state committed by key and skipped when the poll cursor did not change "
            "(the Composio article's next step, built in)",
        ),
    ],
    "horizon_held": [
        (
            "temporal_shards",
            "the dispatch path never scans Postgres by due time, so a held horizon no longer "
            "slows the ticks (the Composio article); the holder still needs ending",
        ),
        (
            "pg_leased",
            "claim transactions are tiny: claim, commit, then execute "
            "(the timer-wheel article: 'long transactions are poison')",
        ),
    ],
    "due_scan_dead_tuples": [
        (
            "temporal_shards",
            "the next due timer comes from a min-heap in a shard workflow: no due-time scan "
            "of Postgres at all (the Composio article)",
        ),
        (
            "pg_leased",
            "a partial index on scheduled rows and in-place updates keep the scanned range small "
            "(the timer-wheel article)",
        ),
    ],
}


_LEASED_PARTIAL = (
    "pg_leased",
    "one row per trigger updated in place, a partial index on scheduled rows only; nothing finished is kept",
)
_SHARDS_NO_SCAN = (
    "temporal_shards",
    "no due-time scan of Postgres at all: the next timer comes from a shard's min-heap",
)
ADDRESSED_BY.update(
    {
        "finished_rows_kept": [_LEASED_PARTIAL, _SHARDS_NO_SCAN],
        "log_table_unbounded": [
            ("pg_leased", "no per-fire log: a fire updates its trigger's row and its keyed effect"),
            (
                "temporal_shards",
                "history lives in Temporal, bounded by Continue-As-New and the namespace's retention",
            ),
        ],
        "due_index_includes_finished": [_LEASED_PARTIAL, _SHARDS_NO_SCAN],
        "missing_partial_index": [_LEASED_PARTIAL, _SHARDS_NO_SCAN],
    }
)


@dataclass
class Finding:
    key: str
    name: str
    shown: bool | None  # None: the figure could not be read
    figure: str  # the sentence with the numbers behind the verdict
    evidence: dict[str, Any] = field(default_factory=dict)
    source: str = ""  # what the Composio article reported for this signature
    addressed_by: list[dict[str, str]] = field(default_factory=list)
    measured: list[str] = field(default_factory=list)  # sentences citing --compare runs

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def diagnose(data: dict[str, Any], runs: list | None = None) -> list[Finding]:
    """Every signature, in the Composio article's order, shown or not, with its figure."""
    runs = runs or []
    findings = [_churn(data), _hot(data), _toast(data), _horizon(data), _due_scan(data)]
    if data.get("library"):
        lib = data["library"]
        findings += [_finished_kept(lib), _log_unbounded(lib), _due_index_finished(lib), _partial_index(lib, data)]
    for f in findings:
        f.name = SIGNATURES[f.key]
        f.source = ARTICLE_FIGURE[f.key]
        f.addressed_by = [{"design": d, "how": how} for d, how in ADDRESSED_BY[f.key]]
        f.measured = measured(f.key, runs) if runs else []
    return findings


def _table_churn(data: dict[str, Any]) -> dict[str, Any] | None:
    churn = data.get("churn") or {}
    return churn.get("table")


def _live_rows(data: dict[str, Any]) -> float | None:
    """Live rows: pgstattuple's count when it ran (n_live_tup is an estimate that drifts under
    churn), else pg_stat_all_tables' n_live_tup at the window's end, else the planner's."""
    bloat = data.get("bloat") or {}
    if bloat.get("method", "").startswith(("exact", "approximate")):
        return (bloat.get("heap") or {}).get("tuple_count")
    c = _table_churn(data) or {}
    return c.get("live_rows_end") or data["shape"].get("row_estimate")


def _churn(data: dict[str, Any]) -> Finding:
    c = _table_churn(data)
    if not c:
        return Finding("delete_reinsert_churn", "", None, "no watch window: churn not measured")
    ins, dels, upd = c["inserts_per_s"], c["deletes_per_s"], c["updates_per_s"]
    live = _live_rows(data) or 0
    replaced = min(ins, dels)
    per_row_per_h = (replaced * 3600.0 / live) if live else None
    balanced = ins > 0 and CHURN_BALANCE[0] <= dels / ins <= CHURN_BALANCE[1]
    shown = bool(balanced and per_row_per_h is not None and per_row_per_h >= CHURN_REPLACED_PER_ROW_PER_H)
    figure = (
        f"{fmt.num(ins)} inserts/s, {fmt.num(dels)} deletes/s and {fmt.num(upd)} updates/s against "
        f"{fmt.fixed(live)} live rows over {fmt.num(c['window_s'])} s"
    )
    if replaced > 0 and live:
        figure += (
            f": every row deleted and re-inserted about every {fmt.num(live / replaced)} s "
            f"({fmt.num(per_row_per_h)} times an hour)"
        )
        if ins:
            figure += f", with {fmt.num(upd / ins)} updates per re-insert"
    return Finding(
        "delete_reinsert_churn",
        "",
        shown,
        figure,
        {
            "inserts_per_s": ins,
            "deletes_per_s": dels,
            "updates_per_s": upd,
            "live_rows": live,
            "replaced_per_row_per_h": per_row_per_h,
        },
    )


def _hot(data: dict[str, Any]) -> Finding:
    c = _table_churn(data)
    n_indexes = data["shape"]["index_count"]
    if not c:
        return Finding(
            "low_hot_many_indexes",
            "",
            None,
            f"{n_indexes} indexes; no watch window: HOT ratio not measured",
            {"indexes": n_indexes},
        )
    hot, upd = c["hot_ratio"], c["updates"]
    non_hot_writes = c["inserts"] + c["updates"] - c["hot_updates"]
    index_entries_per_s = non_hot_writes * n_indexes / c["window_s"] if c["window_s"] else None
    evidence = {"hot_ratio": hot, "updates": upd, "indexes": n_indexes, "index_entries_per_s": index_entries_per_s}
    if hot is None:
        return Finding(
            "low_hot_many_indexes",
            "",
            None,
            f"no updates in the window, so no HOT ratio; {n_indexes} indexes",
            evidence,
        )
    shown = hot < LOW_HOT_RATIO and n_indexes >= MANY_INDEXES
    figure = (
        f"HOT {fmt.pct(hot)} of {fmt.fixed(upd)} updates on a table with {n_indexes} indexes: each insert and "
        f"non-HOT update adds an entry to all {n_indexes}, about {fmt.num(index_entries_per_s)} index entries/s"
    )
    return Finding("low_hot_many_indexes", "", shown, figure, evidence)


def _toast(data: dict[str, Any]) -> Finding:
    shape, bloat = data["shape"], data.get("bloat") or {}
    toast_exact = (bloat.get("toast") or {}).get("tuple_len")
    heap_exact = bloat.get("heap") or {}
    live = heap_exact.get("tuple_count")
    if toast_exact is not None and live:
        per_row, source = toast_exact / live, f"live TOAST bytes per live row, {bloat['method']}"
    else:
        rows = _live_rows(data)
        per_row = (shape["toast_bytes"] / rows) if rows else None
        source = "TOAST table size per live row (dead chunks included)"
    evidence = {
        "toast_bytes_per_row": per_row,
        "source": source,
        "toast_bytes": shape["toast_bytes"],
        "heap_bytes": shape["heap_bytes"],
    }
    if per_row is None:
        return Finding("wide_toasted_rows", "", None, "row count unknown: TOAST width per row not computed", evidence)
    figure = (
        f"{fmt.human_bytes(per_row)} stored out of line per live row ({source}); TOAST "
        f"{fmt.human_bytes(shape['toast_bytes'])} beside a {fmt.human_bytes(shape['heap_bytes'])} heap"
    )
    toast_churn = (data.get("churn") or {}).get("toast")
    if toast_churn:
        figure += (
            f"; the TOAST table took {fmt.num(toast_churn['inserts_per_s'])} chunk inserts/s and "
            f"{fmt.num(toast_churn['deletes_per_s'])} chunk deletes/s"
        )
        evidence["toast_inserts_per_s"] = toast_churn["inserts_per_s"]
        evidence["toast_deletes_per_s"] = toast_churn["deletes_per_s"]
    return Finding("wide_toasted_rows", "", per_row >= WIDE_TOAST_BYTES_PER_ROW, figure, evidence)


def naptime_s(settings: dict[str, str]) -> float:
    """autovacuum_naptime in seconds as the server reported it ("60 s"); 60 when unreadable."""
    try:
        value, _, unit = settings.get("autovacuum_naptime", "60 s").partition(" ")
        return float(value) * {"ms": 0.001, "s": 1.0, "min": 60.0}.get(unit or "s", 1.0)
    except ValueError:
        return 60.0


def _horizon(data: dict[str, Any]) -> Finding:
    h = data.get("horizon") or {}
    limit = naptime_s(data.get("settings") or {})
    holders = [x for x in h.get("holders", []) if x.get("age_s") is not None and x["kind"] != "autovacuum worker"]
    evidence = {
        "naptime_s": limit,
        "holders": holders[:5],
        "idle_in_transaction": h.get("idle_in_transaction"),
        "hidden_sessions": h.get("hidden_sessions"),
    }
    c = _table_churn(data)
    died = f"; {fmt.fixed(c['dead_created'])} row versions of this table died in the window" if c else ""
    if holders:
        top = holders[0]
        shown = top["age_s"] >= limit
        approx = "about " if top["age_estimated"] else ""
        pid = f" (pid {top['pid']})" if top.get("pid") else ""
        where = "" if top.get("same_database") in (True, None) else " in another database (the horizon is per cluster)"
        figure = (
            f"oldest holder: {top['kind']}{pid}{where}, {approx}{fmt.num(top['age_s'])} s old "
            f"({fmt.fixed(top['xid_age'])} transactions behind), against autovacuum_naptime {fmt.num(limit)} s"
            f"{died}"
        )
        if h.get("idle_in_transaction"):
            figure += f"; {h['idle_in_transaction']} session(s) idle in transaction"
        return Finding("horizon_held", "", shown, figure, evidence)
    behind, est = h.get("oldest_running_xid_behind"), h.get("oldest_running_age_s_estimated")
    unaged = [x for x in h.get("holders", []) if x.get("age_s") is None]
    if unaged:
        oldest = max(x["xid_age"] or 0 for x in unaged)
        return Finding(
            "horizon_held",
            "",
            None,
            f"{len(unaged)} holder(s) whose age this role cannot read (the oldest "
            f"{fmt.fixed(oldest)} transactions behind, {unaged[0]['kind']}) and no transaction-id rate to "
            f"estimate it from{died}",
            evidence,
        )
    if h.get("hidden_sessions"):
        if est is not None and est >= limit:
            return Finding(
                "horizon_held",
                "",
                True,
                f"no visible holder, but the oldest running transaction is {fmt.fixed(behind)} transactions "
                f"behind (about {fmt.num(est)} s at the window's rate); {h['hidden_sessions']} "
                f"session(s) of other roles are hidden from this role{died}",
                evidence,
            )
        return Finding(
            "horizon_held",
            "",
            None,
            f"{h['hidden_sessions']} session(s) of other roles are hidden from this role; the oldest running "
            f"transaction is {fmt.fixed(behind)} transactions behind",
            evidence,
        )
    return Finding(
        "horizon_held", "", False, f"nothing held the horizon in {h.get('samples', 0)} samples{died}", evidence
    )


def _due_scan(data: dict[str, Any]) -> Finding:
    due = data.get("due_scan")
    if not due:
        return Finding("due_scan_dead_tuples", "", None, "no due column: the due-work query was not examined")
    c = _table_churn(data) or {}
    bloat = data.get("bloat") or {}
    heap = bloat.get("heap") or {}
    if bloat.get("method", "").startswith(("exact", "approximate")):
        live, dead, source = heap.get("tuple_count"), heap.get("dead_tuple_count"), bloat["method"]
    else:
        live, dead, source = c.get("live_rows_end"), c.get("dead_rows_end"), "pg_stat_all_tables estimate"
        if live is None:
            live, dead = heap.get("tuple_count"), heap.get("dead_tuple_count")
    ratio = (dead / live) if (live and dead is not None) else None
    plan = due.get("plan") or {}
    idx_window = next(
        (i for i in (data.get("churn") or {}).get("indexes", []) if i["index"] == due.get("due_index")), None
    )
    per_fetch, per_fetch_what = None, ""
    if idx_window and idx_window["entries_per_row_fetched"] is not None:
        per_fetch, per_fetch_what = idx_window["entries_per_row_fetched"], "entries per live row fetched"
    elif idx_window and idx_window["entries_read"] and c.get("deletes"):
        # A queue that deletes what fired finds each fired row once with a due scan; its index
        # fetch counter stays 0 when those scans lock rows or run as bitmap scans.
        per_fetch = idx_window["entries_read"] / c["deletes"]
        per_fetch_what = "entries per deleted (fired) row, each assumed found once by a due scan"
    analysed = due.get("analyze") or {}
    per_row = analysed.get("buffers_per_row")
    access = plan.get("node_types", [])
    via = next((a for a in plan.get("access", []) if a.get("index")), None)
    path = (f"{via['node']} using {via['index']}" if via else " / ".join(access)) if plan else "plan not read"
    parts = [f"the due query on {due['due_column']}{' (guessed)' if due.get('guessed') else ''} ({path})"]
    if ratio is not None:
        parts.append(
            f"walks a table of {fmt.fixed(dead)} dead against {fmt.fixed(live)} live rows "
            f"({fmt.num(ratio)} dead per live, {source})"
        )
    if per_fetch is not None:
        parts.append(
            f"{due['due_index']}'s scans read {fmt.fixed(idx_window['entries_read'])} entries in the window, "
            f"{fmt.num(per_fetch)} {per_fetch_what}"
        )
    if per_row is not None:
        parts.append(f"EXPLAIN ANALYZE: {fmt.num(per_row)} buffers per due row, {fmt.ms(analysed.get('execution_ms'))}")
    evidence = {
        "dead_per_live": ratio,
        "index_entries_per_due_row": per_fetch,
        "buffers_per_due_row": per_row,
        "index_used": plan.get("index_used"),
        "node_types": access,
    }
    signals = [
        ratio is not None and ratio >= DEAD_PER_LIVE,
        per_fetch is not None and per_fetch >= ENTRIES_PER_ROW_FETCHED,
        per_row is not None and per_row >= BUFFERS_PER_DUE_ROW,
    ]
    known = ratio is not None or per_fetch is not None or per_row is not None
    return Finding("due_scan_dead_tuples", "", any(signals) if known else None, "; ".join(parts), evidence)


# -- a job library's own signatures -----------------------------------------------------------


def _who(lib: dict[str, Any]) -> str:
    return lib["preset"]["name"]


def _finished_kept(lib: dict[str, Any]) -> Finding:
    key, p = "finished_rows_kept", lib["preset"]
    if not lib.get("finished_filter"):
        return Finding(key, "", False, f"{_who(lib)} deletes finished jobs from {lib['table']}")
    rows = lib.get("rows")
    if not rows:
        return Finding(key, "", None, "pending and finished rows not counted (see skipped)")
    finished, pending = rows["finished"], rows["pending"]
    per = finished / pending if pending else None
    removal = p["keeps_finished"] or f"nothing in {_who(lib)} removes them by default"
    figure = (
        f"{fmt.fixed(finished)} finished rows ({lib['finished_filter']}) beside {fmt.fixed(pending)} pending "
        f"({lib['pending_filter']}) in {lib['table']}"
        + (f": {fmt.num(per)} finished per pending row" if per is not None else "")
        + f"; {removal}"
    )
    shown = finished > 0 and (pending == 0 or finished / pending >= FINISHED_PER_PENDING)
    return Finding(
        key,
        "",
        shown,
        figure,
        {"finished": finished, "pending": pending, "total": rows["total"], "removed_by": removal},
    )


def _log_unbounded(lib: dict[str, Any]) -> Finding:
    key = "log_table_unbounded"
    logs = lib.get("log_tables") or {}
    if not logs:
        return Finding(key, "", False, f"{_who(lib)} keeps no log table here")
    parts, shown, evidence = [], False, {}
    known = False
    for name, g in logs.items():
        retention = g["retention"] or "nothing removes its rows"
        grows = g["inserts_per_s"] is not None and g["inserts_per_s"] > 0 and not g["deletes"]
        if g["inserts_per_s"] is not None:
            known = True
        shown = shown or (grows and g["retention"] is None)
        parts.append(
            f"{g['table']}: {fmt.fixed(g['rows'])} rows, {fmt.human_bytes(g['bytes'])}"
            + (
                f", {fmt.num(g['inserts_per_s'])} inserts/s and {fmt.fixed(g['deletes'])} deletes over "
                f"{fmt.num(g['window_s'])} s"
                if g["inserts_per_s"] is not None
                else " (no watch window: growth not measured)"
            )
            + f"; {retention}"
        )
        evidence[name] = g
    return Finding(key, "", shown if known else None, "; ".join(parts), evidence)


def _due_index_finished(lib: dict[str, Any]) -> Finding:
    key = "due_index_includes_finished"
    idx = lib.get("due_indexes") or []
    if not idx:
        return Finding(key, "", False, f"no index on {lib['due_column']} in {lib['table']}", {"indexes": []})
    whole = [i for i in idx if not i["predicate"]]
    keeps = bool(lib.get("finished_filter"))
    listed = "; ".join(
        f"{i['name']} ({', '.join(i['columns'])}{' WHERE ' + i['predicate'] if i['predicate'] else ''})" for i in idx
    )
    figure = f"indexes on {lib['due_column']}: {listed}"
    if whole and keeps:
        figure += f": {', '.join(i['name'] for i in whole)} hold(s) an entry for every finished row the table keeps"
    return Finding(key, "", bool(whole and keeps), figure, {"indexes": idx})


def _partial_index(lib: dict[str, Any], data: dict[str, Any]) -> Finding:
    key = "missing_partial_index"
    idx = lib.get("due_indexes") or []
    fitting = [i for i in idx if i["restricted_to_pending"]]
    plan = ((data.get("due_scan") or {}).get("plan")) or {}
    path = " / ".join(plan.get("node_types") or []) or "plan not read"
    if plan.get("index_used"):
        path += f" using {plan['index_used']}"
    if fitting:
        return Finding(
            key,
            "",
            False,
            f"{', '.join(i['name'] for i in fitting)} covers {lib['due_column']} of pending rows only "
            f"(WHERE {fitting[0]['predicate']}); the due query: {path}",
            {"indexes": [i["name"] for i in fitting]},
        )
    figure = (
        f"no index on {lib['due_column']} restricted to pending rows ({lib['pending_filter'] or 'no pending filter'}); "
        f"{'indexes on it: ' + ', '.join(i['name'] for i in idx) if idx else 'no index on it at all'}; "
        f"the due query: {path}"
    )
    return Finding(key, "", True, figure, {"indexes": [i["name"] for i in idx], "plan": path})


# -- measured runs ------------------------------------------------------------------------------


def measured(key: str, runs: list) -> list[str]:
    """One sentence per run that bears on the signature, from its summary.json (the runs' paths
    are listed once, under the diagnosis)."""
    out = []
    for r in runs:
        s = r.summary or {}
        if not s:
            continue
        pf, dead = s.get("per_fire") or {}, s.get("dead_tuples") or {}
        lag = (s.get("lag_ms") or {}).get("p99")
        if key == "delete_reinsert_churn":
            fig = (
                f"{fmt.fixed(pf.get('inserts'), '{:,.2f}')} inserts / {fmt.fixed(pf.get('updates'), '{:,.2f}')} "
                f"updates / {fmt.fixed(pf.get('deletes'), '{:,.2f}')} deletes per fire"
            )
        elif key == "low_hot_many_indexes":
            fig = f"HOT {fmt.pct(s.get('hot_ratio'))}"
        elif key == "wide_toasted_rows":
            fig = (
                f"TOAST dead peak {fmt.fixed(dead.get('toast_peak'))}, "
                f"{fmt.human_bytes(pf.get('wal_bytes'))} WAL per fire"
            )
        elif key == "horizon_held":
            holds = [f for f in (s.get("faults") or []) if f.get("kind") == "hold-snapshot" and f.get("fired")]
            if holds:
                h = holds[0]
                fig = (
                    f"under --fault {h['spec']}: lag peak {fmt.lag(h.get('lag_peak_ms'))}, "
                    f"{fmt.fixed(h.get('late_fires'))} late fires; dead tuples peak {fmt.fixed(dead.get('table_peak'))}"
                )
            else:
                fig = (
                    f"dead tuples peak {fmt.fixed(dead.get('table_peak'))}, lag p99 {fmt.lag(lag)} "
                    f"(no hold-snapshot fault in this run; `bench run --fault hold-snapshot@10s:60s` measures it)"
                )
        else:
            fig = f"dead tuples peak {fmt.fixed(dead.get('table_peak'))}, lag p99 {fmt.lag(lag)}"
        name = Path(r.path).name
        who = r.label or r.scheduler
        out.append(f"{who}: {fig}" if name.endswith(who) or not name else f"{who} ({name}): {fig}")
    return out
