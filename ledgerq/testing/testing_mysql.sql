-- testing.sql's statements on a MySQL / MariaDB ledger (ledgerq/testing/queries.py
-- loads them as HelperQueries too, the same names). MySQL has no array to bind:
-- "every queue" / "every kind" is a flag beside the IN list (:every_queue,
-- :queues; :every_kind, :kinds), as the direct claim's statement has it.
-- Timestamps are UTC (UTC_TIMESTAMP(6)), as every statement of the MySQL ledger.

-- name: enqueued
-- Live tasks not started yet ('pending', 'published' by a relay), oldest first:
-- what the code under test enqueued. In the caller's transaction, so what it
-- enqueued and has not committed yet is listed too.
SELECT id, kind, queue, payload AS payload_text, status, priority, run_at,
       run_at <= UTC_TIMESTAMP(6) AS due, attempts, max_attempts, retry AS retry_text,
       timeout_s, business_key, ordering_key, parent_id, last_error, created_at, tags,
       expires_at
FROM ledgerq_tasks
WHERE status IN ('waiting', 'pending', 'published')
  AND (:kind IS NULL OR kind = :kind)
  AND (:queue IS NULL OR queue = :queue)
ORDER BY id
LIMIT :limit

-- name: due_kinds
-- What is due now, by queue and kind, among :queues (or every queue).
SELECT queue, kind, COUNT(*) AS n
FROM ledgerq_tasks
WHERE status = 'pending' AND run_at <= UTC_TIMESTAMP(6)
  AND (:every_queue OR queue IN :queues)
GROUP BY queue, kind
ORDER BY queue, kind

-- name: next_due_in
-- Seconds until the earliest pending task of :queues and :kinds that is not due
-- yet becomes due; NULL when there is none.
SELECT TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), MIN(run_at)) / 1000000.0 AS seconds
FROM ledgerq_tasks
WHERE status = 'pending' AND run_at > UTC_TIMESTAMP(6)
  AND (:every_queue OR queue IN :queues)
  AND (:every_kind OR kind IN :kinds)

-- name: advance
-- Test-only: as if :seconds had passed for the pending tasks of :queues and
-- :kinds: their run_at (and expiry) moves that much earlier; nothing else is
-- touched. How many moved is the statement's row count (no RETURNING on MySQL).
UPDATE ledgerq_tasks
SET run_at = run_at - INTERVAL :seconds_us MICROSECOND,
    expires_at = expires_at - INTERVAL :seconds_us MICROSECOND
WHERE status = 'pending'
  AND (:every_queue OR queue IN :queues)
  AND (:every_kind OR kind IN :kinds)

-- name: newest_pending
-- The newest pending ids as the caller's transaction sees them.
SELECT id FROM ledgerq_tasks WHERE status = 'pending' ORDER BY id DESC LIMIT 100

-- name: existing
-- Which of :ids a connection of drain's own sees (committed rows).
SELECT id FROM ledgerq_tasks WHERE id IN :ids
