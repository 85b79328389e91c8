-- name: lock_triggers
-- The rows an arm or a disarm is about to change, locked in id order (as commit_fire locks
-- one): what each held before, so the job it superseded can be cancelled.
SELECT id, version, fire_at IS NOT NULL AS armed
FROM {schema}.trigger WHERE id = ANY(%(ids)s::text[])
ORDER BY id FOR UPDATE;

-- name: arm_upsert
-- Arm or move by key: a new fire time, version + 1.
INSERT INTO {schema}.trigger AS t (id, type, tenant_id, priority, fire_at, armed_at)
SELECT i.id, i.type, i.tenant_id, i.priority, to_timestamp(i.fire_at), to_timestamp(%(armed_at)s)
FROM unnest(%(ids)s::text[], %(types)s::text[], %(tenants)s::text[], %(priorities)s::int[], %(fire_ats)s::float8[])
     AS i(id, type, tenant_id, priority, fire_at)
ORDER BY i.id
ON CONFLICT (id) DO UPDATE SET
    type = EXCLUDED.type, tenant_id = EXCLUDED.tenant_id, priority = EXCLUDED.priority,
    fire_at = EXCLUDED.fire_at, armed_at = EXCLUDED.armed_at, version = t.version + 1
RETURNING t.id, t.version, extract(epoch FROM t.fire_at)::float8;

-- name: state_insert
INSERT INTO {schema}.trigger_state (id, state)
SELECT * FROM unnest(%(ids)s::text[], %(states)s::bytea[])
ON CONFLICT (id) DO NOTHING;

-- name: disarm
-- Clear the fire time (version + 1): a job in flight for the old version commits nothing.
UPDATE {schema}.trigger SET fire_at = NULL, version = version + 1
WHERE id = ANY(%(ids)s::text[]) AND fire_at IS NOT NULL
RETURNING id, version - 1;

-- name: fetch_fire
-- What a job fires: its trigger's row and poll state, by key.
SELECT t.type, t.tenant_id, t.priority, extract(epoch FROM t.fire_at)::float8,
       extract(epoch FROM t.armed_at)::float8, t.version, s.state
FROM {schema}.trigger t LEFT JOIN {schema}.trigger_state s ON s.id = t.id
WHERE t.id = %(id)s;

-- name: commit_fire
-- One fire's outcome, fenced on the version the job was deferred for (a move or a disarm that
-- landed meanwhile wins): next fire time and version + 1, the changed poll state, the effect
-- under (trigger, due). Returns whether the fire committed, whether its effect was new, and the
-- new version (the next job's).
WITH fired AS (
    UPDATE {schema}.trigger
    SET fire_at = to_timestamp(%(next_fire_at)s::float8), armed_at = to_timestamp(%(now)s::float8),
        version = version + 1
    WHERE id = %(id)s AND version = %(version)s
    RETURNING id, version
), state AS (
    UPDATE {schema}.trigger_state s SET state = %(state)s::bytea
    FROM fired WHERE s.id = fired.id AND %(state)s::bytea IS NOT NULL
    RETURNING s.id
), effect AS (
    INSERT INTO {schema}.effects (trigger_id, due_at)
    SELECT fired.id, to_timestamp(%(effect_due)s::float8) FROM fired WHERE %(effect_due)s::float8 IS NOT NULL
    ON CONFLICT DO NOTHING
    RETURNING trigger_id
)
SELECT (SELECT version FROM fired), EXISTS (SELECT 1 FROM effect), EXISTS (SELECT 1 FROM state);

-- name: schema_tables
-- Every table in the run's schema (the library's, created by its own installer, and ours).
SELECT c.relname FROM pg_class c
WHERE c.relnamespace = to_regnamespace(%(schema)s) AND c.relkind IN ('r', 'p')
ORDER BY c.relname;

-- name: table_exists
SELECT to_regclass(%(table)s) IS NOT NULL;
