-- pg_leased queries. Values travel as bind parameters (%(name)s), identifiers via {schema} (and
-- {schedule} in claim_due, the table it claims from).
-- Every per-row input is an array unnested in SQL: one statement per batch, never per row.

-- name: arm
-- Upsert by id. An existing id moves: new fire time, back to scheduled, lease dropped, and
-- version + 1 so that an in-flight batch holding the old version cannot re-arm over the move.
INSERT INTO {schema}.schedule AS s
       (id, tenant_id, type, priority, next_fire_at, armed_at, state, version, attempt, poll_state)
SELECT u.id, u.tenant_id, u.type, u.priority, u.fire_at, now(), 'scheduled', 0, 0, u.poll_state
FROM unnest(%(ids)s::text[], %(tenant_ids)s::text[], %(types)s::text[], %(priorities)s::int[],
            %(fire_ats)s::timestamptz[], %(poll_states)b::bytea[])
     AS u(id, tenant_id, type, priority, fire_at, poll_state)
ON CONFLICT (id) DO UPDATE SET
    tenant_id = excluded.tenant_id,
    type = excluded.type,
    priority = excluded.priority,
    next_fire_at = excluded.next_fire_at,
    armed_at = now(),
    state = 'scheduled',
    version = s.version + 1,
    attempt = 0,
    owner_id = NULL,
    lease_expires = NULL;

-- name: arm_states
-- split_state: the poll state is created at first arm; a move keeps the existing state.
INSERT INTO {schema}.state (id, poll_state)
SELECT u.id, u.poll_state
FROM unnest(%(ids)s::text[], %(poll_states)b::bytea[]) AS u(id, poll_state)
ON CONFLICT (id) DO NOTHING;

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
-- arm, fed from the staging table: the same upsert, the same move semantics (version + 1,
-- lease dropped, back to scheduled). ORDER BY id: row locks in id order, as commit_batch takes
-- them (the staging rows were copied sorted, so this sort finds them in order).
INSERT INTO {schema}.schedule AS s
       (id, tenant_id, type, priority, next_fire_at, armed_at, state, version, attempt, poll_state)
SELECT u.id, u.tenant_id, u.type, u.priority, u.fire_at, now(), 'scheduled', 0, 0,
       CASE WHEN %(state_in_row)s::bool THEN u.poll_state END  -- split_state: the state table's
  FROM arm_staging u
 ORDER BY u.id
ON CONFLICT (id) DO UPDATE SET
    tenant_id = excluded.tenant_id,
    type = excluded.type,
    priority = excluded.priority,
    next_fire_at = excluded.next_fire_at,
    armed_at = now(),
    state = 'scheduled',
    version = s.version + 1,
    attempt = 0,
    owner_id = NULL,
    lease_expires = NULL;

-- name: arm_bulk_states
-- arm_states from the staging table (split_state): created at first arm, a move keeps it.
INSERT INTO {schema}.state (id, poll_state)
SELECT u.id, u.poll_state
  FROM arm_staging u
 ORDER BY u.id
ON CONFLICT (id) DO NOTHING;

