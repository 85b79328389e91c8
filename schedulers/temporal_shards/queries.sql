-- temporal_shards: every statement the design runs. All trigger access is by primary key.

-- name: ring_init
-- The initial shard count, unless a controller already grew it.
INSERT INTO {schema}.ring (shard_count) VALUES (%(shards)s) ON CONFLICT (singleton) DO NOTHING;

-- name: ring_read
SELECT shard_count, grows FROM {schema}.ring;

-- name: ring_settle
-- Seconds until the last grow has settled (0 when it has, or when the ring never grew).
SELECT greatest(0, extract(epoch FROM grown_at + make_interval(secs => %(settle_s)s) - now()))::float8
FROM {schema}.ring;

-- name: ring_grow
-- Grow only (never shrink): timers may already live on the higher shards.
UPDATE {schema}.ring SET shard_count = %(shards)s, grows = grows + 1, grown_at = now()
WHERE shard_count < %(shards)s
RETURNING shard_count;

-- name: ring_split
-- A shard whose Continue-As-New payload passed its split mark adds one shard (whatever the
-- controller does meanwhile: both only grow).
UPDATE {schema}.ring SET shard_count = shard_count + 1, grows = grows + 1, grown_at = now()
RETURNING shard_count;

-- name: arm_upsert
-- Arm or move: a new fire time bumps the version (older copies on any shard go stale) and
-- drops any lease, since the newer arm wins over an in-flight fire; no batch answers for the
-- row any more (committed_batch: see export_armed).
INSERT INTO {schema}.trigger AS t (id, type, tenant_id, priority, fire_at, armed_at, version, attempt)
SELECT a.id, a.type, a.tenant_id, a.priority, to_timestamp(a.fire_at), to_timestamp(%(armed_at)s), 1, 0
FROM unnest(%(ids)s::text[], %(types)s::text[], %(tenants)s::text[], %(priorities)s::int[], %(fire_ats)s::float8[])
     AS a(id, type, tenant_id, priority, fire_at)
ON CONFLICT (id) DO UPDATE
SET fire_at = EXCLUDED.fire_at, armed_at = EXCLUDED.armed_at, version = t.version + 1, attempt = 0,
    owner = NULL, lease_expires = NULL, type = EXCLUDED.type, tenant_id = EXCLUDED.tenant_id,
    priority = EXCLUDED.priority, committed_batch = NULL
RETURNING t.id, t.version, (t.xmax = 0) AS inserted;

-- name: arm_upsert_row
-- arm_upsert with the poll state in the row (state_in_row): a new trigger's first state goes in
-- with its row, one write instead of an insert and an update; a moved one keeps its state.
INSERT INTO {schema}.trigger AS t (id, type, tenant_id, priority, fire_at, armed_at, version, attempt, state)
SELECT a.id, a.type, a.tenant_id, a.priority, to_timestamp(a.fire_at), to_timestamp(%(armed_at)s), 1, 0, a.state
FROM unnest(%(ids)s::text[], %(types)s::text[], %(tenants)s::text[], %(priorities)s::int[], %(fire_ats)s::float8[],
            %(states)b::bytea[])
     AS a(id, type, tenant_id, priority, fire_at, state)
ON CONFLICT (id) DO UPDATE
SET fire_at = EXCLUDED.fire_at, armed_at = EXCLUDED.armed_at, version = t.version + 1, attempt = 0,
    owner = NULL, lease_expires = NULL, type = EXCLUDED.type, tenant_id = EXCLUDED.tenant_id,
    priority = EXCLUDED.priority, committed_batch = NULL
RETURNING t.id, t.version, (t.xmax = 0) AS inserted;

-- name: state_insert
-- Initial poll state for triggers the arm just created.
INSERT INTO {schema}.trigger_state (id, state)
SELECT * FROM unnest(%(ids)s::text[], %(states)b::bytea[])
ON CONFLICT (id) DO NOTHING;

-- name: claim
-- Claim a batch by key: only rows still at the version the shard fired (a moved timer's old
-- copy claims nothing) and not leased by a live owner. Returns the poll state with each row.
WITH b AS (
    SELECT * FROM unnest(%(ids)s::text[], %(versions)s::bigint[]) AS b(id, version)
), claimed AS (
    UPDATE {schema}.trigger t
    SET owner = %(owner)s,
        lease_expires = now() + make_interval(secs => %(lease_s)s),
        attempt = t.attempt + 1
    FROM b
    WHERE t.id = b.id AND t.version = b.version AND t.fire_at IS NOT NULL
      AND (t.owner IS NULL OR t.lease_expires < now() OR t.owner = %(owner)s)
    RETURNING t.id, t.tenant_id, t.type, t.priority, t.attempt,
              extract(epoch FROM t.fire_at)::float8 AS due_at,
              extract(epoch FROM t.armed_at)::float8 AS armed_at
)
SELECT c.id, c.tenant_id, c.type, c.priority, c.attempt, c.due_at, c.armed_at, s.state
FROM claimed c LEFT JOIN {schema}.trigger_state s ON s.id = c.id;

