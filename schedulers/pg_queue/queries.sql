-- pg_queue: every statement the "before" design runs. Values travel as bind parameters;
-- {schema} is rendered as an identifier. Batched statements take parallel arrays and unnest them,
-- so one statement covers the whole batch (one round trip), but each row is still written.

-- name: arm_upsert
-- arm(): upsert by id. An existing id moves: new fire time, claim cleared (so an in-flight
-- commit of the old fire time finds its claim gone and skips its re-arm: the newer arm wins).
-- A new row gets fresh encrypted poll state; an existing one keeps its state.
INSERT INTO {schema}.triggers AS t
    (id, tenant_id, type, priority, next_fire_at, armed_at, status, poll_state, created_at, updated_at)
SELECT u.id, u.tenant_id, u.type, u.priority,
       coalesce(to_timestamp(u.fire_at), now()),   -- fire_at NULL: due now (null-due-now)
       now(), 'scheduled', u.poll_state, now(), now()
FROM unnest(%(ids)s::text[], %(tenants)s::text[], %(types)s::text[], %(priorities)s::int[],
            %(fire_ats)s::float8[], %(states)b::bytea[])
     AS u(id, tenant_id, type, priority, fire_at, poll_state)
ON CONFLICT (id) DO UPDATE SET
    tenant_id = excluded.tenant_id,
    type = excluded.type,
    priority = excluded.priority,
    next_fire_at = excluded.next_fire_at,
    armed_at = excluded.armed_at,
    status = 'scheduled',
    claimed_by = NULL,
    claimed_at = NULL,
    attempts = 0,
    updated_at = now();

-- name: arm_bulk_staging
-- Bulk arm (arm() of at least bulk_arm_min timers): one transaction per id range, the rows
-- copied in binary into this staging table, then upserted by one statement. Only the arm's
-- columns; dropped at the transaction's end, so each range's connection has its own.
CREATE TEMP TABLE arm_staging (
    id         text NOT NULL,
    tenant_id  text NOT NULL,
    type       text NOT NULL,
    priority   integer NOT NULL,
    fire_at    timestamptz,
    poll_state bytea
) ON COMMIT DROP;

-- name: arm_bulk_copy
COPY arm_staging (id, tenant_id, type, priority, fire_at, poll_state) FROM STDIN (FORMAT BINARY);

-- name: arm_bulk_upsert
-- arm_upsert, fed from the staging table: the same upsert, the same move semantics (claim
-- cleared, existing state kept). ORDER BY id: row locks in id order, one range after another.
INSERT INTO {schema}.triggers AS t
    (id, tenant_id, type, priority, next_fire_at, armed_at, status, poll_state, created_at, updated_at)
SELECT u.id, u.tenant_id, u.type, u.priority,
       coalesce(u.fire_at, now()),   -- fire_at NULL: due now (null-due-now)
       now(), 'scheduled', u.poll_state, now(), now()
  FROM arm_staging u
 ORDER BY u.id
ON CONFLICT (id) DO UPDATE SET
    tenant_id = excluded.tenant_id,
    type = excluded.type,
    priority = excluded.priority,
    next_fire_at = excluded.next_fire_at,
    armed_at = excluded.armed_at,
    status = 'scheduled',
    claimed_by = NULL,
    claimed_at = NULL,
    attempts = 0,
    updated_at = now();

