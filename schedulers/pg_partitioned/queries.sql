-- pg_partitioned queries. Every statement a run makes is pg_leased's
-- (schedulers/pg_leased/queries.sql); claim_due runs against one partition at a time. This file
-- holds only the catalogue check setup makes before it reuses a schema.

-- name: existing_layout
-- What already stands in the schema: each of schedule and state with its kind ('p' partitioned,
-- 'r' a plain table, e.g. left by pg_leased) and each of its partitions with its hash bound, so
-- setup can refuse a schema split another number of ways instead of leaving rows in partitions
-- no claim visits.
SELECT p.relname AS parent,
       p.relkind::text AS kind,
       c.relname AS partition,
       pg_get_expr(c.relpartbound, c.oid) AS bound
  FROM pg_class p
  JOIN pg_namespace n ON n.oid = p.relnamespace
  LEFT JOIN pg_inherits i ON i.inhparent = p.oid
  LEFT JOIN pg_class c ON c.oid = i.inhrelid
 WHERE n.nspname = %(schema)s
   AND p.relname IN ('schedule', 'state')
 ORDER BY p.relname, c.relname;
