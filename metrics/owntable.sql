-- A team's own timer table, read only (metrics/owntable.py; `bench inspect`, `bench capture`).
--
-- Every statement here reads: catalogues, statistics views, EXPLAIN without ANALYZE, and, for
-- capture, sizes and hashes of rows. They run in read-only transactions
-- (default_transaction_read_only), under statement_timeout and lock_timeout, one statement per
-- transaction, so no lock outlives a statement. Placeholders in braces are identifiers or
-- fragments composed through psycopg.sql: {table} is the inspected table, {col} / {due} / {id} /
-- {tenant} / {interval} / {state} its columns, {ext} the schema of an extension; values travel as
-- bind parameters.

-- name: session_guard
-- what the connection actually runs under: the safeguards are checked, not assumed
-- (timeouts in milliseconds, from pg_settings)
SELECT current_setting('default_transaction_read_only') AS default_transaction_read_only,
       current_setting('transaction_read_only') AS transaction_read_only,
       (SELECT setting::bigint FROM pg_settings WHERE name = 'statement_timeout') AS statement_timeout_ms,
       (SELECT setting::bigint FROM pg_settings WHERE name = 'lock_timeout') AS lock_timeout_ms,
       current_setting('server_version_num')::int AS server_version_num,
       current_setting('server_version') AS server_version,
       current_user AS role,
       current_database() AS database,
       (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) AS is_superuser,
       pg_has_role('pg_read_all_stats', 'USAGE') AS reads_all_stats

-- name: resolve_table
-- the table a user named (as SQL would parse it: quoting and search_path apply) and its TOAST
-- table; reloptions carry fillfactor and per-table autovacuum settings
SELECT c.oid::bigint AS relid,
       n.nspname AS schema,
       c.relname AS name,
       c.relkind::text AS relkind,
       c.reltoastrelid::bigint AS toast_relid,
       c.reltuples::float8 AS reltuples,
       c.relpages::bigint AS relpages,
       coalesce(c.reloptions, '{{}}'::text[]) AS reloptions,
       coalesce(t.reloptions, '{{}}'::text[]) AS toast_reloptions,
       has_table_privilege(c.oid, 'SELECT') AS can_select
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_class t ON t.oid = c.reltoastrelid
WHERE c.oid = to_regclass(%(name)s)

-- name: columns
-- the table's columns, their types and storage, with ANALYZE's average stored width when the
-- role may see pg_stats for it (NULL otherwise, or before the first ANALYZE)
SELECT a.attname AS name,
       format_type(a.atttypid, a.atttypmod) AS type,
       t.typcategory::text AS category,
       tn.nspname AS type_schema,
       t.typname AS type_name,
       ARRAY(SELECT e.enumlabel::text FROM pg_enum e WHERE e.enumtypid = t.oid ORDER BY e.enumsortorder) AS enum_labels,
       a.attstorage::text AS storage,
       s.avg_width,
       s.null_frac::float8 AS null_frac
FROM pg_attribute a
JOIN pg_type t ON t.oid = a.atttypid
JOIN pg_namespace tn ON tn.oid = t.typnamespace
LEFT JOIN pg_stats s ON s.schemaname = %(schema)s AND s.tablename = %(name)s AND s.attname = a.attname
WHERE a.attrelid = %(relid)s::oid AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum

-- name: sizes
-- on-disk sizes: heap, TOAST (its table and its index), the table's indexes, all together
SELECT pg_relation_size(c.oid) AS heap_bytes,
       coalesce(pg_relation_size(NULLIF(c.reltoastrelid, 0)), 0) AS toast_bytes,
       coalesce(pg_indexes_size(NULLIF(c.reltoastrelid, 0)), 0) AS toast_index_bytes,
       pg_indexes_size(c.oid) AS index_bytes,
       pg_total_relation_size(c.oid) AS total_bytes
FROM pg_class c
WHERE c.oid = %(relid)s::oid

-- name: indexes
-- every index of the table: size, use since the statistics were reset, key columns (or
-- expressions), and the predicate of a partial index
SELECT i.indexrelid::bigint AS indexrelid,
       ic.relname AS name,
       am.amname AS method,
       i.indisunique AS is_unique,
       i.indisprimary AS is_primary,
       i.indisvalid AS is_valid,
       pg_relation_size(i.indexrelid) AS bytes,
       ARRAY(SELECT pg_get_indexdef(i.indexrelid, k, true)
             FROM generate_series(1, i.indnkeyatts) AS k ORDER BY k) AS columns,
       pg_get_expr(i.indpred, i.indrelid, true) AS predicate,
       s.idx_scan, s.idx_tup_read, s.idx_tup_fetch
