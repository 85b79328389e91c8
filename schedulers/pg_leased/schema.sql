-- pg_leased schema. Every block runs on setup (idempotent), in file order; then the storage
-- knobs every Postgres design accepts (fillfactor, per-table autovacuum: schedulers/storage.sql).
-- {schedule} and {state} name the two churning tables ({schema}.schedule, {schema}.state) in the
-- blocks that set per-table storage parameters: pg_partitioned runs those once per partition.
-- Other {placeholders} are scheduler options, rendered as SQL literals.

-- name: schedule_table
-- One narrow row per trigger, updated in place on every fire, never deleted and reinserted
-- (the Composio article's "before" design deletes and reinserts per fire; that is what we avoid).
CREATE TABLE IF NOT EXISTS {schema}.schedule (
    id            text PRIMARY KEY,
    tenant_id     text NOT NULL,
    type          text NOT NULL,
    priority      integer NOT NULL DEFAULT 0,           -- higher first (claim-order)
    state         text NOT NULL DEFAULT 'scheduled'
                  CHECK (state IN ('scheduled', 'running', 'done')),
    next_fire_at  timestamptz,                          -- NULL: due now (null-due-now)
    -- The timer-wheel article claims `next_fire_at IS NULL OR next_fire_at <= now`. An OR cannot bound an
    -- index range scan, so NULL is folded to -infinity here: "due" becomes one range,
    -- `due_key <= now()`, and NULL rows sort first as the article orders them (NULLS FIRST).
    due_key       timestamptz NOT NULL
                  GENERATED ALWAYS AS (coalesce(next_fire_at, '-infinity'::timestamptz)) STORED,
    armed_at      timestamptz NOT NULL DEFAULT now(),   -- when this fire time was armed
    version       bigint NOT NULL DEFAULT 0,            -- +1 per arm / re-arm: a move wins
    attempt       integer NOT NULL DEFAULT 0,           -- deliveries of this version; claim token
    owner_id      text,                                 -- lease holder (lease-columns)
    lease_expires timestamptz,                          -- renewed by heartbeat (heartbeat-lease)
    poll_state    bytea                                 -- only when split_state is off
) WITH (fillfactor = {fillfactor_pct});

-- name: schedule_params
-- Re-applied on every setup so a changed option takes effect on an existing table.
ALTER TABLE {schedule} SET (fillfactor = {fillfactor_pct}, toast_tuple_target = {toast_tuple_target});

-- name: schedule_state_storage
-- The poll state is encrypted, so incompressible: never try to compress it (EXTERNAL).
ALTER TABLE {schema}.schedule ALTER COLUMN poll_state SET STORAGE EXTERNAL;

-- name: schedule_due_idx
-- The timer-wheel article's partial index on scheduled rows (partial-index): running and done
-- rows never enter it. In the claim's order (priority first), not on the fire time alone, so a
-- claim reads only the rows it locks instead of sorting the due range (MEASUREMENTS.md: 80 ms
-- and an on-disk sort per claim under a 60,000-row backlog); Postgres 18's skip scan serves
-- `due_key <= now()` without a condition on priority.
CREATE INDEX IF NOT EXISTS schedule_priority_due_idx ON {schema}.schedule (priority DESC, due_key)
    WHERE state = 'scheduled';

-- name: schedule_tenant_due_idx
-- The fairness branch of claim_due: per tenant, its earliest due rows, as one bounded range.
CREATE INDEX IF NOT EXISTS schedule_tenant_due_idx ON {schema}.schedule (tenant_id, due_key)
    WHERE state = 'scheduled';

-- name: schedule_running_idx
-- The sweeper's way to the (few) in-flight rows. Deliberately not on lease_expires: a
-- heartbeat changes only lease_expires, and an unindexed column keeps that update HOT.
CREATE INDEX IF NOT EXISTS schedule_running_idx ON {schema}.schedule (owner_id)
    WHERE state = 'running';

-- name: state_table
-- split_state: the wide poll state in its own key-value table, updated only by primary key and
-- only in its one non-key column, so every update can be HOT (the Composio article's hot-100pct:
-- its replacement's state table ran 100% HOT). Created even when split_state is off (then empty).
CREATE TABLE IF NOT EXISTS {schema}.state (
    id         text PRIMARY KEY,
    poll_state bytea NOT NULL
) WITH (fillfactor = {state_fillfactor_pct});

-- name: state_params
ALTER TABLE {state} SET (fillfactor = {state_fillfactor_pct}, toast_tuple_target = {toast_tuple_target});

-- name: state_storage
ALTER TABLE {schema}.state ALTER COLUMN poll_state SET STORAGE EXTERNAL;

-- name: effects_table
-- The durable-workflows article's idempotent checkpoint (checkpoint-key): an effect is recorded once per (trigger, fire time); a
-- duplicate fire's insert conflicts and is reported as not delivered.
CREATE TABLE IF NOT EXISTS {schema}.effects (
    trigger_id  text NOT NULL,
    due_at      timestamptz NOT NULL,
    worker      text NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (trigger_id, due_at)
);
