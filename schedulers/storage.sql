-- Storage and vacuum knobs every Postgres design accepts (schedulers/pg.py apply_storage), so a
-- comparison can separate what a design buys from what tuning buys. {table} is a design's table,
-- schema-qualified; values are options rendered as SQL literals. Re-applied on every setup, so a
-- changed option takes effect on an existing table.

-- name: fillfactor
-- Page fill: the room left on each page is where HOT versions of its rows can go.
ALTER TABLE {table} SET (fillfactor = {fillfactor_pct});

-- name: autovacuum_tuned
-- The timer-wheel article (autovacuum-per-table): "Autovacuum needs per-table tuning or the index bloats". Vacuum a churning table
-- after a small fraction of dead rows and without cost-based sleeping.
ALTER TABLE {table} SET (
    autovacuum_vacuum_scale_factor = {autovacuum_scale_factor},
    autovacuum_vacuum_threshold = {autovacuum_threshold_rows},
    autovacuum_vacuum_cost_delay = {autovacuum_cost_delay_ms});

-- name: autovacuum_server_defaults
-- The server's settings (a first version's table: nobody tuned it).
ALTER TABLE {table} RESET (
    autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold, autovacuum_vacuum_cost_delay);
