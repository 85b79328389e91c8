-- pg_queue: the "before" design of the Composio article (docs/sources.md), a Postgres table
-- used as the timer queue.
-- Everything here is what a typical first version looks like, on purpose: default storage,
-- default fillfactor (100), default autovacuum settings, and an index for every question
-- someone once asked of the table. Run by schedulers.pg.apply_schema, every block idempotent.

-- name: create_triggers
-- One wide row per polling trigger (the Composio article: "The row was wide, with large encrypted columns
-- stored out of line in TOAST"). poll_state is the encrypted provider cursor: incompressible
-- bytes of StoreContext.state_bytes (default 4096), so with the default EXTENDED storage pglz
-- gives up on compressing it and Postgres moves it out of line into the TOAST table.
CREATE TABLE IF NOT EXISTS {schema}.triggers (
    id                   text        PRIMARY KEY,
    tenant_id            text        NOT NULL,
    type                 text        NOT NULL,
    priority             integer     NOT NULL DEFAULT 0,
    interval_s           double precision,              -- last re-arm's period; NULL until the first re-arm
    next_fire_at         timestamptz NOT NULL,          -- the due-work query walks this index
    status               text        NOT NULL DEFAULT 'scheduled',  -- scheduled -> claimed -> polled
    claimed_by           text,                          -- worker holding the claim, NULL when free
    claimed_at           timestamptz,                   -- when claimed; older than stale_claim_s = abandoned
    attempts             integer     NOT NULL DEFAULT 0,  -- deliveries of this next_fire_at
    armed_at             timestamptz NOT NULL DEFAULT now(),
    last_polled_at       timestamptz,
    last_poll_found_events boolean,
    poll_count           bigint      NOT NULL DEFAULT 0,
    poll_state           bytea,                         -- encrypted poll state, TOASTed at ~4 KB
    created_at           timestamptz NOT NULL DEFAULT now(),
    updated_at           timestamptz NOT NULL DEFAULT now()
);

-- name: index_next_fire_at
-- The index the scheduler's due-work query walks, oldest fire time first (due-scan). Fired
-- rows are deleted and re-inserted with later times, so its old end fills with dead entries.
CREATE INDEX IF NOT EXISTS triggers_next_fire_at_idx ON {schema}.triggers (next_fire_at);

-- name: index_tenant
-- "List a tenant's triggers" (the dashboard / API).
CREATE INDEX IF NOT EXISTS triggers_tenant_id_idx ON {schema}.triggers (tenant_id);

-- name: index_type
-- "How many triggers of each type" (ops dashboards).
CREATE INDEX IF NOT EXISTS triggers_type_idx ON {schema}.triggers (type);

-- name: index_claimed_by
-- "What is worker X holding" and the stale-claim hunt. The claim writes this column, so the
-- claim UPDATE can never be a HOT update.
CREATE INDEX IF NOT EXISTS triggers_claimed_by_idx ON {schema}.triggers (claimed_by);

-- name: index_created_at
-- "Triggers created recently" (support tooling).
CREATE INDEX IF NOT EXISTS triggers_created_at_idx ON {schema}.triggers (created_at);

-- name: create_effects
-- What the polling processor delivered, keyed so a duplicate fire cannot repeat an effect
-- (the durable-workflows article's checkpoint-key: unique (execution_id, step_id); here (trigger_id, due_at)).
CREATE TABLE IF NOT EXISTS {schema}.effects (
    trigger_id   text        NOT NULL,
    due_at       timestamptz NOT NULL,
    worker       text        NOT NULL,
    recorded_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (trigger_id, due_at)
);