-- name: tick_hold
-- Opens the tick's transaction (hold_tick_tx): an xid, taken before the claim and kept until the
-- processor has polled the batch. Vacuum cannot remove a version any running xid may still see,
-- so for as long as the tick takes no dead tuple younger than it goes, in any table of the
-- database (the Composio article, slow-ticks: "Slower ticks held transactions and snapshots open longer, delaying
-- cleanup further"). It writes nothing and locks no row: an arm() moving a claimed timer does not
-- wait for the poll.
-- The comment names the run in pg_stat_activity: which run's tick holds the horizon.
SELECT pg_current_xact_id() /* the held tick of {schema} */;

-- name: claim_due
-- Write 1 of 4 (UPDATE): the once-per-tick due-work query. Walks triggers_next_fire_at_idx from
-- the oldest fire time, skips rows another runner has locked, takes up to `batch` rows that are
-- free or whose claim went stale, and marks them claimed. Runs as its own autocommit statement so
-- the claim is durable (and its row locks gone) before any provider is polled; with hold_tick_tx
-- the tick's transaction (tick_hold) is open around it until the poll has answered.
WITH due AS (
    SELECT id
    FROM {schema}.triggers
    WHERE next_fire_at <= now()
      AND (claimed_by IS NULL OR claimed_at < now() - make_interval(secs => %(stale_claim_s)s))
    ORDER BY next_fire_at
    LIMIT %(batch)s
    FOR UPDATE SKIP LOCKED
)
UPDATE {schema}.triggers AS t
SET status = 'claimed',
    claimed_by = %(owner)s,
    claimed_at = now(),
    attempts = t.attempts + 1,
    updated_at = now()
FROM due
WHERE t.id = due.id
RETURNING t.id, t.tenant_id, t.type, t.priority,
          extract(epoch FROM t.next_fire_at)::float8 AS due_at,
          extract(epoch FROM t.armed_at)::float8 AS armed_at,
          t.attempts, t.poll_state, t.claimed_at;

-- name: mark_polled
-- Write 2 of 4 (UPDATE): record the poll's outcome on the row (status, when, whether it found
-- events). Fenced by the claim (claimed_by, claimed_at): a row that was moved by arm() or taken
-- over after going stale is not ours any more and is left alone. Returns the ids still ours.
-- No indexed column changes, so this one may be HOT when the page has room.
UPDATE {schema}.triggers AS t
SET status = 'polled',
    last_polled_at = now(),
    last_poll_found_events = u.found_events,
    poll_count = t.poll_count + 1,
    updated_at = now()
FROM unnest(%(ids)s::text[], %(found_events)s::bool[]) AS u(id, found_events)
WHERE t.id = u.id
  AND t.claimed_by = %(owner)s
  AND t.claimed_at = %(claimed_at)s
RETURNING t.id;

-- name: delete_fired
-- Write 3 of 4 (DELETE): the fired row goes (the Composio article: "we deleted its row and inserted a new
-- one for the next run"). Only rows mark_polled confirmed as ours, already locked by this
-- transaction. Returns what the next-run row carries over.
DELETE FROM {schema}.triggers AS t
WHERE t.id = ANY(%(ids)s::text[])
  AND t.claimed_by = %(owner)s
  AND t.claimed_at = %(claimed_at)s
RETURNING t.id, t.created_at, t.poll_count;

-- name: insert_next_run
-- Write 4 of 4 (INSERT): the next-run row, with the poll state the poll produced (the row
-- carries the state, so every re-arm rewrites all of its TOAST chunks) and fresh index entries
-- in all six indexes.
INSERT INTO {schema}.triggers
    (id, tenant_id, type, priority, interval_s, next_fire_at, armed_at, status,
     poll_count, poll_state, created_at, updated_at)
SELECT u.id, u.tenant_id, u.type, u.priority, u.interval_s, to_timestamp(u.next_fire_at), now(),
       'scheduled', u.poll_count, u.poll_state, u.created_at, now()
FROM unnest(%(ids)s::text[], %(tenants)s::text[], %(types)s::text[], %(priorities)s::int[],
            %(intervals_s)s::float8[], %(next_fire_ats)s::float8[], %(poll_counts)s::int8[],
            %(states)b::bytea[], %(created_ats)s::timestamptz[])
     AS u(id, tenant_id, type, priority, interval_s, next_fire_at, poll_count, poll_state, created_at);

-- name: record_effects
-- The processor's effects, keyed (trigger_id, due_at): a duplicate fire's effect hits the key and
-- is not returned, so the processor learns which effects were newly delivered.
INSERT INTO {schema}.effects (trigger_id, due_at, worker)
SELECT u.trigger_id, to_timestamp(u.due_at), %(owner)s
FROM unnest(%(ids)s::text[], %(due_ats)s::float8[]) AS u(trigger_id, due_at)
ON CONFLICT (trigger_id, due_at) DO NOTHING
RETURNING trigger_id, extract(epoch FROM due_at)::float8 AS due_at;

-- name: export_armed
-- Migration backfill and reconcile only: every row is an armed timer (a claimed row keeps its
-- past fire time until its commit replaces it).
SELECT id, extract(epoch FROM next_fire_at)::float8 AS fire_at, type, tenant_id, priority
FROM {schema}.triggers
ORDER BY id;

-- name: disarm
-- Migration reconcile --repair only (a timer the source store does not have): the row goes. A
-- batch holding it in flight finds its claim gone at commit (mark_polled is fenced) and
-- re-inserts nothing.
DELETE FROM {schema}.triggers WHERE id = ANY(%(ids)s::text[])
RETURNING id;