-- name: claim_row_state
-- The claim with the state in the row (state_in_row): sets the lease only, so the state's TOAST
-- chunks stay as they are (heap-halved: "Claim sets a lease").
WITH b AS (
    SELECT * FROM unnest(%(ids)s::text[], %(versions)s::bigint[]) AS b(id, version)
)
UPDATE {schema}.trigger t
SET owner = %(owner)s,
    lease_expires = now() + make_interval(secs => %(lease_s)s),
    attempt = t.attempt + 1
FROM b
WHERE t.id = b.id AND t.version = b.version AND t.fire_at IS NOT NULL
  AND (t.owner IS NULL OR t.lease_expires < now() OR t.owner = %(owner)s)
RETURNING t.id, t.tenant_id, t.type, t.priority, t.attempt,
          extract(epoch FROM t.fire_at)::float8 AS due_at,
          extract(epoch FROM t.armed_at)::float8 AS armed_at,
          t.state;

-- name: unclaimed_status
-- Why the rows of a batch were not claimed: held by a live lease (wait for it to lapse), or
-- already committed and re-armed by an earlier attempt of this same batch (re-send the re-arm).
-- Anything else is stale (moved or finished) and is dropped.
WITH b AS (
    SELECT * FROM unnest(%(ids)s::text[], %(versions)s::bigint[]) AS b(id, version)
)
SELECT t.id,
       CASE WHEN t.version = b.version THEN 'leased' ELSE 'committed' END AS status,
       extract(epoch FROM (t.lease_expires - now()))::float8 AS lease_left_s,
       t.version, t.type, t.tenant_id, t.priority,
       extract(epoch FROM t.fire_at)::float8 AS fire_at,
       extract(epoch FROM t.armed_at)::float8 AS armed_at
FROM {schema}.trigger t JOIN b ON t.id = b.id
WHERE t.fire_at IS NOT NULL
  AND ((t.version = b.version AND t.owner IS NOT NULL AND t.owner <> %(owner)s AND t.lease_expires >= now())
       OR (t.version = b.version + 1 AND t.owner IS NULL AND t.committed_batch = %(batch)s));

-- name: extend_leases
-- Heartbeat: a slow owner that is alive keeps its rows.
UPDATE {schema}.trigger SET lease_expires = now() + make_interval(secs => %(lease_s)s)
WHERE id = ANY(%(ids)s::text[]) AND owner = %(owner)s;

-- name: release
-- Graceful stop only (never on a crash): hand the rows back at once.
UPDATE {schema}.trigger SET owner = NULL, lease_expires = NULL
WHERE id = ANY(%(ids)s::text[]) AND owner = %(owner)s;

-- name: record_effects
-- Effects under (trigger_id, due_at): a duplicate fire returns nothing here (not delivered).
INSERT INTO {schema}.effects (trigger_id, due_at)
SELECT id, to_timestamp(due_at) FROM unnest(%(ids)s::text[], %(dues)s::float8[]) AS e(id, due_at)
ON CONFLICT (trigger_id, due_at) DO NOTHING
RETURNING trigger_id;

-- name: write_state
-- The poll state of every committed fire (toast-third), or with skip_unchanged_state only of the
-- fires whose poll changed it. Either way a new value: all of its TOAST chunks are written anew.
UPDATE {schema}.trigger_state s SET state = u.state
FROM unnest(%(ids)s::text[], %(states)b::bytea[]) AS u(id, state)
WHERE s.id = u.id;

-- name: commit_rows
-- Commit and re-arm in the row: next fire time (NULL: finished), new version, lease dropped.
-- Only rows this owner still holds: a timer moved while in flight keeps its newer arm.
UPDATE {schema}.trigger t
SET fire_at = to_timestamp(u.next_fire_at), armed_at = to_timestamp(%(now)s), version = t.version + 1,
    attempt = 0, owner = NULL, lease_expires = NULL, committed_batch = %(batch)s
FROM unnest(%(ids)s::text[], %(next_fire_ats)s::float8[]) AS u(id, next_fire_at)
WHERE t.id = u.id AND t.owner = %(owner)s
RETURNING t.id, t.version, t.type, t.tenant_id, t.priority,
          extract(epoch FROM t.fire_at)::float8 AS fire_at,
          extract(epoch FROM t.armed_at)::float8 AS armed_at;

-- name: commit_row_state
-- commit_rows with the state in the row (state_in_row): one heap write commits, re-arms and
-- writes the poll state ("commit rewrites the poll state"). A NULL state keeps the old value, and
-- Postgres then keeps its TOAST chunks (skip_unchanged_state); a value sent is stored anew.
UPDATE {schema}.trigger t
SET fire_at = to_timestamp(u.next_fire_at), armed_at = to_timestamp(%(now)s), version = t.version + 1,
    attempt = 0, owner = NULL, lease_expires = NULL, committed_batch = %(batch)s,
    state = coalesce(u.state, t.state)
