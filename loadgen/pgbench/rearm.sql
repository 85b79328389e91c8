-- The re-arm half of the pgbench ceiling script: pg_leased's commit_batch (queries.sql) reduced to
-- what a pgbench client can express. commit_batch receives the claimed ids as an array; pgbench
-- cannot carry a result set from one statement to the next, so the rows this client holds are
-- found by owner instead (schedule_running_idx, the sweeper's index). The rest is commit_batch's
-- `locked` + `rearmed`: row locks in id order, then the same SET list. The new fire time is now(),
-- so a re-armed row is due again at once and queues behind the older due rows (a FIFO rotation
-- through the table). Left out: the state and effects writes, which happen only for the polls
-- that find news (new_event_rate, 5% in the presets).
WITH locked AS (
    SELECT s.id
      FROM schedule s
     WHERE s.owner_id = concat('pgbench-', :client_id)  -- one owner per pgbench client
       AND s.state = 'running'
     ORDER BY s.id
       FOR UPDATE
)
UPDATE schedule s
   SET state = 'scheduled',
       next_fire_at = now(),
       armed_at = now(),
       version = s.version + 1,
       attempt = 0,
       owner_id = NULL,
       lease_expires = NULL
  FROM locked l
 WHERE s.id = l.id;
