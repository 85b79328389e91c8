-- pgqueuer: the reads this design makes of PgQueuer's own queue table (in the run's schema,
-- created by PgQueuer's installer). Writes to it go through PgQueuer's API.

-- name: pending_jobs
-- The queued job of each superseded (trigger, version), by its dedupe key (PgQueuer keeps a
-- unique index on it among queued and picked jobs), so that a move or a disarm can cancel it.
SELECT id FROM {schema}.pgqueuer
WHERE dedupe_key = ANY(%(keys)s::text[]) AND status = 'queued';

-- name: export_armed
-- Armed rows whose current version has a live job (queued, or picked: claimed and in flight).
SELECT t.id, extract(epoch FROM t.fire_at)::float8, t.type, t.tenant_id, t.priority
FROM {schema}.trigger t
WHERE t.fire_at IS NOT NULL AND EXISTS (
    SELECT 1 FROM {schema}.pgqueuer j
    WHERE j.dedupe_key = t.id || '@' || t.version AND j.status IN ('queued', 'picked')
)
ORDER BY t.id;
