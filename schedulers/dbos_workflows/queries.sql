-- dbos_workflows: every statement the design runs on its own tables (DBOS runs its own on its
-- system tables). Trigger access is by primary key; a batch of fires is read in one statement
-- and committed in one.

-- name: lock_triggers
-- arm(), first statement of its transaction: the rows it is about to move, locked in id order
-- (as commit_fires locks them), with the fire time and holder they had.
SELECT id, extract(epoch FROM fire_at)::float8 AS fire_at, holder
FROM {schema}.trigger WHERE id = ANY(%(ids)s::text[])
ORDER BY id
FOR UPDATE;

-- name: arm_upsert
-- Arm or move: a new fire time bumps the version, so a poll in flight for an older fire time
-- commits nothing (commit_fires is fenced on the version) and its workflow follows the row.
INSERT INTO {schema}.trigger AS t (id, type, tenant_id, priority, fire_at, armed_at, version)
SELECT a.id, a.type, a.tenant_id, a.priority, to_timestamp(a.fire_at), to_timestamp(%(armed_at)s), 1
FROM unnest(%(ids)s::text[], %(types)s::text[], %(tenants)s::text[], %(priorities)s::int[], %(fire_ats)s::float8[])
     AS a(id, type, tenant_id, priority, fire_at)
ON CONFLICT (id) DO UPDATE
SET fire_at = EXCLUDED.fire_at, armed_at = EXCLUDED.armed_at, version = t.version + 1,
    type = EXCLUDED.type, tenant_id = EXCLUDED.tenant_id, priority = EXCLUDED.priority
RETURNING t.id, t.version;

-- name: state_insert
-- Initial poll state for triggers the arm just created.
INSERT INTO {schema}.trigger_state (id, state)
SELECT * FROM unnest(%(ids)s::text[], %(states)s::bytea[])
ON CONFLICT (id) DO NOTHING;

-- name: set_holders
-- The workflows arm() starts in the same transaction become the holders of their triggers.
UPDATE {schema}.trigger t SET holder = h.holder
FROM unnest(%(ids)s::text[], %(holders)s::text[]) AS h(id, holder)
WHERE t.id = h.id;

-- name: enqueue_workflows
-- DBOS's own SQL entry point (its enqueue_workflow function, portable JSON arguments): the
-- trigger workflows start in the transaction that armed their rows, so an armed row always has
-- a workflow and a workflow always has its row. A first fire far enough out is enqueued DELAYED
-- until shortly before it (DBOS moves it to ENQUEUED when the delay ends), so a large population
-- armed at once does not start every workflow at once.
SELECT {schema}.enqueue_workflow(
    %(workflow)s, %(queue)s,
    ARRAY[to_json(%(store)s::text), to_json(w.trigger_id), to_json(w.holder), 'null'::json, to_json(w.fire_at),
          to_json(w.wait_first)],
    '{{}}'::json,
    workflow_id => w.holder,
    delay_until_epoch_ms => w.delay_until_ms,
    application_name => %(application)s)
FROM unnest(%(trigger_ids)s::text[], %(holders)s::text[], %(fire_ats)s::float8[], %(wait_firsts)s::bool[],
            %(delay_until_ms)s::bigint[])
     AS w(trigger_id, holder, fire_at, wait_first, delay_until_ms);

-- name: wake_holders
-- wait=recv: DBOS's own SQL send (its send_message function) wakes each moved trigger's holder,
-- in the transaction that moved its row.
SELECT {schema}.send_message(h, %(message)s::json, %(topic)s) FROM unnest(%(holders)s::text[]) AS h;

-- name: fetch_fires
-- One batch of woken workflows: their rows by key, with the poll state of those that are due
-- (a row moved later, or no longer held by the workflow asking, needs no state).
SELECT t.id, t.type, t.tenant_id, t.priority,
       extract(epoch FROM t.fire_at)::float8 AS fire_at,
       extract(epoch FROM t.armed_at)::float8 AS armed_at,
       t.version, t.holder, s.state
FROM {schema}.trigger t
LEFT JOIN {schema}.trigger_state s ON s.id = t.id AND t.fire_at <= to_timestamp(%(due_by)s)
WHERE t.id = ANY(%(ids)s::text[]);

