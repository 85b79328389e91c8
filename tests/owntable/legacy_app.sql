-- A "legacy" timer table as a team might have built it (tests/owntable/legacy_app.py): its own
-- column names, a surrogate key that changes on every re-insert, an index for every question
-- someone once asked, wide encrypted state in TOAST, and the Composio article's poll cycle: claim (update),
-- poll (update), delete, re-insert for the next run.

-- name: create_table
CREATE TABLE {schema}.poll_jobs (
    job_pk      bigserial   PRIMARY KEY,                -- surrogate: new on every re-insert
    job_key     text        NOT NULL,                   -- the trigger's identity, kept across re-inserts
    account_ref text        NOT NULL,                   -- the tenant
    run_after   timestamptz NOT NULL,                   -- when it is due
    every_secs  integer     NOT NULL,                   -- its period
    locked_by   text,
    locked_at   timestamptz,
    last_run_at timestamptz,
    cursor_blob bytea,                                  -- encrypted provider cursor, ~4 KB: TOASTed
    created_at  timestamptz NOT NULL DEFAULT now()
)

-- name: create_indexes
CREATE UNIQUE INDEX poll_jobs_job_key ON {schema}.poll_jobs (job_key);
CREATE INDEX poll_jobs_run_after ON {schema}.poll_jobs (run_after);
CREATE INDEX poll_jobs_account ON {schema}.poll_jobs (account_ref);
CREATE INDEX poll_jobs_locked_by ON {schema}.poll_jobs (locked_by);
CREATE INDEX poll_jobs_last_run ON {schema}.poll_jobs (last_run_at);
CREATE INDEX poll_jobs_created ON {schema}.poll_jobs (created_at)

-- name: seed_rows
INSERT INTO {schema}.poll_jobs (job_key, account_ref, run_after, every_secs, cursor_blob)
SELECT k, a, now() + make_interval(secs => f), e, b
FROM unnest(%(keys)s::text[], %(accounts)s::text[], %(first_s)s::float8[], %(every)s::int[], %(blobs)s::bytea[])
     AS t(k, a, f, e, b)

-- name: claim
-- the tick: up to 800 due rows, oldest first, claimed by writing locked_by (indexed: never HOT)
WITH due AS (
    SELECT job_pk FROM {schema}.poll_jobs
    WHERE run_after <= now() AND locked_by IS NULL
    ORDER BY run_after
    LIMIT 800
    FOR UPDATE SKIP LOCKED
)
UPDATE {schema}.poll_jobs p SET locked_by = %(worker)s, locked_at = now()
FROM due WHERE p.job_pk = due.job_pk
RETURNING p.job_pk

-- name: polled
-- the poll's result (last_run_at is indexed too: never HOT)
UPDATE {schema}.poll_jobs SET last_run_at = now() WHERE job_pk = ANY(%(pks)s::bigint[])

-- name: rearm
-- delete the row and insert the next run, due one period after this one (fixed cadence)
WITH gone AS (
    DELETE FROM {schema}.poll_jobs WHERE job_pk = ANY(%(pks)s::bigint[])
    RETURNING job_key, account_ref, run_after, every_secs, cursor_blob
)
INSERT INTO {schema}.poll_jobs (job_key, account_ref, run_after, every_secs, cursor_blob)
SELECT job_key, account_ref, run_after + make_interval(secs => every_secs), every_secs, cursor_blob FROM gone
