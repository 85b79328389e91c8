-- The trigger rows the job-library designs (procrastinate, pgqueuer) keep beside the library's
-- own tables, in the run's schema. The library's job carries (trigger id, version); the row is
-- what a fire reads and commits, and its version fences a job a move or a disarm superseded.
-- Every access is by primary key: the library's job table is what is searched by due time.

-- name: trigger_table
-- One narrow row per trigger. fire_at is the armed fire time (NULL: finished or disarmed);
-- version bumps on every arm, disarm and commit, so a job commits only the fire it was deferred
-- for. fillfactor 50 leaves room on each page for the version a commit writes (HOT).
CREATE TABLE IF NOT EXISTS {schema}.trigger (
    id        text PRIMARY KEY,
    type      text NOT NULL,
    tenant_id text NOT NULL,
    priority  integer NOT NULL DEFAULT 0,
    fire_at   timestamptz,
    armed_at  timestamptz NOT NULL,
    version   bigint NOT NULL DEFAULT 1
) WITH (fillfactor = 50);

-- name: state_table
-- The wide encrypted poll state in its own table, rewritten only when the poll changed it.
CREATE TABLE IF NOT EXISTS {schema}.trigger_state (
    id    text PRIMARY KEY,
    state bytea
) WITH (fillfactor = 50);

-- name: effects_table
-- Idempotent effects: a second fire of (trigger, due) finds the key taken and delivers nothing.
CREATE TABLE IF NOT EXISTS {schema}.effects (
    trigger_id  text NOT NULL,
    due_at      timestamptz NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (trigger_id, due_at)
);
