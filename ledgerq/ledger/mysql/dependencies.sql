-- Dependencies between tasks on the MySQL / MariaDB ledger (enqueue(...,
-- after=...); migration m0007; ledger/mysql/dependencies.py runs them and
-- states what each lock is for). Includes from ledger/mysql/fragments.sql.

-- name: where_named
-- The producer's first look at the tasks it names, a plain read (the caller's
-- snapshot): live ('live') or in history (its status). Only to choose which
-- rows the locking reads below take, never to decide.
SELECT id, 'live' AS status FROM ledgerq_tasks WHERE id IN :ids
UNION ALL
SELECT id, status FROM ledgerq_history WHERE id IN :ids

-- name: home_shard
-- Only when a named task was found in neither table: which ledger shard this
-- database is (migration m0008; no row: the only one, 0), to tell a task of
-- another shard's database from one that does not exist.
SELECT COALESCE((SELECT shard_index FROM ledgerq_ledger_shard), 0) AS shard_index

-- name: lock_named_live
-- The named tasks still live, share-locked until the producer's transaction
-- ends: none of them can end (its finish locks it FOR UPDATE, its delete
-- needs the row) before the edges this transaction writes are committed.
SELECT id FROM ledgerq_tasks WHERE id IN :ids ORDER BY id LOCK IN SHARE MODE