-- name: claim_due
-- The timer-wheel article's two-step claim (two-step-claim) in one short transaction, committed
-- before any work runs: lock candidates with FOR UPDATE SKIP LOCKED, then rank per tenant outside
-- the lock (Postgres forbids FOR UPDATE beside a window function) and mark the picked rows
-- running under this owner's lease. Unpicked rows are released at commit, untouched. What a
-- claim reads is bounded by limit * overselect + tenant_scan rows, whatever the backlog
-- (MEASUREMENTS.md, "The claim"). {schedule}: the table claimed from (pg_partitioned: a partition).
-- tenants: a loose index scan, the first tenant_scan tenants with a scheduled row
WITH RECURSIVE tenants(tenant_id, n) AS (
    (SELECT s.tenant_id, 1
       FROM {schedule} s
      WHERE s.state = 'scheduled'
      ORDER BY s.tenant_id
      LIMIT 1)
    UNION ALL
    SELECT nxt.tenant_id, t.n + 1
      FROM tenants t
     CROSS JOIN LATERAL (
           SELECT s.tenant_id
             FROM {schedule} s
            WHERE s.state = 'scheduled' AND s.tenant_id > t.tenant_id
            ORDER BY s.tenant_id
            LIMIT 1) nxt
     WHERE t.n < %(tenant_scan)s
-- share: each tenant's part of the over-select, at least one row, at most max_per_tenant
), share AS (
    SELECT least(%(max_per_tenant)s::bigint,
                 greatest(1, ceil(least(%(limit)s::bigint * %(overselect)s::bigint, 2147483647)::numeric
                                  / greatest(1, (SELECT count(*) FROM tenants))))::bigint) AS per_tenant
-- heads: each tenant's earliest due rows, locked (one tenant's backlog cannot fill the batch)
), heads AS (
    SELECT h.id, h.tenant_id, h.priority, h.due_key
      FROM tenants t
     CROSS JOIN LATERAL (
           SELECT s.id, s.tenant_id, s.priority, s.due_key
             FROM {schedule} s
            WHERE s.state = 'scheduled'
              -- tenant_id = t.tenant_id AND due_key <= now(), written as one range of
              -- schedule_tenant_due_idx (with a plain equality the planner chose the due index
              -- and filtered a big tenant's backlog per tenant).
              AND (s.tenant_id, s.due_key) >= (t.tenant_id, '-infinity'::timestamptz)
              AND (s.tenant_id, s.due_key) <= (t.tenant_id, now())
            ORDER BY s.tenant_id, s.due_key
            LIMIT (SELECT per_tenant FROM share)
              FOR UPDATE OF s SKIP LOCKED) h
     WHERE (SELECT yes FROM crowded)  -- defined below (WITH RECURSIVE allows it)
-- locked: the article's query, due rows in claim order; the multiply saturates at int4 max. A
-- lock re-checks the newest version: a row fired and re-armed since the snapshot is skipped.
), locked AS (
    SELECT s.id, s.tenant_id, s.priority, s.due_key
      FROM {schedule} s
     WHERE s.state = 'scheduled'
       AND s.due_key <= now()
     ORDER BY s.priority DESC, s.due_key ASC
     LIMIT least(%(limit)s::bigint * %(overselect)s::bigint, 2147483647)
       FOR UPDATE SKIP LOCKED
-- crowded: the time-ordered branch came back full, and its rows after the per-tenant cap no
-- longer fill the batch (a tenant has more in it than it may take): only then can the other
-- tenants' earliest rows add anything, since every row heads could add sorts after all of
-- locked's. Otherwise heads is not run at all: its condition is a one-time filter, so neither
-- the tenant scan nor its two probes per tenant execute (they were most of a claim's cost at
-- the production shape: MEASUREMENTS.md, "Waking when work is due").
), crowded AS (
    SELECT (SELECT count(*) FROM locked) >= least(%(limit)s::bigint * %(overselect)s::bigint, 2147483647)
           AND (SELECT coalesce(sum(least(n, %(max_per_tenant)s::bigint)), 0)
                  FROM (SELECT count(*) AS n FROM locked l GROUP BY l.tenant_id) per_tenant) < %(limit)s::bigint
           AS yes
), candidates AS (
    SELECT * FROM locked
    UNION
    SELECT * FROM heads
), ranked AS (
    SELECT c.id, c.priority, c.due_key,
           row_number() OVER (PARTITION BY c.tenant_id
                              ORDER BY c.priority DESC, c.due_key ASC) AS rn
      FROM candidates c
), picked AS (
    SELECT r.id
      FROM ranked r
     WHERE r.rn <= %(max_per_tenant)s
     ORDER BY r.priority DESC, r.due_key ASC
     LIMIT %(limit)s
-- By primary key (= ANY of an array): a join let the planner scan the whole due range.
), claimed AS (
    UPDATE {schedule} s
       SET state = 'running',
           owner_id = %(owner)s,
           lease_expires = now() + make_interval(secs => %(lease_s)s),
           attempt = s.attempt + 1
     WHERE s.id = ANY (ARRAY(SELECT p.id FROM picked p))
    RETURNING s.id, s.tenant_id, s.type, s.priority,
              coalesce(s.next_fire_at, s.armed_at) AS due_at,  -- NULL fire time: due when armed
              s.armed_at, s.version, s.attempt, s.poll_state
)
-- The batch's poll states come with it (batch-200: one statement for the whole batch, not a
-- lookup of its own), from the state table (split_state) or the row. Times travel as float8
-- epoch seconds, cheaper than timestamptz to decode and encode: a double is within 0.12 us of
-- a 2026 microsecond, so commit_batch's to_timestamp, which rounds to the microsecond, gives
-- back exactly the timestamptz claimed (the effect key).
SELECT c.id, c.tenant_id, c.type, c.priority,
       date_part('epoch', c.due_at), date_part('epoch', c.armed_at), c.version, c.attempt,
       CASE WHEN %(split_state)s::bool THEN t.poll_state ELSE c.poll_state END
  FROM claimed c
  LEFT JOIN {schema}.state t ON %(split_state)s::bool AND t.id = c.id;

