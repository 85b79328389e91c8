-- dbos_workflows: the project's tables, in the run's schema beside DBOS's own system tables
-- (DBOS's migrations create those in the same schema: dbos_system_schema is the run's schema).
-- Every access is by primary key; nothing here is searched by due time: each trigger's DBOS
-- workflow holds its own wait.

-- name: trigger_table
-- One narrow row per trigger. fire_at is the armed fire time (NULL: finished); version bumps on
-- every arm and every commit, so a poll commits only the fire it read (a move wins). holder is
-- the DBOS workflow id that fires this trigger: a workflow that is no longer the holder (a move
-- to an earlier time started another, or the trigger was disarmed) fires nothing and returns.
-- fillfactor 50 leaves room on each page for the version a commit writes (HOT), as in the
-- Temporal designs.
CREATE TABLE IF NOT EXISTS {schema}.trigger (
    id        text PRIMARY KEY,
    type      text NOT NULL,
    tenant_id text NOT NULL,
    priority  integer NOT NULL DEFAULT 0,
    fire_at   timestamptz,
    armed_at  timestamptz NOT NULL,
    version   bigint NOT NULL DEFAULT 1,
    holder    text
) WITH (fillfactor = 50);

-- name: state_table
-- The wide encrypted poll state in its own table, rewritten only when the poll changed it.
CREATE TABLE IF NOT EXISTS {schema}.trigger_state (
    id    text PRIMARY KEY,
    state bytea
) WITH (fillfactor = 50);

-- name: effects_table
-- Idempotent effects (the durable-workflows article's checkpoint pattern): a second fire of
-- (trigger, due) finds the key taken and delivers nothing.
CREATE TABLE IF NOT EXISTS {schema}.effects (
    trigger_id  text NOT NULL,
    due_at      timestamptz NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (trigger_id, due_at)
);

-- name: executors_table
-- DBOS executors (one per launch of DBOS in a process) and their heartbeats. DBOS itself only
-- recovers an executor's pending workflows when that executor restarts with the same id, or
-- when Conductor (its hosted control plane) says so; without Conductor this table is how a
-- live executor learns that another one died (heartbeat older than the lease) or stopped.
CREATE TABLE IF NOT EXISTS {schema}.executors (
    executor_id  text PRIMARY KEY,
    heartbeat_at timestamptz NOT NULL DEFAULT now(),
    stopped      boolean NOT NULL DEFAULT false
);