-- name: commit_fires
-- One group of polled fires in one statement: re-arm in the row (next fire time, NULL when
-- finished; version + 1; the successor of a restarted workflow becomes the holder), the changed
-- poll states, and the effects under (trigger_id, due_at). Fenced on the version and holder that
-- fired: a row moved (or disarmed) while its poll was in flight keeps the move, and its poll
-- writes nothing.
WITH c AS (
    SELECT * FROM unnest(%(ids)s::text[], %(versions)s::bigint[], %(holders)s::text[], %(preds)s::text[],
                         %(next_fire_ats)s::float8[], %(states)s::bytea[], %(effect_dues)s::float8[])
         AS c(id, version, holder, pred, next_fire_at, state, effect_due)
),
up AS (
    UPDATE {schema}.trigger t
    SET fire_at = to_timestamp(c.next_fire_at), armed_at = to_timestamp(%(now)s), version = t.version + 1,
        holder = c.holder
    FROM c
    WHERE t.id = c.id AND t.version = c.version AND (t.holder = c.holder OR t.holder = c.pred)
    RETURNING t.id
),
st AS (
    UPDATE {schema}.trigger_state s SET state = c.state
    FROM c JOIN up ON up.id = c.id
    WHERE s.id = c.id AND c.state IS NOT NULL
    RETURNING s.id
),
ef AS (
    INSERT INTO {schema}.effects (trigger_id, due_at)
    SELECT c.id, to_timestamp(c.effect_due) FROM c JOIN up ON up.id = c.id
    WHERE c.effect_due IS NOT NULL
    ON CONFLICT (trigger_id, due_at) DO NOTHING
    RETURNING trigger_id
)
SELECT coalesce((SELECT array_agg(id) FROM up), '{{}}'::text[]),
       coalesce((SELECT array_agg(trigger_id) FROM ef), '{{}}'::text[]),
       (SELECT count(*) FROM st);

-- name: read_rows
-- After a fenced-out commit: the rows as they are now, for the workflows to follow.
SELECT id, extract(epoch FROM fire_at)::float8 AS fire_at, holder
FROM {schema}.trigger WHERE id = ANY(%(ids)s::text[]);

-- name: take_over
-- wait=recv: a restarted workflow's successor becomes the holder before it listens for moves,
-- if its predecessor still is (an arm that started another holder meanwhile wins); the row's
-- fire time, read under the same row lock as arm() takes, is what it waits for.
UPDATE {schema}.trigger SET holder = %(holder)s
WHERE id = %(id)s AND holder IN (%(pred)s, %(holder)s)
RETURNING extract(epoch FROM fire_at)::float8 AS fire_at;

-- name: executor_register
INSERT INTO {schema}.executors (executor_id, heartbeat_at, stopped) VALUES (%(executor_id)s, now(), false)
ON CONFLICT (executor_id) DO UPDATE SET heartbeat_at = now(), stopped = false;

-- name: executor_heartbeat
UPDATE {schema}.executors SET heartbeat_at = now() WHERE executor_id = %(executor_id)s AND NOT stopped;

-- name: executor_stopped
-- A graceful stop: the executor's pending workflows may be recovered at once.
UPDATE {schema}.executors SET stopped = true WHERE executor_id = %(executor_id)s;

-- name: executors_gone
-- Executors another one must recover: stopped, or silent for longer than the lease.
SELECT executor_id FROM {schema}.executors
WHERE executor_id <> %(executor_id)s
  AND (stopped OR heartbeat_at < now() - make_interval(secs => %(lease_s)s));

-- name: executor_forget
-- After their pending workflows were handed back to the queue (unless one came back to life).
DELETE FROM {schema}.executors
WHERE executor_id = ANY(%(ids)s::text[])
  AND (stopped OR heartbeat_at < now() - make_interval(secs => %(lease_s)s));

-- name: export_armed
-- Migration backfill and reconcile, and the run's end; never on the dispatch path. A row with a
-- fire time has a holder that will fire it (armed in the transaction that started the holder).
SELECT id, extract(epoch FROM fire_at)::float8 AS fire_at, type, tenant_id, priority
FROM {schema}.trigger WHERE fire_at IS NOT NULL;

-- name: disarm
-- Migration reconcile --repair only: the row loses its fire time and holder; the holder's next
-- poll fires nothing and its workflow returns.
UPDATE {schema}.trigger SET fire_at = NULL, holder = NULL, version = version + 1
WHERE id = ANY(%(ids)s::text[]) AND fire_at IS NOT NULL
RETURNING id;

-- name: schema_tables
-- Every table in the run's schema (DBOS's migrations and ours): what the sampler watches.
SELECT c.relname FROM pg_class c
WHERE c.relnamespace = to_regnamespace(%(schema)s) AND c.relkind IN ('r', 'p')
ORDER BY c.relname;
