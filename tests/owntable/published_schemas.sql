-- The queue tables of four job libraries that need a runtime these tests do not install (Go,
-- Elixir, Ruby), written here in our own words from each library's published schema: River's
-- migrations (line main, up to 006), Oban's migrations (version 12), Solid Queue's
-- db/queue_schema.rb, good_job's install migration. Only what `bench inspect --preset` and
-- `bench capture --preset` read: the columns, types and indexes; no triggers or functions.
-- Each fill block arms {triggers} triggers, the i-th every 3 + i % 4 seconds, with five finished
-- runs behind it and its next run pending, its id and tenant inside the job's JSON arguments.

-- name: river
CREATE TYPE river_job_state AS ENUM ('available', 'cancelled', 'completed', 'discarded', 'pending',
                                     'retryable', 'running', 'scheduled');
CREATE TABLE river_job (
    id bigserial PRIMARY KEY,
    state river_job_state NOT NULL DEFAULT 'available',
    attempt smallint NOT NULL DEFAULT 0,
    max_attempts smallint NOT NULL DEFAULT 25,
    attempted_at timestamptz,
    created_at timestamptz NOT NULL DEFAULT now(),
    finalized_at timestamptz,
    scheduled_at timestamptz NOT NULL DEFAULT now(),
    priority smallint NOT NULL DEFAULT 1,
    args jsonb NOT NULL,
    attempted_by text[],
    errors jsonb[],
    kind text NOT NULL,
    metadata jsonb NOT NULL DEFAULT '{{}}',
    queue text NOT NULL DEFAULT 'default',
    tags varchar(255)[] NOT NULL DEFAULT '{{}}',
    unique_key bytea,
    unique_states bit(8)
);
CREATE INDEX river_job_kind ON river_job (kind);
CREATE INDEX river_job_state_and_finalized_at_index ON river_job (state, finalized_at) WHERE finalized_at IS NOT NULL;
CREATE INDEX river_job_prioritized_fetching_index ON river_job (state, queue, priority, scheduled_at, id);
CREATE INDEX river_job_args_index ON river_job USING gin (args);
CREATE INDEX river_job_metadata_index ON river_job USING gin (metadata);

-- name: river_fill
INSERT INTO river_job (state, kind, queue, args, scheduled_at, finalized_at)
SELECT CASE WHEN k = 0 THEN 'scheduled'::river_job_state ELSE 'completed' END, 'poll', 'default',
       jsonb_build_object('trigger_id', 'trigger-' || i, 'tenant', 'tenant-' || i % 5, 'every', 3 + i % 4),
       now() + make_interval(secs => (1 + i % 3) - k * (3 + i % 4)),
       CASE WHEN k = 0 THEN NULL ELSE now() END
FROM generate_series(1, {triggers}) i, generate_series(0, 5) k

-- name: oban
CREATE TYPE oban_job_state AS ENUM ('available', 'scheduled', 'executing', 'retryable', 'completed',
                                    'discarded', 'cancelled');
CREATE TABLE oban_jobs (
    id bigserial PRIMARY KEY,
    state oban_job_state NOT NULL DEFAULT 'available',
    queue text NOT NULL DEFAULT 'default',
    worker text NOT NULL,
    args jsonb NOT NULL DEFAULT '{{}}',
    errors jsonb[] NOT NULL DEFAULT '{{}}',
    attempt integer NOT NULL DEFAULT 0,
    max_attempts integer NOT NULL DEFAULT 20,
    inserted_at timestamp NOT NULL DEFAULT timezone('UTC', now()),
    scheduled_at timestamp NOT NULL DEFAULT timezone('UTC', now()),
    attempted_at timestamp,
    completed_at timestamp,
    attempted_by text[],
    discarded_at timestamp,
    priority integer NOT NULL DEFAULT 0,
    tags text[] DEFAULT '{{}}',
    meta jsonb DEFAULT '{{}}',
    cancelled_at timestamp
);
CREATE INDEX oban_jobs_state_queue_priority_scheduled_at_id_index ON oban_jobs (state, queue, priority, scheduled_at, id);
CREATE INDEX oban_jobs_args_index ON oban_jobs USING gin (args);
CREATE INDEX oban_jobs_meta_index ON oban_jobs USING gin (meta);

