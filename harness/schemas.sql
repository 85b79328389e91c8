-- The run schemas on a server (harness/schemas.py): which exist, how big, which a live run holds.

-- name: run_schemas
-- every schema whose name a run (run_<stamp>_<hex>) or a migration rehearsal (..._p, ..._s)
-- gives, with the bytes of its tables, their TOAST tables and indexes, and its comment (a run
-- given --keep marks its schema kept). Sizes come from the catalogue, never from a table scan.
SELECT n.nspname AS schema,
       coalesce(sum(pg_total_relation_size(c.oid)) FILTER (WHERE c.relkind IN ('r', 'm', 'S')), 0)::bigint AS bytes,
       obj_description(n.oid, 'pg_namespace') AS comment
FROM pg_namespace n
LEFT JOIN pg_class c ON c.relnamespace = n.oid
WHERE n.nspname ~ %(pattern)s
GROUP BY n.oid, n.nspname
ORDER BY n.nspname

-- name: held_leases
-- the run leases held right now (session advisory locks of the lease class, granted), by key
SELECT objid::bigint AS key
FROM pg_locks
WHERE locktype = 'advisory' AND classid = %(lock_class)s::oid AND objsubid = 2 AND granted

-- name: take_lease
-- a live run's claim on its schema, held by its own connection until it ends or dies; "try",
-- so that a key collision with another live run never blocks (its schema counts as live anyway)
SELECT pg_try_advisory_lock(%(lock_class)s::int, %(key)s::int)

-- name: try_lease_for_drop
-- gc takes the lease itself for the length of its transaction: only a schema no live run holds
-- is dropped, and no run can take it while the drop runs
SELECT pg_try_advisory_xact_lock(%(lock_class)s::int, %(key)s::int) AS free

-- name: schema_exists
SELECT 1 FROM pg_namespace WHERE nspname = %(name)s

-- name: mark_kept
-- a run given --keep marks its schema so that gc leaves it unless told otherwise
COMMENT ON SCHEMA {schema} IS 'timerbench: kept (--keep)'

-- name: drop_schema
DROP SCHEMA IF EXISTS {schema} CASCADE