FROM unnest(%(ids)s::text[], %(next_fire_ats)s::float8[], %(states)b::bytea[]) AS u(id, next_fire_at, state)
WHERE t.id = u.id AND t.owner = %(owner)s
RETURNING t.id, t.version, t.type, t.tenant_id, t.priority,
          extract(epoch FROM t.fire_at)::float8 AS fire_at,
          extract(epoch FROM t.armed_at)::float8 AS armed_at;

-- name: util_report
-- A shard's periodic report: timers held, history so far, its Continue-As-New payload measured
-- now (and the largest so far), splits and postponed Continue-As-New since its last report.
INSERT INTO {schema}.shard_util AS u (shard, timers, utilisation, history_length, payload_bytes,
                                      max_payload_bytes, splits, can_postponed, reported_at)
VALUES (%(shard)s, %(timers)s, %(utilisation)s, %(history_length)s, %(payload_bytes)s, %(payload_bytes)s,
        %(splits)s, %(can_postponed)s, now())
ON CONFLICT (shard) DO UPDATE
SET timers = EXCLUDED.timers, utilisation = EXCLUDED.utilisation,
    history_length = EXCLUDED.history_length, payload_bytes = EXCLUDED.payload_bytes,
    max_payload_bytes = greatest(u.max_payload_bytes, EXCLUDED.payload_bytes),
    splits = u.splits + EXCLUDED.splits, can_postponed = u.can_postponed + EXCLUDED.can_postponed,
    reported_at = now();

-- name: util_continued
-- A shard continued as new at this history length, carrying a payload of this size.
INSERT INTO {schema}.shard_util AS u (shard, timers, utilisation, history_length, can_count, last_can_history,
                                      max_can_history, payload_bytes, max_payload_bytes, last_can_payload_bytes,
                                      max_can_payload_bytes, splits, can_postponed)
VALUES (%(shard)s, %(timers)s, %(utilisation)s, %(history_length)s, 1, %(history_length)s, %(history_length)s,
        %(payload_bytes)s, %(payload_bytes)s, %(payload_bytes)s, %(payload_bytes)s, %(splits)s, %(can_postponed)s)
ON CONFLICT (shard) DO UPDATE
SET timers = EXCLUDED.timers, utilisation = EXCLUDED.utilisation, history_length = 0,
    can_count = u.can_count + 1, last_can_history = EXCLUDED.last_can_history,
    max_can_history = greatest(u.max_can_history, EXCLUDED.max_can_history),
    payload_bytes = EXCLUDED.payload_bytes,
    max_payload_bytes = greatest(u.max_payload_bytes, EXCLUDED.payload_bytes),
    last_can_payload_bytes = EXCLUDED.payload_bytes,
    max_can_payload_bytes = greatest(u.max_can_payload_bytes, EXCLUDED.payload_bytes),
    splits = u.splits + EXCLUDED.splits, can_postponed = u.can_postponed + EXCLUDED.can_postponed,
    reported_at = now();

-- name: util_forwarded
-- A shard is forwarding this many timers: its reported count drops before they leave (a retry
-- drops it again; the shard's next report restores the truth).
UPDATE {schema}.shard_util
SET timers = greatest(0, timers - %(moved)s),
    utilisation = CASE WHEN timers > 0 THEN utilisation * greatest(0, timers - %(moved)s) / timers ELSE 0 END
WHERE shard = %(shard)s;

-- name: loads_read
-- What callers place by: each shard's last reported count and when it reported.
SELECT shard, timers, extract(epoch FROM reported_at)::float8 AS reported_at FROM {schema}.shard_util;

-- name: util_read
SELECT shard, timers, utilisation, history_length, can_count, last_can_history, max_can_history,
       payload_bytes, max_payload_bytes, last_can_payload_bytes, max_can_payload_bytes, splits, can_postponed
FROM {schema}.shard_util ORDER BY shard;

-- name: export_armed
-- Migration backfill and reconcile only; never on the dispatch path. The rows with a fire time,
-- their version (a shard must hold this version for the timer to be armed) and whether a batch
-- still answers for them (in flight): under a live lease (it re-arms them at commit), or
-- committed by it less than a lease ago, its re-arm signal on the way (held to share a signal
-- with other batches, or re-sent by the batch's retry after a crash).
SELECT id, extract(epoch FROM fire_at)::float8 AS fire_at, type, tenant_id, priority, version,
       ((owner IS NOT NULL AND lease_expires > now())
        OR (owner IS NULL AND committed_batch IS NOT NULL
            AND armed_at > now() - make_interval(secs => %(lease_s)s))) AS in_flight
FROM {schema}.trigger WHERE fire_at IS NOT NULL;

-- name: disarm
-- Migration reconcile --repair only (a timer the source store does not have). There is no
-- cancel operation in this design (no-cancel); this is the version fence used as one: the row
-- loses its fire time and its version moves on, so every copy a shard holds is stale (a batch
-- claims only rows at the version the shard fired) and an in-flight batch's commit, which
-- needs its lease, finds none.
UPDATE {schema}.trigger
   SET fire_at = NULL, version = version + 1, attempt = 0, owner = NULL, lease_expires = NULL,
       committed_batch = NULL
 WHERE id = ANY(%(ids)s::text[]) AND fire_at IS NOT NULL
RETURNING id;
