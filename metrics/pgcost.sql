-- What a run costs Postgres, read from the server's statistics (metrics/pgcost.py). Every
-- statement carries the marker timerbench-sampler, so pg_stat_statements files them apart from
-- the designs' own. {schema} is the schema of the extension a block calls (pg_extension).

-- name: server_counters
-- Server-wide, cumulative (Postgres 18): WAL records, full-page images and bytes from
-- pg_stat_wal; bytes written by every backend type (relation writes and extensions, WAL writes
-- and WAL segment initialisation) from pg_stat_io; completed checkpoints.
SELECT /* timerbench-sampler */
       w.wal_records::float8 AS wal_records,
       w.wal_fpi::float8 AS wal_fpi,
       w.wal_bytes::float8 AS wal_bytes,
       (SELECT sum(coalesce(io.write_bytes, 0) + coalesce(io.extend_bytes, 0)) FROM pg_stat_io io)::float8
           AS io_write_bytes,
       (SELECT c.num_done FROM pg_stat_checkpointer c)::float8 AS checkpoints
FROM pg_stat_wal w

-- name: server_counters_wal
-- Postgres 14-17: pg_stat_wal only (pg_stat_io counts bytes from 18 on).
SELECT /* timerbench-sampler */
       w.wal_records::float8 AS wal_records,
       w.wal_fpi::float8 AS wal_fpi,
       w.wal_bytes::float8 AS wal_bytes
FROM pg_stat_wal w

-- name: server_version_num
SELECT /* timerbench-sampler */ current_setting('server_version_num')::int AS version_num, pg_backend_pid() AS pid

-- name: checkpoint
-- Before the measured window: every design's window starts right after a checkpoint, so the
-- full-page images of first touches land in every window alike, not in whichever run a timed
-- checkpoint happened to hit.
CHECKPOINT

-- name: statements_reset
-- At the window's start, on the embedded server only, and only while no other run's window is
-- open (window_try_reset_lock): this database's entries (other databases' are left alone).
-- The window's cost is the difference of two reads either way; the reset keeps the first read
-- small and the entries of earlier runs from filling pg_stat_statements.max.
SELECT /* timerbench-sampler */ {schema}.pg_stat_statements_reset(
    0::oid, (SELECT d.oid FROM pg_database d WHERE d.datname = current_database()), 0::bigint)

-- name: window_try_reset_lock
-- The right to reset: only while no other run's window is open on this database (each open
-- window holds the same advisory lock shared, and the lock is per database). A reset inside
-- another run's window would drop the calls it counted since its start.
SELECT /* timerbench-sampler */ pg_try_advisory_lock(%(key)s::bigint)

-- name: window_hold_lock
-- Held, shared, from the window's start read to its end read: no other run resets meanwhile.
SELECT /* timerbench-sampler */ pg_advisory_lock_shared(%(key)s::bigint)

-- name: window_drop_reset_lock
SELECT /* timerbench-sampler */ pg_advisory_unlock(%(key)s::bigint)

-- name: statements
-- This database's top-level statements, cumulative; the window's cost is the difference of two
-- reads (an entry that was evicted and made again in between counts from its new start).
SELECT /* timerbench-sampler */
       s.userid::bigint AS userid, s.toplevel, s.queryid, s.query,
       s.calls::float8 AS calls, s.rows::float8 AS rows,
       s.total_exec_time AS total_exec_ms, s.total_plan_time AS total_plan_ms,
       s.shared_blks_hit::float8 AS shared_blks_hit, s.shared_blks_read::float8 AS shared_blks_read,
       s.shared_blks_dirtied::float8 AS shared_blks_dirtied, s.shared_blks_written::float8 AS shared_blks_written,
       s.wal_records::float8 AS wal_records, s.wal_fpi::float8 AS wal_fpi, s.wal_bytes::float8 AS wal_bytes
FROM {schema}.pg_stat_statements(true) s
WHERE s.dbid = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database())

-- name: pgstattuple
-- Exact tuple counts of one table (a full scan: only at the end of a run, never while it is
-- measured), beside the statistics' estimate read at the same moment.
SELECT /* timerbench-sampler */
       t.table_len::float8 AS table_len, t.tuple_count::float8 AS tuple_count,
       t.dead_tuple_count::float8 AS dead_tuple_count, t.dead_tuple_len::float8 AS dead_tuple_len,
       t.dead_tuple_percent::float8 AS dead_tuple_percent,
       t.free_space::float8 AS free_space, t.free_percent::float8 AS free_percent,
       (SELECT s.n_dead_tup FROM pg_stat_all_tables s WHERE s.relid = %(relid)s::oid)::float8 AS n_dead_tup,
       (SELECT s.n_live_tup FROM pg_stat_all_tables s WHERE s.relid = %(relid)s::oid)::float8 AS n_live_tup
FROM {schema}.pgstattuple(%(relid)s::oid::regclass) t
