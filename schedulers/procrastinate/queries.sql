-- procrastinate: the reads this design makes of procrastinate's own job table (in the run's
-- schema, created by procrastinate's installer). Writes to it go through procrastinate's API.

-- name: pending_jobs
-- The todo job of each trigger (at most one: procrastinate's queueing lock is unique among todo
-- jobs, an index procrastinate keeps), so that a move or a disarm can cancel it by id.
SELECT id FROM {schema}.procrastinate_jobs
WHERE queueing_lock = ANY(%(ids)s::text[]) AND status = 'todo';

-- name: export_armed
-- Armed rows whose current version has a live job (todo, or doing: claimed and in flight).
SELECT t.id, extract(epoch FROM t.fire_at)::float8, t.type, t.tenant_id, t.priority
FROM {schema}.trigger t
WHERE t.fire_at IS NOT NULL AND EXISTS (
    SELECT 1 FROM {schema}.procrastinate_jobs j
    WHERE j.queueing_lock = t.id AND j.status IN ('todo', 'doing')
      AND (j.args ->> 'version')::bigint = t.version
)
ORDER BY t.id;