-- name: next_due
-- After an empty claim: the earliest fire time of any scheduled row, so the claim loop can sleep
-- until then (capped at idle_s) instead of polling every tick. The due index leads with
-- priority, so min(due_key) alone would read the whole index: a loose scan over the priorities
-- instead, one probe for the next priority and one for its earliest row each (one priority in
-- the usual case: two probes). -infinity (a NULL fire time) is due now.
WITH RECURSIVE priorities(p) AS (
    (SELECT s.priority FROM {schedule} s WHERE s.state = 'scheduled' ORDER BY s.priority DESC LIMIT 1)
    UNION ALL
    SELECT (SELECT s.priority
              FROM {schedule} s
             WHERE s.state = 'scheduled' AND s.priority < q.p
             ORDER BY s.priority DESC
             LIMIT 1)
      FROM priorities q
     WHERE q.p IS NOT NULL
)
SELECT extract(epoch FROM min((SELECT s.due_key
              FROM {schedule} s
             WHERE s.state = 'scheduled' AND s.priority = q.p
             ORDER BY s.priority DESC, s.due_key
             LIMIT 1)))::float8
  FROM priorities q
 WHERE q.p IS NOT NULL;

-- name: notify_due
-- arm() of a timer due within idle_s: wakes the claim loops of every process listening on this
-- store's channel (delivered at the arm's commit). The payload is empty: a woken loop claims.
SELECT pg_notify(%(channel)s, '');

-- name: extend_leases
-- Heartbeat (heartbeat-lease: "make the live case produce a signal"): push the lease of every row
-- this owner still holds. Touches only lease_expires, which no index covers: a HOT update
-- when the page has room (fillfactor). SKIP LOCKED: a heartbeat never waits, so it cannot
-- deadlock with this owner's own commit (which is about to release the row anyway), an arm()
-- moving the row, or the sweeper taking an already lapsed one.
WITH mine AS (
    SELECT id
      FROM {schema}.schedule
     WHERE id = ANY(%(ids)s::text[])
       AND state = 'running'
       AND owner_id = %(owner)s
     ORDER BY id
       FOR UPDATE SKIP LOCKED
)
UPDATE {schema}.schedule s
   SET lease_expires = now() + make_interval(secs => %(lease_s)s)
  FROM mine
 WHERE s.id = mine.id;

-- name: sweep_expired_leases
-- The durable-workflows article's sweeper: rows whose owner went silent go back to scheduled, keeping their fire
-- time (so they are due at once) and attempt count (the next delivery is attempt + 1). Safe on
-- every node at once: SKIP LOCKED, and the lease is re-checked on the row being updated.
WITH expired AS (
    SELECT s.id
      FROM {schema}.schedule s
     WHERE s.state = 'running'
       AND s.lease_expires < now()
       FOR UPDATE SKIP LOCKED
)
UPDATE {schema}.schedule s
   SET state = 'scheduled',
       owner_id = NULL,
       lease_expires = NULL
  FROM expired
 WHERE s.id = expired.id
   AND s.state = 'running'
   AND s.lease_expires < now()
RETURNING s.id;

-- name: commit_batch
-- One statement, so one transaction: re-arm, poll state and effects of a whole batch.
--   rearmed: only rows this claim still holds (owner, version and attempt unchanged). A row that
--     was moved by arm() while in flight has a newer version: the move wins over this re-arm.
--     A row swept away from a dead-looking owner has another owner or attempt: ignored.
--   states (split_state on): the new poll state of the re-armed rows, by primary key. A NULL
--     entry means unchanged: no write at all (skip_unchanged_state).
--   effects: checkpoint-key; RETURNING tells which were newly recorded (delivered).
WITH batch AS (
    SELECT b.id, b.version, b.attempt, to_timestamp(b.next_fire_s) AS next_fire_at, b.finished,
           b.poll_state, to_timestamp(b.effect_due_s) AS effect_due
      FROM unnest(%(ids)s::text[], %(versions)s::bigint[], %(attempts)s::int[],
                  %(next_fire_ats)s::float8[], %(finished)s::bool[],
                  %(poll_states)b::bytea[], %(effect_dues)s::float8[])
           AS b(id, version, attempt, next_fire_s, finished, poll_state, effect_due_s)
), locked AS (
    -- Row locks in id order, as arm() takes them: two writers of overlapping rows queue
    -- instead of deadlocking.
    SELECT s.id
      FROM {schema}.schedule s
     WHERE s.id = ANY(%(ids)s::text[])
     ORDER BY s.id
       FOR UPDATE
), rearmed AS (
    UPDATE {schema}.schedule s
       SET state = CASE WHEN b.finished THEN 'done' ELSE 'scheduled' END,
           next_fire_at = b.next_fire_at,
           armed_at = now(),
           version = s.version + 1,
           attempt = 0,
           owner_id = NULL,
           lease_expires = NULL
      FROM batch b
     WHERE s.id = b.id
       AND s.owner_id = %(owner)s
       AND s.version = b.version
       AND s.attempt = b.attempt
       -- Every lock first: a qual without row columns is a one-time filter, evaluated once
       -- before the first row is updated. Joined to locked instead, the planner looped over
       -- the CTE per row (n² comparisons: 28 of 34 ms for 400 rows).
       AND (SELECT count(*) FROM locked) >= 0
    RETURNING s.id
), states AS (
    UPDATE {schema}.state t
       SET poll_state = b.poll_state
      FROM batch b
      JOIN rearmed r ON r.id = b.id
     WHERE t.id = b.id
       AND b.poll_state IS NOT NULL
    RETURNING t.id
), effects AS (
    INSERT INTO {schema}.effects (trigger_id, due_at, worker)
    SELECT b.id, b.effect_due, %(owner)s
      FROM batch b
     WHERE b.effect_due IS NOT NULL
    ON CONFLICT DO NOTHING
    RETURNING trigger_id
)
SELECT (SELECT coalesce(array_agg(trigger_id), '{{}}') FROM effects) AS delivered,
       (SELECT count(*) FROM rearmed) AS rearmed,
       (SELECT count(*) FROM states) AS states_written;

