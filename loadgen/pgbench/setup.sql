-- The pgbench ceiling's own statements (the table itself is pg_leased's schema.sql, created by
-- the scheduler's setup() in a schema of its own).

-- name: fill_schedule
-- %(rows)s scheduled rows spread over %(tenants)s tenants, every one already due, the oldest
-- first (ids in fire-time order, as arming a population sorted by first fire time leaves them).
INSERT INTO {schema}.schedule (id, tenant_id, type, priority, next_fire_at)
SELECT 'pgb-' || lpad(g::text, 8, '0'),
       'tenant-' || (g %% %(tenants)s),
       'poll',
       0,
       now() - make_interval(secs => (%(rows)s - g) / 1000.0)
  FROM generate_series(1, %(rows)s) AS g;

-- name: rearmed_total
-- Every re-arm adds 1 to version: the rows pgbench actually claimed and re-armed, whatever
-- size each claim came back with.
SELECT coalesce(sum(version), 0)::bigint AS rearmed,
       count(*) FILTER (WHERE state = 'running') AS still_running
  FROM {schema}.schedule;

-- name: release_running
-- pgbench stops mid-script: a claim without its re-arm leaves rows running. Put them back
-- before the next batch size.
UPDATE {schema}.schedule
   SET state = 'scheduled', owner_id = NULL, lease_expires = NULL
 WHERE state = 'running';

-- name: vacuum_schedule
VACUUM (ANALYZE) {schema}.schedule;
