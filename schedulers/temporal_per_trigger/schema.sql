-- temporal_per_trigger: Postgres keeps durable trigger state, accessed by key only, exactly as in
-- temporal_shards (same row shapes, so the two designs differ only in how time is dispatched).
-- Each trigger's fire time lives in its own Temporal workflow's durable timer; nothing here is
-- searched by due time.

-- name: trigger_table
-- One narrow row per trigger; the primary key is its only index, so every commit is a HOT
-- candidate. fire_at is the armed fire time (NULL: finished). version bumps on every arm and
-- every commit: the workflow fires only the version it was told about, so an older fire time of
-- a moved trigger can never poll (promise 4). held_version is the newest version the trigger's
-- workflow is known to hold (its arm signal was accepted, or its own poll committed it): a row
-- whose signal was lost is armed in the table but not in Temporal, and export_armed must not
-- call it armed. No owner or lease column: the workflow id is the trigger's lock (Temporal runs
-- one execution per id, and it runs one poll at a time), and the poll activity's heartbeat
-- timeout is the lease.
CREATE TABLE IF NOT EXISTS {schema}.trigger (
    id           text PRIMARY KEY,
    type         text NOT NULL,
    tenant_id    text NOT NULL,
    priority     integer NOT NULL DEFAULT 0,
    fire_at      timestamptz,
    armed_at     timestamptz NOT NULL,
    version      bigint NOT NULL DEFAULT 1,
    held_version bigint NOT NULL DEFAULT 0
) WITH (fillfactor = 50);

-- name: state_table
-- The wide encrypted poll state in its own table, rewritten only when the poll cursor changed.
CREATE TABLE IF NOT EXISTS {schema}.trigger_state (
    id    text PRIMARY KEY,
    state bytea
) WITH (fillfactor = 50);

-- name: effects_table
-- Idempotent effects (the durable-workflows article's checkpoint-key): a duplicate fire of (trigger, due) finds
-- the key taken and delivers nothing.
CREATE TABLE IF NOT EXISTS {schema}.effects (
    trigger_id  text NOT NULL,
    due_at      timestamptz NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (trigger_id, due_at)
);

-- name: costs_table
-- What the design costs in Temporal, one row per process (arming callers and workers), added
-- to about once a second: the per-fire figures of the comparison come from these sums.
CREATE TABLE IF NOT EXISTS {schema}.temporal_costs (
    source              text PRIMARY KEY,
    workflows_started   bigint NOT NULL DEFAULT 0,
    workflows_completed bigint NOT NULL DEFAULT 0,
    signals_sent        bigint NOT NULL DEFAULT 0,
    activities_executed bigint NOT NULL DEFAULT 0,
    continue_as_new     bigint NOT NULL DEFAULT 0,
    fires               bigint NOT NULL DEFAULT 0,
    stale_polls         bigint NOT NULL DEFAULT 0,
    updated_at          timestamptz NOT NULL DEFAULT now()
);
