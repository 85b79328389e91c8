-- temporal_shards: Postgres keeps durable trigger state, accessed by key only (the Composio
-- article's by-key: "Claim and commit access individual records by key, so that database
-- behaves like a key-value store"). No table here is ever searched by due time: Temporal shards hold time.

-- name: trigger_table
-- One narrow row per trigger. The primary key is its only index and no statement changes the
-- key, so every claim, lease extension and commit can be a HOT update (hot-100pct: "100% of
-- updates to the trigger table were HOT"); fillfactor leaves room on the page for the two new
-- versions each fire writes (claim, commit) until page pruning reclaims the old ones.
-- fire_at is the armed fire time (NULL: finished), version bumps on every arm and re-arm so a
-- stale copy of a timer on another shard cannot claim the row (only the latest fire time fires).
CREATE TABLE IF NOT EXISTS {schema}.trigger (
    id              text PRIMARY KEY,
    type            text NOT NULL,
    tenant_id       text NOT NULL,
    priority        integer NOT NULL DEFAULT 0,
    fire_at         timestamptz,
    armed_at        timestamptz NOT NULL,
    version         bigint NOT NULL DEFAULT 1,
    attempt         integer NOT NULL DEFAULT 0,
    owner           text,
    lease_expires   timestamptz,
    committed_batch text,
    -- The poll state in the row, as the Composio article's trigger table holds it (heap-halved:
    -- "Claim sets a lease, and commit rewrites the poll state": two heap writes a fire). TOASTed
    -- when large, so the row stays narrow and a claim, which leaves it alone, keeps its chunks.
    -- NULL with state_in_row=false, where trigger_state holds it.
    state           bytea
) WITH (fillfactor = 50);

-- name: state_table
-- With state_in_row=false: the wide encrypted poll state in its own table updated by key
-- (TOASTed when large), a second heap write per commit beside the trigger row's. A commit rewrites it on
-- every fire, as the Composio article measured (toast-third: "Every commit writes freshly
-- encrypted poll state", so TOAST writes went up by about a third), or only when the poll cursor changed with the option
-- skip_unchanged_state (skip-unchanged: "Skipping that write ... is next on the list").
CREATE TABLE IF NOT EXISTS {schema}.trigger_state (
    id    text PRIMARY KEY,
    state bytea
) WITH (fillfactor = 50);

-- name: effects_table
-- Idempotent effects (the durable-workflows article's checkpoint-key): a duplicate fire of
-- (trigger, due) finds the key taken and delivers nothing.
CREATE TABLE IF NOT EXISTS {schema}.effects (
    trigger_id  text NOT NULL,
    due_at      timestamptz NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (trigger_id, due_at)
);

-- name: util_table
-- Shards write their timer counts here; the controller workflow reads it (controller-80-60). Also
-- where a shard records its history length when it continues as new, and its Continue-As-New
-- payload in bytes (can-2mb: Temporal caps it at 2 MB): measured at each report
-- (payload_bytes, the largest in max_payload_bytes) and at each Continue-As-New (last_can_ and
-- max_can_payload_bytes), with the splits and postponed Continue-As-New the limit caused.
CREATE TABLE IF NOT EXISTS {schema}.shard_util (
    shard                  integer PRIMARY KEY,
    timers                 integer NOT NULL,
    utilisation            double precision NOT NULL,
    history_length         integer NOT NULL DEFAULT 0,
    can_count              integer NOT NULL DEFAULT 0,
    last_can_history       integer NOT NULL DEFAULT 0,
    max_can_history        integer NOT NULL DEFAULT 0,
    payload_bytes          integer NOT NULL DEFAULT 0,
    max_payload_bytes      integer NOT NULL DEFAULT 0,
    last_can_payload_bytes integer NOT NULL DEFAULT 0,
    max_can_payload_bytes  integer NOT NULL DEFAULT 0,
    splits                 integer NOT NULL DEFAULT 0,
    can_postponed          integer NOT NULL DEFAULT 0,
    reported_at            timestamptz NOT NULL DEFAULT now()
);

-- name: ring_table
-- The shard count every caller hashes over; only the controller grows it.
CREATE TABLE IF NOT EXISTS {schema}.ring (
    singleton   boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    shard_count integer NOT NULL,
    grows       integer NOT NULL DEFAULT 0,
    grown_at    timestamptz
);