-- name: lock_named_ended
-- The named tasks in history, share-locked (an operator's retry, which locks
-- the history row FOR UPDATE, waits for the producer's commit): their status
-- is the one the edges are stamped with.
SELECT id, status FROM ledgerq_history WHERE id IN :ids ORDER BY id LOCK IN SHARE MODE

-- name: add_edges
-- The edges of tasks just inserted (:edges, a JSON array of {task_id,
-- depends_on, always}), unstamped: ledgerq_after_add stamps them.
INSERT INTO ledgerq_dependencies (task_id, depends_on, always)
SELECT r.task_id, r.depends_on, r.always
FROM JSON_TABLE(:edges, '$[*]' COLUMNS (
         task_id    BIGINT PATH '$.task_id',
         depends_on BIGINT PATH '$.depends_on',
         always     INT    PATH '$.always')) AS r
ORDER BY r.task_id, r.depends_on

-- name: after_add
-- The tasks just inserted with after= (:ids, a JSON array), stamped, set
-- waiting and judged at once by the migrator's procedure (migration m0007).
-- transitions: pending -> waiting, waiting -> pending, waiting -> cancelled
CALL ledgerq_after_add(:ids)

-- name: edges_near
-- The ender's first read of a round (ends_fragments.sql edges_near): rows
-- ('edge', task_id, depends_on).
{{edges_near}}

-- name: lock_waiting
-- The dependents still waiting, locked in id order: the one lock every judge
-- of a task takes first.
SELECT id FROM ledgerq_tasks WHERE id IN :ids AND status = 'waiting' ORDER BY id FOR UPDATE

-- name: stamp_dependency
-- The locked dependent :task_id sees its dependencies :deps ended :status. By
-- the primary key's points (record locks only): along the depends_on index, an
-- application's REPEATABLE READ transaction would lock its gaps too, holding
-- up every producer's new edge there until it commits.
UPDATE ledgerq_dependencies FORCE INDEX (PRIMARY) SET dependency_ended = :status
WHERE task_id = :task_id AND depends_on IN :deps

-- name: judged_edges
-- The locked dependent's edges (:deps: all of them), read locked: the latest
-- committed stamps, whatever the caller's snapshot.
SELECT depends_on, always, dependency_ended FROM ledgerq_dependencies FORCE INDEX (PRIMARY)
WHERE task_id = :task_id AND depends_on IN :deps
ORDER BY depends_on
LOCK IN SHARE MODE

-- name: release_waiting
-- Every dependency ended, all succeeded (or after_policy="always"): due at its run_at.
-- transitions: waiting -> pending
UPDATE ledgerq_tasks SET status = 'pending' WHERE id IN :ids AND status = 'waiting'

-- name: bury_waiting
-- A dependency ended dead or cancelled: the locked waiting tasks :ids end
-- cancelled, never run, last_error naming it (:batch's field error). Every
-- column, as bury's; no attempt ended.
-- transitions: waiting -> cancelled
INSERT INTO ledgerq_history (id, {{task_columns}})
SELECT t.id, t.kind, t.queue, t.payload, t.business_key, NULL, t.priority, t.shard, t.run_at,
       'cancelled', t.attempts, t.max_attempts, t.retry, t.epoch, NULL, t.heartbeat_at,
       NULL, t.checkpoint, {{field(error)}}, t.timeout_s, t.parent_id, t.created_at,
       t.published_at, t.started_at, UTC_TIMESTAMP(6), t.publishes, t.suspect, NULL,
       t.attempt_log, NULL, t.trace_context, t.ordering_key, t.progress, t.route,
       NULL, NULL, t.expires_at, FALSE, t.tags
FROM ledgerq_tasks t
WHERE t.id IN :ids AND t.status = 'waiting'

-- name: delete_waiting
-- The rows bury_waiting copied leave the hot table (locked since lock_waiting).
DELETE FROM ledgerq_tasks WHERE id IN :ids AND status = 'waiting'

-- name: stamp_ended
-- The ended tasks' own edges (as dependents) get their end, for retention.
UPDATE ledgerq_dependencies e JOIN ledgerq_history h ON h.id = e.task_id
SET e.ended_at = h.finished_at
WHERE e.task_id IN :ids

-- name: stuck
-- The reconciler's safety net, a plain read: waiting tasks none of whose
-- dependencies is live (a release the ending transaction missed: it read the
-- edges in a snapshot older than the dependent's commit), oldest first.
SELECT w.id FROM ledgerq_tasks w
WHERE w.status = 'waiting'
  AND NOT EXISTS (SELECT 1 FROM ledgerq_dependencies e
                  JOIN ledgerq_tasks t ON t.id = e.depends_on
                  WHERE e.task_id = w.id)
ORDER BY w.id
LIMIT :limit

-- name: edges_of
-- Every edge of the tasks :ids (as dependents), a plain read.
SELECT task_id, depends_on FROM ledgerq_dependencies WHERE task_id IN :ids

-- name: stamp_from_history
-- The safety net's stamps of the locked dependent :task_id: each dependency
-- no longer live gets its status in history ('purged' when gone from both).
UPDATE ledgerq_dependencies e
LEFT JOIN ledgerq_history h ON h.id = e.depends_on
SET e.dependency_ended = COALESCE(h.status, 'purged')
WHERE e.task_id = :task_id AND e.dependency_ended IS NULL
  AND NOT EXISTS (SELECT 1 FROM ledgerq_tasks t WHERE t.id = e.depends_on)

-- name: dependency_results
-- ctx.dependencies: each ended dependency of :id with its status and result (a
-- live one, or a purged one, is missing).
SELECT e.depends_on, h.status, h.result
FROM ledgerq_dependencies e
JOIN ledgerq_history h ON h.id = e.depends_on
WHERE e.task_id = :id
ORDER BY e.depends_on

-- name: task_graph
-- show: the dependencies ('dependency') and dependents ('dependent') of :id,
-- each with its status (NULL when purged) and kind.
SELECT 'dependency' AS side, e.depends_on AS id, e.always,
       COALESCE((SELECT t.status FROM ledgerq_tasks t WHERE t.id = e.depends_on),
                (SELECT h.status FROM ledgerq_history h WHERE h.id = e.depends_on)) AS status,
       COALESCE((SELECT t.kind FROM ledgerq_tasks t WHERE t.id = e.depends_on),
                (SELECT h.kind FROM ledgerq_history h WHERE h.id = e.depends_on)) AS kind
FROM ledgerq_dependencies e
WHERE e.task_id = :id
UNION ALL
SELECT 'dependent', e.task_id, e.always,
       COALESCE((SELECT t.status FROM ledgerq_tasks t WHERE t.id = e.task_id),
                (SELECT h.status FROM ledgerq_history h WHERE h.id = e.task_id)),
       COALESCE((SELECT t.kind FROM ledgerq_tasks t WHERE t.id = e.task_id),
                (SELECT h.kind FROM ledgerq_history h WHERE h.id = e.task_id))
FROM ledgerq_dependencies e
WHERE e.depends_on = :id
ORDER BY 1, 2

-- name: prune_dependencies
-- Retention: at most :limit edges whose dependent ended before :before and is
-- not live (a retried one is live again), oldest first, by ended_at's index.
DELETE FROM ledgerq_dependencies
WHERE ended_at < :before
  AND NOT EXISTS (SELECT 1 FROM ledgerq_tasks t WHERE t.id = ledgerq_dependencies.task_id)
ORDER BY ended_at
LIMIT :limit

-- name: truncate_dependencies
-- The testing protocol's truncate.
DELETE FROM ledgerq_dependencies