-- name: oban_fill
INSERT INTO oban_jobs (state, queue, worker, args, scheduled_at, completed_at)
SELECT CASE WHEN k = 0 THEN 'scheduled'::oban_job_state ELSE 'completed' END, 'default', 'App.PollWorker',
       jsonb_build_object('trigger_id', 'trigger-' || i, 'tenant', 'tenant-' || i % 5, 'every', 3 + i % 4),
       timezone('UTC', now()) + make_interval(secs => (1 + i % 3) - k * (3 + i % 4)),
       CASE WHEN k = 0 THEN NULL ELSE timezone('UTC', now()) END
FROM generate_series(1, {triggers}) i, generate_series(0, 5) k

-- name: solid_queue
CREATE TABLE solid_queue_jobs (
    id bigserial PRIMARY KEY,
    queue_name varchar NOT NULL,
    class_name varchar NOT NULL,
    arguments text,
    priority integer NOT NULL DEFAULT 0,
    active_job_id varchar,
    scheduled_at timestamp(6),
    finished_at timestamp(6),
    concurrency_key varchar,
    created_at timestamp(6) NOT NULL DEFAULT now(),
    updated_at timestamp(6) NOT NULL DEFAULT now()
);
CREATE INDEX index_solid_queue_jobs_on_active_job_id ON solid_queue_jobs (active_job_id);
CREATE INDEX index_solid_queue_jobs_on_class_name ON solid_queue_jobs (class_name);
CREATE INDEX index_solid_queue_jobs_on_finished_at ON solid_queue_jobs (finished_at);
CREATE INDEX index_solid_queue_jobs_for_filtering ON solid_queue_jobs (queue_name, finished_at);
CREATE INDEX index_solid_queue_jobs_for_alerting ON solid_queue_jobs (scheduled_at, finished_at);
CREATE TABLE solid_queue_scheduled_executions (
    id bigserial PRIMARY KEY,
    job_id bigint NOT NULL UNIQUE REFERENCES solid_queue_jobs ON DELETE CASCADE,
    queue_name varchar NOT NULL,
    priority integer NOT NULL DEFAULT 0,
    scheduled_at timestamp(6) NOT NULL,
    created_at timestamp(6) NOT NULL DEFAULT now()
);
CREATE INDEX index_solid_queue_dispatch_all ON solid_queue_scheduled_executions (scheduled_at, priority, job_id);

-- name: solid_queue_fill
-- arguments: Active Job's serialization, as text (a new job_id every run, so the identity is the
-- inner arguments)
INSERT INTO solid_queue_jobs (queue_name, class_name, arguments, active_job_id, scheduled_at, finished_at)
SELECT 'default', 'PollJob',
       jsonb_build_object('job_class', 'PollJob', 'job_id', md5(i || ':' || k), 'queue_name', 'default',
                          'arguments', jsonb_build_array(jsonb_build_object(
                              'trigger_id', 'trigger-' || i, 'tenant', 'tenant-' || i % 5, 'every', 3 + i % 4)))::text,
       md5(i || ':' || k),
       now() + make_interval(secs => (1 + i % 3) - k * (3 + i % 4)),
       CASE WHEN k = 0 THEN NULL ELSE now() END
FROM generate_series(1, {triggers}) i, generate_series(0, 5) k;
INSERT INTO solid_queue_scheduled_executions (job_id, queue_name, scheduled_at)
SELECT id, queue_name, scheduled_at FROM solid_queue_jobs WHERE finished_at IS NULL

