-- Which measurement extensions a server lets us use (metrics/extensions.py). {schema} is the
-- extension's own schema (pg_extension.extnamespace), so nothing depends on search_path.

-- name: installed
-- the extensions created in this database and the schema holding their objects
SELECT e.extname AS name, n.nspname AS schema, e.extversion AS version
FROM pg_extension e
JOIN pg_namespace n ON n.oid = e.extnamespace
WHERE e.extname = ANY(%(names)s::text[])

-- name: available
-- the extensions the server has files for (created here or not)
SELECT name FROM pg_available_extensions WHERE name = ANY(%(names)s::text[])

-- name: probe_pg_stat_statements
-- reads the statistics the way a run will; fails unless the library is in
-- shared_preload_libraries. showtext => false: the query texts file is not read.
SELECT count(*) FROM {schema}.pg_stat_statements(false)

-- name: probe_pgstattuple
-- a real call on a one-page catalogue table; fails without EXECUTE (pg_stat_scan_tables)
SELECT dead_tuple_percent FROM {schema}.pgstattuple('pg_catalog.pg_am'::regclass)
