-- The operator's statements on the MySQL / MariaDB ledger (`ledgerq tasks ...`,
-- ledger/mysql/operations_plans.py), PostgreSQL's operations.sql in MySQL's SQL.
-- Includes from ledger/mysql/fragments.sql and ledger/mysql/operations_fragments.sql.
--
-- Every action is a compare-and-set on (id, epoch, status), in two steps where
-- PostgreSQL has one (no RETURNING on UPDATE; no unnest): a locking read of the
-- batch's rows still at the epoch the listing read and in the status the
-- action expects (lock_*: the ids it returns are the ones the action won),
-- then the write of those ids, which repeats the fence (fragment fenced) and
-- the status, on rows the transaction now holds. The batch is :ids (an IN list)
-- beside :batch, a JSON object of each id's epoch (fragment field). A locking
-- read waits for a row another transaction holds (a worker finishing it, a
-- claim) and reads its latest committed version, whatever the isolation level:
-- a task that moved on meanwhile is not in the answer, and is skipped.
-- Rows are locked in id order: two actions cannot deadlock each other.

-- name: list_tasks
-- Live and finished tasks together, newest (highest id) first, ids below
-- :before (keyset paging). The hot table is read by its primary key; each
-- history status is its own branch (fragment history_branch). Each branch
-- stops after :limit rows.
SELECT id, kind, queue, status, attempts, max_attempts, business_key, run_at, created_at,
       finished_at, last_error, priority, epoch, result, progress, expires_at, expired, tags,
       location
FROM (
    (SELECT {{listed_columns}}, 'live' AS location
     FROM ledgerq_tasks x
     WHERE x.status IN :statuses
       AND {{task_filter}}
     ORDER BY x.id DESC
     LIMIT :limit)
    UNION ALL
    {{history_branch('succeeded')}}
    UNION ALL
    {{history_branch('dead')}}
    UNION ALL
    {{history_branch('cancelled')}}
) found
ORDER BY id DESC
LIMIT :limit

-- name: lock_queued
-- cancel, first step: the batch's tasks that have not started (waiting ones
-- included: their dependents are judged in the same transaction,
-- ledger/mysql/dependencies.py released_by).
SELECT t.id FROM ledgerq_tasks t
WHERE {{fenced}} AND t.status IN ('waiting', 'pending', 'published')
ORDER BY t.id
FOR UPDATE

-- name: bury_cancelled
-- cancel of a task that has not started: it never will. Its history row, every
-- column, no attempt ended (its log is kept), no de-duplication key (the key is
-- free for a new task). Its message, if one is queued, claims nothing (the row
-- is gone from the hot table: delete_cancelled).
-- transitions: waiting -> cancelled, pending -> cancelled, published -> cancelled
INSERT INTO ledgerq_history (id, {{task_columns}})
SELECT t.id, t.kind, t.queue, t.payload, t.business_key, NULL, t.priority, t.shard, t.run_at,
       'cancelled', t.attempts, t.max_attempts, t.retry, t.epoch, NULL, t.heartbeat_at,
       t.worker, t.checkpoint, t.last_error, t.timeout_s, t.parent_id, t.created_at,
       t.published_at, t.started_at, UTC_TIMESTAMP(6), t.publishes, t.suspect, t.result,
       t.attempt_log, UTC_TIMESTAMP(6), t.trace_context, t.ordering_key, t.progress, t.route,
       NULL, NULL, t.expires_at, FALSE, t.tags
FROM ledgerq_tasks t
WHERE {{fenced}} AND t.status IN ('waiting', 'pending', 'published')

-- name: delete_cancelled
-- The rows bury_cancelled copied leave the hot table (locked since lock_queued).
DELETE t FROM ledgerq_tasks t
WHERE {{fenced}} AND t.status IN ('waiting', 'pending', 'published')

-- name: lock_running
-- cancel of a running task, first step.
SELECT t.id FROM ledgerq_tasks t
WHERE {{fenced}} AND t.status = 'running'
ORDER BY t.id
FOR UPDATE

-- name: request_cancel
-- A running task is asked to stop: the worker's heartbeat reads the request
-- back (ctx.cancel_requested) and its finish ends it cancelled.
UPDATE ledgerq_tasks t
SET t.cancel_requested_at = COALESCE(t.cancel_requested_at, UTC_TIMESTAMP(6))
WHERE {{fenced}} AND t.status = 'running'

-- name: lock_ended
-- retry of a dead or cancelled task, first step: its history row.
SELECT t.id FROM ledgerq_history t
WHERE {{fenced}} AND t.status IN ('dead', 'cancelled')
ORDER BY t.id
FOR UPDATE