-- name: commit_batch_inline
-- commit_batch with the poll state in the schedule row (split_state off): the state rides on
-- the re-arm update. coalesce keeps the old value (same TOAST pointer: no TOAST rewrite).
WITH batch AS (
    SELECT b.id, b.version, b.attempt, to_timestamp(b.next_fire_s) AS next_fire_at, b.finished,
           b.poll_state, to_timestamp(b.effect_due_s) AS effect_due
      FROM unnest(%(ids)s::text[], %(versions)s::bigint[], %(attempts)s::int[],
                  %(next_fire_ats)s::float8[], %(finished)s::bool[],
                  %(poll_states)b::bytea[], %(effect_dues)s::float8[])
           AS b(id, version, attempt, next_fire_s, finished, poll_state, effect_due_s)
), locked AS (
    -- Row locks in id order, as arm() takes them: two writers of overlapping rows queue
    -- instead of deadlocking.
    SELECT s.id
      FROM {schema}.schedule s
     WHERE s.id = ANY(%(ids)s::text[])
     ORDER BY s.id
       FOR UPDATE
), rearmed AS (
    UPDATE {schema}.schedule s
       SET state = CASE WHEN b.finished THEN 'done' ELSE 'scheduled' END,
           next_fire_at = b.next_fire_at,
           armed_at = now(),
           version = s.version + 1,
           attempt = 0,
           owner_id = NULL,
           lease_expires = NULL,
           poll_state = coalesce(b.poll_state, s.poll_state)
      FROM batch b
     WHERE s.id = b.id
       AND s.owner_id = %(owner)s
       AND s.version = b.version
       AND s.attempt = b.attempt
       -- Every lock first: a qual without row columns is a one-time filter, evaluated once
       -- before the first row is updated. Joined to locked instead, the planner looped over
       -- the CTE per row (n² comparisons: 28 of 34 ms for 400 rows).
       AND (SELECT count(*) FROM locked) >= 0
    RETURNING s.id, b.poll_state IS NOT NULL AS state_written
), effects AS (
    INSERT INTO {schema}.effects (trigger_id, due_at, worker)
    SELECT b.id, b.effect_due, %(owner)s
      FROM batch b
     WHERE b.effect_due IS NOT NULL
    ON CONFLICT DO NOTHING
    RETURNING trigger_id
)
SELECT (SELECT coalesce(array_agg(trigger_id), '{{}}') FROM effects) AS delivered,
       (SELECT count(*) FROM rearmed) AS rearmed,
       (SELECT count(*) FROM rearmed WHERE state_written) AS states_written;

-- name: export_armed
-- Migration backfill and reconcile only: scheduled and running rows (a running row is armed
-- until its commit re-arms or finishes it).
SELECT id, next_fire_at, type, tenant_id, priority
  FROM {schema}.schedule
 WHERE state <> 'done'
 ORDER BY id;

-- name: disarm
-- Migration reconcile --repair only (a timer the source store does not have): the row becomes
-- a finished ('done') row, outside the partial indexes, and version + 1 so that a batch holding
-- it in flight cannot re-arm it at commit (commit_batch checks the version).
UPDATE {schema}.schedule
   SET state = 'done', version = version + 1, attempt = 0, owner_id = NULL, lease_expires = NULL
 WHERE id = ANY(%(ids)s::text[]) AND state <> 'done'
RETURNING id;
