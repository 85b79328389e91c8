"""A team's own timer table, read only: its shape, its counters, what holds its vacuum horizon,
its bloat and the cost of its due-work query (``bench inspect``), and its rows' hashes, due times
and sizes (``bench capture``).

Safeguards, checked rather than assumed (:func:`connect`): every connection starts with
``default_transaction_read_only``, ``statement_timeout``, ``lock_timeout`` and
``idle_in_transaction_session_timeout`` set in its startup options, and :func:`connect` reads
them back and refuses to go on if the server did not take them. Connections are in autocommit,
so each statement is its own (read-only) transaction and no lock (``AccessShareLock``, the only
one a plain read takes) outlives the statement that took it; ``statement_timeout`` bounds that.
The one explicit transaction is ``--analyze``'s ``EXPLAIN ANALYZE`` of a plain ``SELECT``, also
read only. Every statement is a named block of ``owntable.sql``.

A statement the role may not run (missing privilege), or that hits a timeout, is skipped and
recorded in :attr:`Reader.skipped` with the reason and what would fix it; the caller goes on
with what it has. Nothing here reads query text, client addresses or role names of other
sessions; capture returns keyed hashes of ids and tenants computed in the database.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg import errors, sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from metrics import owntable_expr as expr
from schedulers.sqlfile import load_blocks

SQL_PATH = Path(__file__).with_name("owntable.sql")
BLOCKS = load_blocks(SQL_PATH)
APPLICATION_NAME = "timerbench inspect"
HEAP_TUPLE_OVERHEAD_BYTES = 28  # tuple header (23, aligned to 24) + line pointer (4)
HIDDEN_SESSION = "session of another role (details hidden from this role)"


def statement(name: str, **parts: sql.Composable) -> sql.Composed:
    """The block ``name`` of ``owntable.sql`` with its placeholders composed (identifiers,
    fragments); never string formatting."""
    return sql.SQL(BLOCKS[name]).format(**parts)


def fragment(name: str, **parts: sql.Composable) -> sql.Composed:
    """A block used inside another statement: its comment lines dropped."""
    body = "\n".join(line for line in BLOCKS[name].splitlines() if not line.lstrip().startswith("--"))
    return sql.SQL(body.strip()).format(**parts)


# -- the connection and its safeguards -------------------------------------------------------


@dataclass(frozen=True)
class Safeguards:
    """What every connection runs under. ``statement_timeout_ms`` also bounds how long a lock can
    be held (one statement per transaction); ``lock_timeout_ms`` how long one is waited for."""

    statement_timeout_ms: int = 5000
    lock_timeout_ms: int = 1000

    def options(self) -> str:
        return (
            f"-c default_transaction_read_only=on -c statement_timeout={self.statement_timeout_ms} "
            f"-c lock_timeout={self.lock_timeout_ms} "
            f"-c idle_in_transaction_session_timeout={self.statement_timeout_ms}"
        )


class SafeguardError(Exception):
    """The server did not apply a safeguard; nothing was read."""


def guarded_conninfo(dsn: str, guards: Safeguards, application_name: str = APPLICATION_NAME) -> str:
    """``dsn`` with the safeguards added to its startup options (any options it had are kept)."""
    own = conninfo_to_dict(dsn).get("options") or ""
    return make_conninfo(dsn, options=f"{own} {guards.options()}".strip(), application_name=application_name)


def connect(
    dsn: str, guards: Safeguards, application_name: str = APPLICATION_NAME, connect_timeout_s: int = 10
) -> tuple[psycopg.Connection, dict[str, Any]]:
    """An autocommit connection under ``guards``, and the session's settings as read back.

    Raises :class:`SafeguardError` when the server did not apply them (a pooler that drops
    startup options, say), psycopg.OperationalError when it cannot be reached."""
    conn = psycopg.connect(
        guarded_conninfo(dsn, guards, application_name), autocommit=True, connect_timeout=connect_timeout_s
    )
    try:
        row = _dict_rows(conn.execute(statement("session_guard")))[0]
        problems = []
        if row["default_transaction_read_only"] != "on" or row["transaction_read_only"] != "on":
            problems.append("default_transaction_read_only is not on")
        if int(row["statement_timeout_ms"]) != guards.statement_timeout_ms:
            problems.append(f"statement_timeout is {row['statement_timeout_ms']} ms, not {guards.statement_timeout_ms}")
        if int(row["lock_timeout_ms"]) != guards.lock_timeout_ms:
            problems.append(f"lock_timeout is {row['lock_timeout_ms']} ms, not {guards.lock_timeout_ms}")
        if problems:
            raise SafeguardError(
                "the server did not apply the read-only safeguards ("
                + "; ".join(problems)
                + "); connect directly rather than through a pooler that drops startup options"
            )
    except BaseException:
        conn.close()
        raise
    return conn, row


def _dict_rows(cur: psycopg.Cursor) -> list[dict[str, Any]]:
    names = [d.name for d in cur.description or []]
    return [dict(zip(names, r)) for r in cur.fetchall()]


# -- the table ---------------------------------------------------------------------------------


@dataclass
class TableRef:
    relid: int
    schema: str
    name: str
    relkind: str
    toast_relid: int
    reltuples: float
    relpages: int
    reloptions: list[str]
    toast_reloptions: list[str]
    can_select: bool

    @property
    def ident(self) -> sql.Identifier:
        return sql.Identifier(self.schema, self.name)

    @property
    def qualified(self) -> str:
        return f"{self.schema}.{self.name}"

    @property
    def relids(self) -> list[int]:
        return [self.relid] + ([self.toast_relid] if self.toast_relid else [])


def parse_reloptions(options: list[str]) -> dict[str, str]:
    out = {}
    for item in options or []:
        key, _, value = item.partition("=")
        out[key] = value
    return out


@dataclass
class Skip:
    """Something not read: what, why, and what would let it be read."""

    what: str
    why: str
    fix: str


@dataclass
class Reader:
    """The read-only statements of inspect and capture over one guarded connection."""

    conn: psycopg.Connection
    guards: Safeguards
    server_version_num: int = 180000
    skipped: list[Skip] = field(default_factory=list)

    # one statement, or a recorded skip ---------------------------------------------------

    def rows(self, query: sql.Composable, params: dict | None = None) -> list[dict[str, Any]]:
        return _dict_rows(self.conn.execute(query, params))

    def attempt(self, what: str, fn: Callable[[], Any], fix: str = "") -> Any:
        """``fn()``, or None with a :class:`Skip` when the role lacks a privilege or a timeout hits."""
        try:
            return fn()
        except errors.InsufficientPrivilege as exc:
            self.skip(what, _first_line(exc), fix or "grant this role the privilege named")
        except errors.QueryCanceled:
            self.skip(
                what,
                f"statement_timeout ({self.guards.statement_timeout_ms} ms) reached",
                "raise --statement-timeout if the server can afford a longer read",
            )
        except errors.LockNotAvailable:
            self.skip(
                what,
                f"lock_timeout ({self.guards.lock_timeout_ms} ms) reached: another session holds a conflicting lock",
                "retry when no DDL runs on the table",
            )
        return None

    def skip(self, what: str, why: str, fix: str) -> None:
        self.skipped.append(Skip(what, why, fix))

    # the table -------------------------------------------------------------------------------

    def resolve(self, name: str) -> TableRef | None:
        """The table ``name`` names (SQL parsing: quoting and search_path apply), or None."""
        try:
            found = self.rows(statement("resolve_table"), {"name": name})
        except (errors.InvalidName, errors.InsufficientPrivilege, errors.UndefinedObject):
            return None
        if not found:
            return None
        return TableRef(**found[0])

    def columns(self, ref: TableRef) -> list[dict[str, Any]]:
        return self.rows(statement("columns"), {"relid": ref.relid, "schema": ref.schema, "name": ref.name})

    def shape(self, ref: TableRef) -> dict[str, Any]:
        """Columns, sizes, indexes, fillfactor and per-table autovacuum settings."""
        columns = self.columns(ref)
        sizes = self.rows(statement("sizes"), {"relid": ref.relid})[0]
        indexes = self.rows(statement("indexes"), {"relid": ref.relid})
        opts = parse_reloptions(ref.reloptions)
        toast_opts = parse_reloptions(ref.toast_reloptions)
        widths = [c["avg_width"] for c in columns]
        inline_width = (
            (sum(widths) + HEAP_TUPLE_OVERHEAD_BYTES) if widths and all(w is not None for w in widths) else None
        )
        return {
            "relkind": ref.relkind,
            "row_estimate": ref.reltuples if ref.reltuples >= 0 else None,  # -1: never analysed or vacuumed
            "pages": ref.relpages,
            **sizes,
            "avg_inline_row_bytes": inline_width,
            "avg_inline_row_source": "pg_stats (ANALYZE's average widths) + tuple overhead" if inline_width else None,
            "columns": columns,
            "indexes": indexes,
            "index_count": len(indexes),
            "partial_indexes": [i["name"] for i in indexes if i["predicate"]],
            "fillfactor_pct": int(opts.get("fillfactor", 100)),
            "table_autovacuum": {k: v for k, v in opts.items() if k.startswith(("autovacuum", "toast"))},
            "toast_autovacuum": {k: v for k, v in toast_opts.items() if k.startswith("autovacuum")},
        }

    def settings(self) -> dict[str, str]:
        return {
            r["name"]: f"{r['setting']}{' ' + r['unit'] if r['unit'] else ''}" for r in self.rows(statement("settings"))
        }

    # counters (read at each sample of the watch window) ---------------------------------------

    def counters(self, ref: TableRef) -> dict[int, dict[str, Any]]:
        rows = {r["relid"]: r for r in self.rows(statement("table_counters"), {"relids": ref.relids})}
        if self.server_version_num >= 180000:
            for r in self.rows(statement("vacuum_times"), {"relids": ref.relids}):
                rows.setdefault(r["relid"], {}).update(r)
        return rows

    def index_counters(self, ref: TableRef) -> dict[int, dict[str, Any]]:
        return {r["indexrelid"]: r for r in self.rows(statement("index_counters"), {"relid": ref.relid})}

    def vacuum_progress(self, ref: TableRef) -> list[dict[str, Any]]:
        block = "vacuum_progress" if self.server_version_num >= 170000 else "vacuum_progress_pre17"
        return self.rows(statement(block), {"relids": ref.relids})

    # the vacuum horizon ------------------------------------------------------------------------

    def horizon(self) -> dict[str, Any]:
        """Who holds the horizon: sessions (by age and kind), the snapshot's own view, replication
        slots, prepared transactions, standby feedback. A part the role may not read is skipped."""
        out: dict[str, Any] = {"read_at_s": time.time()}
        out["sessions"] = [_session_kind(s) for s in self.rows(statement("horizon_sessions"))]
        out["hidden_sessions"] = self.rows(statement("hidden_sessions"))[0]["hidden"]
        out.update(self.rows(statement("horizon_snapshot"))[0])
        out["replication_slots"] = (
            self.attempt("replication slots (pg_replication_slots)", lambda: self.rows(statement("replication_slots")))
            or []
        )
        out["prepared_xacts"] = (
            self.attempt("prepared transactions (pg_prepared_xacts)", lambda: self.rows(statement("prepared_xacts")))
            or []
        )
        out["standby_feedback"] = (
            self.attempt("standby feedback (pg_stat_replication)", lambda: self.rows(statement("standby_feedback")))
            or []
        )
        return out

    # bloat -----------------------------------------------------------------------------------

    def pgstattuple(self, relid: int, ext_schema: str, approximate: bool = False) -> dict[str, Any] | None:
        block = "pgstattuple_approx" if approximate else "pgstattuple"
        what = f"{block} of relation {relid}"
        found = self.attempt(
            what,
            lambda: self.rows(statement(block, ext=sql.Identifier(ext_schema)), {"relid": relid}),
            fix="grant pg_stat_scan_tables to this role",
        )
        return found[0] if found else None

    def pgstatindex(self, indexrelid: int, ext_schema: str) -> dict[str, Any] | None:
        found = self.attempt(
            f"pgstatindex of index {indexrelid}",
            lambda: self.rows(statement("pgstatindex", ext=sql.Identifier(ext_schema)), {"indexrelid": indexrelid}),
            fix="grant pg_stat_scan_tables to this role",
        )
        return found[0] if found else None

    # the due-work query ------------------------------------------------------------------------

    def due_query(
        self, ref: TableRef, due_column: str, category: str, pending: list | None = None
    ) -> tuple[sql.Composed, dict[str, Any]]:
        """The due-work query and its parameters (the pending filter's values)."""
        params = expr.Params()
        now = fragment("now_epoch" if category == "N" else "now_timestamp")
        filt = expr.where_sql(pending or [], params, self.server_version_num)
        return statement("due_query", table=ref.ident, due=sql.Identifier(due_column), now=now, pending=filt), (
            params.values
        )

    def explain(self, query: sql.Composed, params: dict[str, Any] | None = None) -> Any:
        return self.conn.execute(statement("explain", query=query), params or None).fetchone()[0]

    def explain_analyze(self, query: sql.Composed, params: dict[str, Any] | None = None) -> Any:
        """EXPLAIN ANALYZE of a plain SELECT, in an explicitly read-only transaction."""
        with self.conn.transaction():
            self.conn.execute(statement("set_read_only"))
            return self.conn.execute(statement("explain_analyze", query=query), params or None).fetchone()[0]

    # job libraries' tables ---------------------------------------------------------------------

    def row_counts(self, ref: TableRef, pending: list, finished: list) -> dict[str, Any]:
        params = expr.Params()
        v = self.server_version_num
        query = statement(
            "row_counts",
            table=ref.ident,
            pending=expr.where_sql(pending, params, v),
            finished=expr.where_sql(finished, params, v),
        )
        return self.rows(query, params.values)[0]

    def partitions(self, ref: TableRef) -> list[dict[str, Any]]:
        return self.rows(statement("partitions"), {"relid": ref.relid})

    def path_check(self, ref: TableRef, b: expr.Bound) -> dict[str, Any]:
        """Whether ``b``'s JSON path is present: in ANALYZE's samples of the column when it has
        some (the catalogue only), else in the first rows of the table (``method`` says which)."""
        params = expr.Params()
        v = self.server_version_num
        src = sql.Identifier("v", "val")
        parts = {"decoded": expr.json_of(b, src, v), "value": expr.value_of(b, params, v, source=src)}
        if b.column["type_name"] != "json":
            typ = sql.Identifier(b.column["type_schema"], b.column["type_name"])
            found = self.rows(
                statement("path_check_stats", type=typ, **parts),
                {**params.values, "schema": ref.schema, "name": ref.name, "column": b.expr.column},
            )[0]
            if found["sampled"]:
                return {**found, "method": "statistics (pg_stats samples)"}
        found = self.rows(
            statement("path_check_rows", col=sql.Identifier(b.expr.column), table=ref.ident, **parts),
            {**params.values, "limit": expr.SAMPLE_ROWS},
        )[0]
        return {**found, "method": f"the first {expr.SAMPLE_ROWS:,} rows"}

    # capture -----------------------------------------------------------------------------------

    def capture_poll(self, ref: TableRef, spec: CaptureSpec, key: str) -> list[dict[str, Any]]:
        """One sample of the (pending) rows: trigger hash, tenant hash, due epoch s, interval s,
        state bytes, read at epoch s."""
        params = expr.Params()
        query = statement(
            "capture_poll",
            table=ref.ident,
            id_hash=spec.id_hash(params, self.server_version_num),
            tenant_hash=spec.tenant_hash(params, self.server_version_num),
            due_s=spec.due_seconds(),
            interval_s=spec.interval_seconds(),
            state_bytes=spec.state_size(params, self.server_version_num),
            filter=expr.where_sql(spec.pending, params, self.server_version_num),
        )
        return self.rows(query, {**params.values, "key": key})

    def capture_history(self, ref: TableRef, spec: CaptureSpec, key: str, window_s: float) -> dict[str, list[float]]:
        """The due times of finished rows still in the table, per identity hash (the last 32
        within ``window_s``)."""
        params = expr.Params()
        query = statement(
            "capture_history",
            table=ref.ident,
            id_hash=spec.id_hash(params, self.server_version_num),
            due_s=spec.due_seconds(),
            due=sql.Identifier(spec.due.expr.column),
            filter=expr.where_sql(spec.finished or [], params, self.server_version_num),
        )
        rows = self.rows(query, {**params.values, "key": key, "window_s": window_s})
        return {r["trigger_hash"]: list(r["dues"]) for r in rows}


@dataclass
class CaptureSpec:
    """What ``--map``, ``--where`` and a preset name, bound to the table's columns
    (:mod:`metrics.owntable_expr`). ``due`` and ``interval`` are bare columns (type categories of
    ``pg_type.typcategory``: D date/time, T interval, N numeric)."""

    id: list[expr.Bound]
    tenant: list[expr.Bound] | None
    due: expr.Bound
    interval: expr.Bound | None = None
    state: expr.Bound | None = None
    pending: list = field(default_factory=list)  # (Condition, Bound) pairs
    finished: list | None = None

    def id_hash(self, params: expr.Params, version: int) -> sql.Composed:
        return fragment("hash_of", text=expr.text_of(self.id, params, version))

    def tenant_hash(self, params: expr.Params, version: int) -> sql.Composed:
        text = expr.text_of(self.tenant, params, version) if self.tenant else sql.SQL("''")
        return fragment("hash_of", text=text)

    def due_seconds(self) -> sql.Composed:
        block = "epoch_of_number" if self.due.column["category"] == "N" else "epoch_of_timestamp"
        return fragment(block, col=sql.Identifier(self.due.expr.column))

    def interval_seconds(self) -> sql.Composed:
        if self.interval is None:
            return fragment("no_value")
        block = "seconds_of_number" if self.interval.column["category"] == "N" else "seconds_of_interval"
        return fragment(block, col=sql.Identifier(self.interval.expr.column))

    def state_size(self, params: expr.Params, version: int) -> sql.Composed:
        if self.state is None:
            return fragment("no_value")
        if self.state.expr.path:
            return fragment("text_size", col=expr.value_of(self.state, params, version))
        return fragment("column_size", col=sql.Identifier(self.state.expr.column))


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _session_kind(s: dict[str, Any]) -> dict[str, Any]:
    state = s.get("state") or ""
    if s.get("backend_type") is None:
        kind = HIDDEN_SESSION
    elif s.get("backend_type") == "autovacuum worker":
        kind = "autovacuum worker"
    elif state.startswith("idle in transaction"):
        kind = "idle in transaction"
    elif s.get("backend_type") == "client backend" and s.get("xact_age_s") is not None:
        kind = "transaction running a statement" if state == "active" else f"transaction ({state or 'unknown state'})"
    else:
        kind = s.get("backend_type") or "unknown"
    return {**s, "kind": kind}


# -- churn: the difference of two counter readings ------------------------------------------------


COUNTERS = (
    "n_tup_ins",
    "n_tup_upd",
    "n_tup_hot_upd",
    "n_tup_del",
    "vacuum_count",
    "autovacuum_count",
    "seq_scan",
    "idx_scan",
)


def relation_churn(before: dict[str, Any] | None, after: dict[str, Any] | None) -> dict[str, Any] | None:
    """Rates and ratios of one relation over the window between two readings of ``table_counters``."""
    if not before or not after:
        return None
    elapsed = float(after["read_at_s"]) - float(before["read_at_s"])
    if elapsed <= 0:
        return None
    d = {k: (after.get(k) or 0) - (before.get(k) or 0) for k in COUNTERS}
    dead_created = d["n_tup_upd"] + d["n_tup_del"]  # each update or delete leaves one dead version
    dead_change = (after.get("n_dead_tup") or 0) - (before.get("n_dead_tup") or 0)
    out = {
        "window_s": elapsed,
        "inserts": d["n_tup_ins"],
        "updates": d["n_tup_upd"],
        "hot_updates": d["n_tup_hot_upd"],
        "deletes": d["n_tup_del"],
        "seq_scans": d["seq_scan"],
        "index_scans": d["idx_scan"],
        "inserts_per_s": d["n_tup_ins"] / elapsed,
        "updates_per_s": d["n_tup_upd"] / elapsed,
        "deletes_per_s": d["n_tup_del"] / elapsed,
        "hot_ratio": (d["n_tup_hot_upd"] / d["n_tup_upd"]) if d["n_tup_upd"] else None,
        "live_rows_start": before.get("n_live_tup"),
        "live_rows_end": after.get("n_live_tup"),
        "dead_rows_start": before.get("n_dead_tup"),
        "dead_rows_end": after.get("n_dead_tup"),
        "dead_created": dead_created,
        # what vacuum and page pruning took away: created minus the growth of n_dead_tup
        "dead_removed": max(0, dead_created - dead_change),
        "autovacuum_runs": d["autovacuum_count"],
        "vacuum_runs": d["vacuum_count"],
        "last_autovacuum_age_s": (float(after["read_at_s"]) - after["last_autovacuum_s"])
        if after.get("last_autovacuum_s")
        else None,
    }
    if "total_autovacuum_ms" in after and "total_autovacuum_ms" in before:
        spent = float(after["total_autovacuum_ms"] or 0) - float(before["total_autovacuum_ms"] or 0)
        out["autovacuum_ms_in_window"] = spent
        out["autovacuum_mean_ms"] = spent / d["autovacuum_count"] if d["autovacuum_count"] else None
    else:
        out["autovacuum_ms_in_window"] = out["autovacuum_mean_ms"] = None  # Postgres < 18 does not count it
    return out


def index_churn(
    before: dict[int, dict[str, Any]], after: dict[int, dict[str, Any]], names: dict[int, str], elapsed_s: float
) -> list[dict[str, Any]]:
    """Per index over the window: scans, entries read, live rows fetched, entries per fetched row."""
    out = []
    for relid, b in before.items():
        a = after.get(relid)
        if not a:
            continue
        scans = (a["idx_scan"] or 0) - (b["idx_scan"] or 0)
        read = (a["idx_tup_read"] or 0) - (b["idx_tup_read"] or 0)
        fetched = (a["idx_tup_fetch"] or 0) - (b["idx_tup_fetch"] or 0)
        out.append(
            {
                "index": names.get(relid, str(relid)),
                "scans": scans,
                "scans_per_s": scans / elapsed_s if elapsed_s else None,
                "entries_read": read,
                "rows_fetched": fetched,
                "entries_per_scan": (read / scans) if scans else None,
                # live rows fetched by plain index scans only: 0 under bitmap scans and
                # index-only scans, and for statements that lock rows (FOR UPDATE)
                "entries_per_row_fetched": (read / fetched) if fetched else None,
            }
        )
    return out


# -- plans ------------------------------------------------------------------------------------------


def plan_summary(plan_json: Any) -> dict[str, Any]:
    """The figures a reader wants from an EXPLAIN (FORMAT JSON) result: the access path, the
    planner's estimates, and with ANALYZE the rows, buffers and time."""
    doc = plan_json[0] if isinstance(plan_json, list) else plan_json
    top = doc.get("Plan", {})
    nodes: list[dict[str, Any]] = []

    def walk(node: dict[str, Any]) -> None:
        nodes.append(node)
        for child in node.get("Plans", []) or []:
            walk(child)

    walk(top)
    scans = [n for n in nodes if "Relation Name" in n or "Index Name" in n]
    out: dict[str, Any] = {
        "node_types": [n.get("Node Type") for n in nodes],
        "access": [
            {"node": n.get("Node Type"), "index": n.get("Index Name"), "estimated_rows": n.get("Plan Rows")}
            for n in scans
        ],
        "index_used": next((n.get("Index Name") for n in scans if n.get("Index Name")), None),
        "estimated_rows": top.get("Plan Rows"),
        "total_cost": top.get("Total Cost"),
        "startup_cost": top.get("Startup Cost"),
    }
    if "Actual Rows" in top:
        hit = top.get("Shared Hit Blocks", 0) or 0
        read = top.get("Shared Read Blocks", 0) or 0
        rows = top.get("Actual Rows", 0) or 0
        out.update(
            {
                "rows": rows,
                "shared_hit_blocks": hit,
                "shared_read_blocks": read,
                "buffers_per_row": (hit + read) / rows if rows else None,
                "heap_fetches": sum((n.get("Heap Fetches") or 0) for n in nodes),
                "execution_ms": doc.get("Execution Time"),
                "planning_ms": doc.get("Planning Time"),
            }
        )
    return out


def as_json(obj: Any) -> Any:
    """Dataclasses (skips) as plain dicts for ``inspect.json``."""
    if isinstance(obj, Skip):
        return asdict(obj)
    return obj
