-- pg_partitioned schema: pg_leased's tables (schedulers/pg_leased/schema.sql), with the two that
-- churn, schedule and state, split by hash of the trigger id into {partitions} partitions of one
-- database (the Composio article's rejected "splitting them within one database").
--
-- Setup first renders pg_leased's schema.sql into this session's pg_temp: a template no other
-- session sees, dropped at the end of setup. The parents below are created LIKE it, so columns,
-- defaults, the generated due_key, the CHECK, column storage and the partial indexes are
-- pg_leased's by construction; this file holds only what partitioning changes. Per-table storage
-- parameters (fillfactor, toast_tuple_target, autovacuum) cannot be set on a partitioned parent:
-- setup applies pg_leased's own blocks for them to every partition.
--
-- Blocks run in file order; those named *_partition run once per partition, with {schedule} /
-- {state} naming that partition and {remainder} its hash remainder, after the others.

-- name: schedule_parent
-- Split by hash of id, the primary key, so arm, commit_batch, the heartbeat, the sweeper, stats
-- and export run pg_leased's statements unchanged against the parent (Postgres routes each row).
-- Only claim_due names a partition (it reads the batch's states through the parent). The partial indexes come from the template
-- as partitioned indexes: every partition has its own, as small as its share of the rows.
CREATE TABLE IF NOT EXISTS {schema}.schedule (LIKE pg_temp.schedule INCLUDING ALL)
    PARTITION BY HASH (id);

-- name: state_parent
-- The same split as schedule: a trigger's state row has the same hash remainder as its
-- schedule row.
CREATE TABLE IF NOT EXISTS {schema}.state (LIKE pg_temp.state INCLUDING ALL)
    PARTITION BY HASH (id);

-- name: effects_table
-- Not split: effects are only ever inserted (one per effect key), so they leave no dead
-- versions for the shared vacuum horizon to keep.
CREATE TABLE IF NOT EXISTS {schema}.effects (LIKE pg_temp.effects INCLUDING ALL);

-- name: drop_template
-- Partitions take their columns and indexes from the parents, not from the template.
DROP TABLE pg_temp.schedule, pg_temp.state, pg_temp.effects;

-- name: schedule_partition
CREATE TABLE IF NOT EXISTS {schedule} PARTITION OF {schema}.schedule
    FOR VALUES WITH (MODULUS {partitions}, REMAINDER {remainder});

-- name: state_partition
CREATE TABLE IF NOT EXISTS {state} PARTITION OF {schema}.state
    FOR VALUES WITH (MODULUS {partitions}, REMAINDER {remainder});
