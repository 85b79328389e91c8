-- temporal_per_trigger: every statement the design runs. All trigger access is by primary key;
-- a fire costs one read and one update (plus the state write and the effect when the poll found
-- something), with no claim write: the trigger's workflow is its lock.

-- name: arm_upsert
-- Arm or move: a new fire time bumps the version, so a poll in flight for the older fire time
-- commits nothing (commit_fire is fenced on the version) and the workflow follows the newer arm.
INSERT INTO {schema}.trigger AS t (id, type, tenant_id, priority, fire_at, armed_at, version)
SELECT a.id, a.type, a.tenant_id, a.priority, to_timestamp(a.fire_at), to_timestamp(%(armed_at)s), 1
FROM unnest(%(ids)s::text[], %(types)s::text[], %(tenants)s::text[], %(priorities)s::int[], %(fire_ats)s::float8[])
     AS a(id, type, tenant_id, priority, fire_at)
ON CONFLICT (id) DO UPDATE
SET fire_at = EXCLUDED.fire_at, armed_at = EXCLUDED.armed_at, version = t.version + 1,
    type = EXCLUDED.type, tenant_id = EXCLUDED.tenant_id, priority = EXCLUDED.priority
RETURNING t.id, t.version, (t.xmax = 0) AS inserted;

-- name: mark_held
-- After arm()'s signals were accepted: the workflows hold these versions (never lowered, a
-- newer arm or commit may have raced ahead).
UPDATE {schema}.trigger t SET held_version = greatest(t.held_version, h.version)
FROM unnest(%(ids)s::text[], %(versions)s::bigint[]) AS h(id, version)
WHERE t.id = h.id;

-- name: state_insert
-- Initial poll state for triggers the arm just created.
INSERT INTO {schema}.trigger_state (id, state)
SELECT * FROM unnest(%(ids)s::text[], %(states)b::bytea[])
ON CONFLICT (id) DO NOTHING;

-- name: read_trigger
-- The poll activity's first step: the row by key with its poll state. The activity fires only
-- when the version is the one its workflow armed; otherwise it hands the row's current fire
-- time and version back to the workflow (a move or a commit it has not heard of yet).
SELECT t.version, t.type, t.tenant_id, t.priority,
       extract(epoch FROM t.fire_at)::float8 AS fire_at,
       extract(epoch FROM t.armed_at)::float8 AS armed_at,
       s.state
FROM {schema}.trigger t LEFT JOIN {schema}.trigger_state s ON s.id = t.id
WHERE t.id = %(id)s;

-- name: record_effect
-- The effect under (trigger_id, due_at): a duplicate fire returns no row (not delivered).
INSERT INTO {schema}.effects (trigger_id, due_at) VALUES (%(id)s, to_timestamp(%(due_at)s))
ON CONFLICT (trigger_id, due_at) DO NOTHING
RETURNING trigger_id;

-- name: write_state
-- Only for fires whose poll state changed (no TOAST rewrite otherwise).
UPDATE {schema}.trigger_state SET state = %(state)b WHERE id = %(id)s;

-- name: commit_fire
-- Commit and re-arm in the row: next fire time (NULL: finished) and a new version. Fenced on
-- the version that fired: if the trigger was moved while the poll was in flight, nothing is
-- written and the move stands (promise 4).
UPDATE {schema}.trigger
SET fire_at = to_timestamp(%(next_fire_at)s), armed_at = to_timestamp(%(now)s), version = version + 1,
    held_version = version + 1
WHERE id = %(id)s AND version = %(version)s
RETURNING version, extract(epoch FROM fire_at)::float8 AS fire_at, extract(epoch FROM armed_at)::float8 AS armed_at;

-- name: costs_add
-- One process's counts since its last flush, added to its own row.
INSERT INTO {schema}.temporal_costs AS c
    (source, workflows_started, workflows_completed, signals_sent, activities_executed, continue_as_new, fires, stale_polls)
VALUES (%(source)s, %(workflows_started)s, %(workflows_completed)s, %(signals_sent)s, %(activities_executed)s,
        %(continue_as_new)s, %(fires)s, %(stale_polls)s)
ON CONFLICT (source) DO UPDATE
SET workflows_started = c.workflows_started + EXCLUDED.workflows_started,
    workflows_completed = c.workflows_completed + EXCLUDED.workflows_completed,
    signals_sent = c.signals_sent + EXCLUDED.signals_sent,
    activities_executed = c.activities_executed + EXCLUDED.activities_executed,
    continue_as_new = c.continue_as_new + EXCLUDED.continue_as_new,
    fires = c.fires + EXCLUDED.fires,
    stale_polls = c.stale_polls + EXCLUDED.stale_polls,
    updated_at = now();

-- name: costs_read
SELECT coalesce(sum(workflows_started), 0)::float8, coalesce(sum(workflows_completed), 0)::float8,
       coalesce(sum(signals_sent), 0)::float8, coalesce(sum(activities_executed), 0)::float8,
       coalesce(sum(continue_as_new), 0)::float8, coalesce(sum(fires), 0)::float8,
       coalesce(sum(stale_polls), 0)::float8
FROM {schema}.temporal_costs;

-- name: armed_ids
-- Teardown only: the triggers whose workflows are still running.
SELECT id FROM {schema}.trigger WHERE fire_at IS NOT NULL;

-- name: export_armed
-- Migration backfill and reconcile only; never on the dispatch path. What will fire: rows with a
-- fire time whose workflow holds that version (an arm whose signal was lost is not armed).
SELECT id, extract(epoch FROM fire_at)::float8 AS fire_at, type, tenant_id, priority
FROM {schema}.trigger WHERE fire_at IS NOT NULL AND held_version = version;

-- name: disarm
-- Migration reconcile --repair only (a timer the source store does not have); this design has
-- no cancel (as temporal_shards: no-cancel). The version fence used as one: the row loses its
-- fire time and its version moves on, so the workflow's next poll fires nothing and ends it, and
-- a poll in flight commits nothing. disarm() also signals the workflows so they end at once.
UPDATE {schema}.trigger SET fire_at = NULL, version = version + 1
WHERE id = ANY(%(ids)s::text[]) AND fire_at IS NOT NULL
RETURNING id, version;
