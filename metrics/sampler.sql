-- The metrics sampler's queries (metrics/sampler.py). Relations arrive as "schema.table". Only
-- statistics views and the catalogue, never a design's table; every statement carries the marker
-- timerbench-sampler so pg_stat_statements shows the sampler's own cost apart.

-- name: resolve_relations
-- each watched table's oid and the oid of its TOAST table (0 when it has none)
SELECT /* timerbench-sampler */ n.nspname || '.' || c.relname AS scope,
       c.oid::bigint AS relid,
       c.reltoastrelid::bigint AS toast_relid
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname || '.' || c.relname = ANY(%(names)s::text[])

-- name: relation_stats
-- cumulative counters and sizes of the watched tables and TOAST tables, one row each
SELECT /* timerbench-sampler */ s.relid::bigint AS relid,
       s.n_live_tup, s.n_dead_tup, s.n_tup_ins, s.n_tup_upd, s.n_tup_hot_upd, s.n_tup_del,
       s.autovacuum_count, s.vacuum_count,
       pg_relation_size(s.relid) AS table_bytes,
       pg_indexes_size(s.relid) AS index_bytes
FROM pg_stat_all_tables s
WHERE s.relid = ANY(%(relids)s::oid[])

-- name: run_stats
-- WAL position (bytes since 0/0), the age of the oldest open transaction on the server, and of the
-- oldest snapshot holding the xmin horizon (in seconds since its transaction began, and in xids)
SELECT /* timerbench-sampler */ pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::float8 AS wal_pos,
       coalesce(extract(epoch FROM max(clock_timestamp() - xact_start)), 0)::float8 AS oldest_xact_age_s,
       coalesce(extract(epoch FROM max(clock_timestamp() - xact_start) FILTER (WHERE backend_xmin IS NOT NULL)),
                0)::float8 AS oldest_xmin_age_s,
       coalesce(max(age(backend_xmin)), 0)::float8 AS oldest_xmin_age_xids
FROM pg_stat_activity
WHERE xact_start IS NOT NULL AND pid <> pg_backend_pid()

-- name: server_version
SELECT /* timerbench-sampler */ current_setting('server_version') AS version

-- name: settings
-- the settings that change what a run measures, recorded in config.json
SELECT /* timerbench-sampler */ name, setting, unit
FROM pg_settings
WHERE name = ANY(%(names)s::text[]) OR name LIKE 'autovacuum%%'
ORDER BY name