FROM pg_index i
JOIN pg_class ic ON ic.oid = i.indexrelid
JOIN pg_am am ON am.oid = ic.relam
LEFT JOIN pg_stat_all_indexes s ON s.indexrelid = i.indexrelid
WHERE i.indrelid = %(relid)s::oid
ORDER BY ic.relname

-- name: table_counters
-- cumulative counters of the table and its TOAST table (Postgres 13+ columns), read at each
-- sample of the watch window; the churn is their differences
SELECT s.relid::bigint AS relid,
       s.n_tup_ins, s.n_tup_upd, s.n_tup_hot_upd, s.n_tup_del,
       s.n_live_tup, s.n_dead_tup,
       s.seq_scan, s.idx_scan,
       s.vacuum_count, s.autovacuum_count, s.analyze_count, s.autoanalyze_count,
       extract(epoch FROM s.last_autovacuum)::float8 AS last_autovacuum_s,
       extract(epoch FROM s.last_vacuum)::float8 AS last_vacuum_s,
       extract(epoch FROM clock_timestamp())::float8 AS read_at_s
FROM pg_stat_all_tables s
WHERE s.relid = ANY(%(relids)s::oid[])

-- name: vacuum_times
-- Postgres 18+: time spent in (auto)vacuum, cumulative milliseconds (runs' durations over the
-- window are the difference divided by the number of runs)
SELECT s.relid::bigint AS relid,
       s.total_vacuum_time::float8 AS total_vacuum_ms,
       s.total_autovacuum_time::float8 AS total_autovacuum_ms
FROM pg_stat_all_tables s
WHERE s.relid = ANY(%(relids)s::oid[])

-- name: index_counters
-- cumulative use of each index: scans, entries the scans returned, live rows they fetched
SELECT s.indexrelid::bigint AS indexrelid, s.idx_scan, s.idx_tup_read, s.idx_tup_fetch
FROM pg_stat_all_indexes s
WHERE s.relid = %(relid)s::oid

-- name: vacuum_progress
-- vacuums running in this database: on the table or its TOAST table, or on a relation the role
-- may not see (relid NULL: pg_stat_progress_vacuum hides it without pg_read_all_stats)
SELECT p.pid, p.relid::bigint AS relid, p.phase,
       p.heap_blks_total, p.heap_blks_scanned, p.heap_blks_vacuumed,
       p.index_vacuum_count, p.num_dead_item_ids
FROM pg_stat_progress_vacuum p
WHERE p.datid = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND (p.relid IS NULL OR p.relid = ANY(%(relids)s::oid[]))

-- name: vacuum_progress_pre17
-- the same before Postgres 17 (num_dead_tuples instead of num_dead_item_ids)
SELECT p.pid, p.relid::bigint AS relid, p.phase,
       p.heap_blks_total, p.heap_blks_scanned, p.heap_blks_vacuumed,
       p.index_vacuum_count, p.num_dead_tuples AS num_dead_item_ids
FROM pg_stat_progress_vacuum p
WHERE p.datid = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND (p.relid IS NULL OR p.relid = ANY(%(relids)s::oid[]))

-- name: settings
-- the server's vacuum settings (the per-table ones are in reloptions)
SELECT name, setting, unit
FROM pg_settings
WHERE name LIKE 'autovacuum%%' OR name IN ('vacuum_cost_delay', 'vacuum_cost_limit',
      'idle_in_transaction_session_timeout', 'old_snapshot_threshold', 'hot_standby_feedback',
      'max_prepared_transactions')
ORDER BY name

-- name: horizon_sessions
-- sessions that hold back the vacuum horizon or could: an open transaction, a snapshot
-- (backend_xmin) or an assigned transaction id. By age and kind only: no query text, no role,
-- no client address. Without pg_read_all_stats another role's session shows only its xmin and
-- xid (backend_type, state and times are NULL): it is kept, as a holder of unknown kind.
SELECT a.pid,
       a.backend_type,
       a.state,
       (a.datname = current_database()) AS same_database,
       extract(epoch FROM clock_timestamp() - a.xact_start)::float8 AS xact_age_s,
       extract(epoch FROM clock_timestamp() - a.state_change)::float8 AS state_age_s,
       age(a.backend_xmin) AS xmin_age_xids,
       age(a.backend_xid) AS xid_age_xids
