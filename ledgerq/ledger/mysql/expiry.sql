-- Expiry on the MySQL / MariaDB ledger (ledger/mysql/expiry.py loads them as
-- ExpiryQueries): a task not started by its expires_at ends cancelled and
-- expired, by the claim that met it or by the expiry service. PostgreSQL's
-- fragments expired_end and expired_burial (ledger/fragments.sql) without
-- DELETE ... RETURNING: the rows are locked first, then copied, then deleted,
-- by id, in the caller's transaction.

-- name: expired_among
-- Of the rows :ids the caller locked, those whose expiry has passed and that
-- have not started (pending or published): they end instead of running.
SELECT t.id
FROM ledgerq_tasks t
WHERE t.id IN :ids AND t.status IN ('pending', 'published')
  AND t.expires_at <= UTC_TIMESTAMP(6)
ORDER BY t.id

-- name: expiring
-- The expiry service's page: pending or published rows whose expiry has
-- passed, oldest expiry first (migration m0006's index on expires_at, id), at
-- most :limit, locked; a row another transaction holds (a relay publishing it,
-- a worker claiming it) is skipped: it is taken next page, or by its claim.
SELECT t.id
FROM ledgerq_tasks t
WHERE t.expires_at <= UTC_TIMESTAMP(6) AND t.status IN ('pending', 'published')
ORDER BY t.expires_at, t.id
LIMIT :limit
FOR UPDATE SKIP LOCKED

-- name: bury_expired
-- The history rows of the locked rows :ids that expired: cancelled, expired,
-- no attempt ended (the attempt log is kept), finished now, the error saying
-- when it expired (PostgreSQL's text: "expired: not started by" and the UTC
-- time to the second); no worker, lease or de-duplication key (the key is free
-- for a new task).
-- transitions: pending -> cancelled, published -> cancelled
INSERT INTO ledgerq_history (id, {{task_columns}})
SELECT t.id, t.kind, t.queue, t.payload, t.business_key, NULL, t.priority, t.shard, t.run_at,
       'cancelled', t.attempts, t.max_attempts, t.retry, t.epoch, NULL, t.heartbeat_at,
       NULL, t.checkpoint,
       CONCAT('expired: not started by ', DATE_FORMAT(t.expires_at, '%Y-%m-%dT%H:%i:%sZ')),
       t.timeout_s, t.parent_id, t.created_at, t.published_at, t.started_at,
       UTC_TIMESTAMP(6), t.publishes, t.suspect, t.result, t.attempt_log,
       t.cancel_requested_at, t.trace_context, t.ordering_key, t.progress, t.route,
       NULL, NULL, t.expires_at, TRUE, t.tags
FROM ledgerq_tasks t
WHERE t.id IN :ids

-- name: delete_expired
-- The rows bury_expired copied leave the hot table (locked since the caller's
-- lock): a message of theirs still in the broker claims nothing.
DELETE FROM ledgerq_tasks WHERE id IN :ids