-- name: good_job
CREATE TABLE good_jobs (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    queue_name text,
    priority integer,
    serialized_params jsonb,
    scheduled_at timestamp(6),
    performed_at timestamp(6),
    finished_at timestamp(6),
    error text,
    created_at timestamp(6) NOT NULL DEFAULT now(),
    updated_at timestamp(6) NOT NULL DEFAULT now(),
    active_job_id uuid,
    concurrency_key text,
    cron_key text,
    retried_good_job_id uuid,
    cron_at timestamp(6),
    batch_id uuid,
    batch_callback_id uuid,
    is_discrete boolean,
    executions_count integer,
    job_class text,
    error_event smallint
);
CREATE INDEX index_good_jobs_on_scheduled_at ON good_jobs (scheduled_at) WHERE finished_at IS NULL;
CREATE INDEX index_good_jobs_on_queue_name_and_scheduled_at ON good_jobs (queue_name, scheduled_at) WHERE finished_at IS NULL;
CREATE INDEX index_good_jobs_on_active_job_id_and_created_at ON good_jobs (active_job_id, created_at);
CREATE INDEX index_good_jobs_on_concurrency_key_when_unfinished ON good_jobs (concurrency_key) WHERE finished_at IS NULL;
CREATE INDEX index_good_jobs_jobs_on_finished_at ON good_jobs (finished_at) WHERE retried_good_job_id IS NULL AND finished_at IS NOT NULL;
CREATE INDEX index_good_jobs_jobs_on_priority_created_at_when_unfinished ON good_jobs (priority DESC NULLS LAST, created_at) WHERE finished_at IS NULL;
CREATE TABLE good_job_executions (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    created_at timestamp(6) NOT NULL DEFAULT now(),
    updated_at timestamp(6) NOT NULL DEFAULT now(),
    active_job_id uuid NOT NULL,
    job_class text,
    queue_name text,
    serialized_params jsonb,
    scheduled_at timestamp(6),
    finished_at timestamp(6),
    error text,
    error_event smallint
);
CREATE INDEX index_good_job_executions_on_active_job_id_and_created_at ON good_job_executions (active_job_id, created_at)

-- name: good_job_fill
INSERT INTO good_jobs (queue_name, job_class, serialized_params, active_job_id, scheduled_at, performed_at, finished_at)
SELECT 'default', 'PollJob',
       jsonb_build_object('job_class', 'PollJob', 'job_id', gen_random_uuid(), 'queue_name', 'default',
                          'arguments', jsonb_build_array(jsonb_build_object(
                              'trigger_id', 'trigger-' || i, 'tenant', 'tenant-' || i % 5, 'every', 3 + i % 4))),
       gen_random_uuid(),
       now() + make_interval(secs => (1 + i % 3) - k * (3 + i % 4)),
       CASE WHEN k = 0 THEN NULL ELSE now() END,
       CASE WHEN k = 0 THEN NULL ELSE now() END
FROM generate_series(1, {triggers}) i, generate_series(0, 5) k

-- name: app_timers
-- a team's own table, not any library's: a row per fire, the trigger inside a JSON spec
CREATE TABLE app_timers (
    pk bigserial PRIMARY KEY,
    spec jsonb NOT NULL,
    due_at timestamptz NOT NULL,
    state text NOT NULL DEFAULT 'waiting',
    fired_at timestamptz
);
CREATE INDEX app_timers_due ON app_timers (due_at) WHERE state = 'waiting';
INSERT INTO app_timers (spec, due_at)
SELECT jsonb_build_object('trigger_id', 'trigger-' || i, 'tenant', 'tenant-' || i % 5, 'every', 3 + i % 4),
       now() + make_interval(secs => 0.5 + (i % 30) / 10.0)
FROM generate_series(1, {triggers}) i;
ANALYZE app_timers

-- name: app_timers_fire
-- the application's tick: every waiting row that is due fires, and its next run is inserted
-- one interval after its due time (a fixed cadence)
WITH fired AS (
    UPDATE app_timers SET state = 'fired', fired_at = now()
    WHERE state = 'waiting' AND due_at <= now()
    RETURNING spec, due_at
)
INSERT INTO app_timers (spec, due_at)
SELECT spec, due_at + make_interval(secs => (spec ->> 'every')::int) FROM fired