FROM pg_stat_activity a
WHERE a.pid <> pg_backend_pid()
  AND (a.xact_start IS NOT NULL OR a.backend_xmin IS NOT NULL OR a.backend_xid IS NOT NULL)
ORDER BY greatest(age(a.backend_xmin), age(a.backend_xid)) DESC NULLS LAST, a.xact_start NULLS LAST

-- name: hidden_sessions
-- sessions of other roles whose details this role may not read (backend_type is NULL only then)
SELECT count(*) AS hidden
FROM pg_stat_activity a
WHERE a.pid <> pg_backend_pid() AND a.backend_type IS NULL AND a.usesysid IS NOT NULL

-- name: horizon_snapshot
-- what any role can see: how many transaction ids the oldest still-running transaction is behind
-- the next one (from this session's own snapshot; read-only, assigns no transaction id)
SELECT (pg_snapshot_xmax(pg_current_snapshot())::text::numeric
        - pg_snapshot_xmin(pg_current_snapshot())::text::numeric)::bigint AS oldest_running_xid_behind,
       pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS next_xid,
       extract(epoch FROM clock_timestamp())::float8 AS read_at_s,
       age(d.datfrozenxid) AS database_frozen_age_xids
FROM pg_database d
WHERE d.datname = current_database()

-- name: replication_slots
-- replication slots that hold the horizon (xmin) or the catalogue horizon (catalog_xmin)
SELECT s.slot_name, s.slot_type, s.active,
       (s.database IS NULL OR s.database = current_database()) AS same_database,
       age(s.xmin) AS xmin_age_xids,
       age(s.catalog_xmin) AS catalog_xmin_age_xids
FROM pg_replication_slots s
WHERE s.xmin IS NOT NULL OR s.catalog_xmin IS NOT NULL

-- name: prepared_xacts
-- prepared (two-phase) transactions, by age only: their gid may carry application data
SELECT extract(epoch FROM clock_timestamp() - p.prepared)::float8 AS age_s,
       age(p.transaction) AS xid_age_xids,
       (p.database = current_database()) AS same_database
FROM pg_prepared_xacts p
ORDER BY p.prepared

-- name: standby_feedback
-- standbys whose hot_standby_feedback holds the primary's horizon (backend_xmin)
SELECT r.pid, r.state, age(r.backend_xmin) AS xmin_age_xids
FROM pg_stat_replication r
WHERE r.backend_xmin IS NOT NULL

-- name: pgstattuple
-- exact: reads every page of the relation (pgstattuple extension, schema {ext})
SELECT table_len, tuple_count, tuple_len, dead_tuple_count, dead_tuple_len, free_space
FROM {ext}.pgstattuple(%(relid)s::oid::regclass)

-- name: pgstattuple_approx
-- approximate: skips pages the visibility map says hold only visible tuples
SELECT table_len, approx_tuple_count AS tuple_count, approx_tuple_len AS tuple_len,
       dead_tuple_count, dead_tuple_len, approx_free_space AS free_space
FROM {ext}.pgstattuple_approx(%(relid)s::oid::regclass)

-- name: pgstatindex
-- a B-tree index's leaf density and deleted pages (pgstattuple extension)
SELECT leaf_pages, empty_pages, deleted_pages, avg_leaf_density::float8, leaf_fragmentation::float8
FROM {ext}.pgstatindex(%(indexrelid)s::oid::regclass)

-- name: now_timestamp
-- "now" for a due column of a timestamp type
now()

-- name: now_epoch
-- "now" for a due column holding epoch seconds
extract(epoch FROM now())

-- name: epoch_of_timestamp
-- a timestamp (or date) column as epoch seconds
extract(epoch FROM {col})::float8

-- name: epoch_of_number
-- a numeric column of epoch seconds, or of epoch milliseconds (DBOS): told apart by magnitude,
-- since 1e11 seconds is the year 5138 and 1e11 milliseconds is 1973
(CASE WHEN {col} > 1e11 THEN {col} / 1000.0 ELSE {col} END)::float8

-- name: seconds_of_interval
-- an interval column as seconds
extract(epoch FROM {col})::float8

-- name: seconds_of_number
-- a numeric column already in seconds
{col}::float8

-- name: no_value
NULL::float8

-- name: column_size
-- the stored size of a value in bytes (compressed and out of line included): a size, not the value
pg_column_size({col})::float8

-- name: text_size
-- the size in bytes of a value read at a JSON path: a size, not the value
octet_length({col})::float8

-- name: hash_of
-- a keyed hash of a text (ids, tenants): computed here, so no id or tenant leaves the database;
-- the key is random per capture and never written
left(encode(sha256(convert_to(%(key)s || {text}, 'UTF8')), 'hex'), 16)

-- name: due_query
-- the question a table-as-queue asks every tick: the oldest due rows, 800 at a time (the
-- Composio article: "selected up to 800 due rows"), among the pending rows when
-- a preset or --where says which those are. A plain SELECT: no FOR UPDATE (a read-only
-- transaction could not lock rows, and inspecting must not)
SELECT {due} FROM {table} WHERE {due} <= {now} AND {pending} ORDER BY {due} LIMIT 800

-- name: explain
-- the plan only: nothing is executed
EXPLAIN (FORMAT JSON) {query}

-- name: explain_analyze
-- executed, in a read-only transaction, counting the buffers it touches (--analyze only)
EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {query}

-- name: set_read_only
SET TRANSACTION READ ONLY

-- name: capture_poll
-- one sample of the rows (the pending ones, with a filter): keyed hashes of the identity and the
-- tenant, the due time in epoch seconds, the interval and the stored state size when mapped, and
-- when the statement ran. Successive samples show re-arms: a due time that changed, or a new row
-- with the same identity (libraries that insert a row per fire)
SELECT {id_hash} AS trigger_hash,
       {tenant_hash} AS tenant_hash,
       {due_s} AS due_s,
       {interval_s} AS interval_s,
       {state_bytes} AS state_bytes,
       extract(epoch FROM statement_timestamp())::float8 AS read_at_s
FROM {table}
WHERE {filter}

-- name: capture_history
-- the due times of finished rows still in the table (libraries that keep them): the last 32 per
-- identity, due within the last window_s seconds, read once and only as hashes and times
SELECT trigger_hash, array_agg(due_s ORDER BY due_s) AS dues
FROM (
    SELECT {id_hash} AS trigger_hash, {due_s} AS due_s,
           row_number() OVER (PARTITION BY {id_hash} ORDER BY {due} DESC) AS recent
    FROM {table}
    WHERE {filter} AND {due} IS NOT NULL AND {due_s} >= extract(epoch FROM now())::float8 - %(window_s)s
) h
WHERE recent <= 32
GROUP BY trigger_hash

-- name: path_check_stats
-- whether a JSON path is present, from ANALYZE's sampled values of its column (pg_stats: most
-- common values and histogram bounds): the catalogue only, no row of the table is read
SELECT count(*) AS sampled, count({decoded}) AS decoded, count({value}) AS present
FROM pg_stats s,
     unnest(coalesce(s.most_common_vals::text::{type}[], '{{}}') || coalesce(s.histogram_bounds::text::{type}[], '{{}}'))
     AS v(val)
WHERE s.schemaname = %(schema)s AND s.tablename = %(name)s AND s.attname = %(column)s

-- name: path_check_rows
-- the same on the first rows of the table, when the statistics hold no sample of the column (a
-- json column has none: it has no equality operator; or the table was never analysed)
SELECT count(*) AS sampled, count({decoded}) AS decoded, count({value}) AS present
FROM (SELECT {col} AS val FROM {table} LIMIT %(limit)s) AS v

-- name: row_counts
-- rows by kind in a job library's table (pending, finished, all): one scan, under the timeout
SELECT count(*) FILTER (WHERE {pending}) AS pending,
       count(*) FILTER (WHERE {finished}) AS finished,
       count(*) AS total
FROM {table}

-- name: partitions
-- the leaf partitions of a partitioned table, largest first (pg-boss keeps one per queue)
SELECT c.oid::regclass::text AS name, pg_relation_size(c.oid) AS bytes
FROM pg_partition_tree(%(relid)s::oid::regclass) p
JOIN pg_class c ON c.oid = p.relid
WHERE p.isleaf
ORDER BY pg_relation_size(c.oid) DESC, c.relname