-- name: revive
-- A dead or cancelled task runs again: back to the hot table as pending, the
-- same id, due now, attempts 0 (a fresh budget), the epoch bumped so a message
-- of its old life claims nothing. Its attempt_log, checkpoint and tags are
-- kept; its expiry is not (an operator's retry of an expired task means "run it
-- anyway").
-- transitions: dead -> pending, cancelled -> pending
INSERT INTO ledgerq_tasks (id, kind, queue, payload, business_key, dedupe_key, priority, shard,
                           run_at, status, attempts, max_attempts, retry, epoch, publishes,
                           checkpoint, last_error, timeout_s, parent_id, created_at,
                           attempt_log, trace_context, ordering_key, tags)
SELECT t.id, t.kind, t.queue, t.payload, t.business_key, NULL, t.priority, t.shard,
       UTC_TIMESTAMP(6), 'pending', 0, t.max_attempts, t.retry, t.epoch + 1, 0,
       t.checkpoint, t.last_error, t.timeout_s, t.parent_id, t.created_at,
       t.attempt_log, t.trace_context, t.ordering_key, t.tags
FROM ledgerq_history t
WHERE {{fenced}} AND t.status IN ('dead', 'cancelled')

-- name: drop_revived
-- The history rows revive copied back go (locked since lock_ended).
DELETE t FROM ledgerq_history t
WHERE {{fenced}} AND t.status IN ('dead', 'cancelled')

-- name: lock_unstarted
-- reschedule, first step: the batch's tasks that have not started.
SELECT t.id FROM ledgerq_tasks t
WHERE {{fenced}} AND t.status IN ('pending', 'published')
ORDER BY t.id
FOR UPDATE

-- name: reschedule
-- When a task that has not started runs (:run_at NULL: now). The epoch is
-- bumped, so a message already queued for it claims nothing, and a published
-- task goes back to pending for the relay to publish when it is due. (MySQL
-- reads the WHERE before it assigns: the fence compares the old epoch.)
-- transitions: pending -> pending, published -> pending
UPDATE ledgerq_tasks t
SET t.status = 'pending', t.run_at = COALESCE(:run_at, UTC_TIMESTAMP(6)),
    t.epoch = t.epoch + 1, t.published_at = NULL, t.publishes = 0
WHERE {{fenced}} AND t.status IN ('pending', 'published')

-- name: lock_live
-- set-attempts and set-priority, first step: the batch's live tasks.
SELECT t.id FROM ledgerq_tasks t
WHERE {{fenced}} AND t.status IN ('waiting', 'pending', 'published', 'running')
ORDER BY t.id
FOR UPDATE

-- name: set_max_attempts
-- A live task's attempt budget. A running task whose attempts already reach
-- the new limit ends dead if this attempt fails.
UPDATE ledgerq_tasks t
SET t.max_attempts = :max_attempts
WHERE {{fenced}} AND t.status IN ('waiting', 'pending', 'published', 'running')

-- name: set_priority
-- A live task's priority (a task already published keeps its message's).
UPDATE ledgerq_tasks t
SET t.priority = :priority
WHERE {{fenced}} AND t.status IN ('waiting', 'pending', 'published', 'running')

-- name: live_descendants
-- The live tasks below :ids in the fan-out tree (children, their children,
-- ...) and in the dependency graph (the tasks enqueued after=... one of them,
-- their dependents, ...), for a cascading cancel; the walk goes through
-- finished tasks too (each step reads the parent_id index of both tables and
-- the edges' depends_on index). UNION (not ALL) stops at a task already met.
WITH RECURSIVE tree (id) AS (
    SELECT c.id FROM ledgerq_tasks c WHERE c.parent_id IN :ids
    UNION
    SELECT c.id FROM ledgerq_history c WHERE c.parent_id IN :ids
    UNION
    SELECT e.task_id FROM ledgerq_dependencies e WHERE e.depends_on IN :ids
    UNION
    SELECT c.id FROM ledgerq_tasks c JOIN tree ON c.parent_id = tree.id
    UNION
    SELECT c.id FROM ledgerq_history c JOIN tree ON c.parent_id = tree.id
    UNION
    SELECT e.task_id FROM ledgerq_dependencies e JOIN tree ON e.depends_on = tree.id
)
SELECT t.id, t.epoch, t.status
FROM ledgerq_tasks t
WHERE t.id IN (SELECT id FROM tree) AND t.id NOT IN :ids
ORDER BY t.id

-- name: family
-- A parent's children counted by status, live and finished (``show``; its
-- completion and callback: families.sql family_row).
SELECT COALESCE(SUM(c.status = 'pending'), 0) AS pending,
       COALESCE(SUM(c.status = 'published'), 0) AS published,
       COALESCE(SUM(c.status = 'running'), 0) AS running,
       COALESCE(SUM(c.status = 'succeeded'), 0) AS succeeded,
       COALESCE(SUM(c.status = 'dead'), 0) AS dead,
       COALESCE(SUM(c.status = 'cancelled'), 0) AS cancelled,
       COUNT(*) AS total
FROM (SELECT status FROM ledgerq_tasks WHERE parent_id = :id
      UNION ALL SELECT status FROM ledgerq_history WHERE parent_id = :id) c

-- name: list_audit
SELECT id, at, actor, action, selection, options, reason, matched, changed, skipped, finished_at
FROM ledgerq_audit
WHERE id < :before
ORDER BY id DESC
LIMIT :limit

-- name: task_audit
-- The actions that touched one task, oldest first.
SELECT a.id, a.at, a.actor, a.action, a.reason, x.outcome
FROM ledgerq_audit_tasks x JOIN ledgerq_audit a ON a.id = x.audit_id
WHERE x.task_id = :id
ORDER BY a.id

-- name: truncate_audit
-- The testing protocol's truncate: the audit trail (its tasks go with it, ON
-- DELETE CASCADE).
DELETE FROM ledgerq_audit
