-- The statements of ledgerq.testing: run by users' test suites against their own
-- test database, never by a relay, a worker or the reconciler (the import-linter
-- contracts keep this package out of them). ledgerq/testing/queries.py loads
-- them as HelperQueries.

-- name: enqueued
-- Live tasks not started yet ('pending', 'published' by a relay, or 'waiting'
-- for their dependencies: after=), oldest first: what the code under test enqueued. In the caller's transaction, so
-- what it enqueued and has not committed yet is listed too.
SELECT id, kind, queue, CAST(payload AS text) AS payload_text, status, priority, run_at,
       run_at <= now() AS due, attempts, max_attempts, CAST(retry AS text) AS retry_text,
       timeout_s, business_key, ordering_key, parent_id, last_error, created_at, tags,
       expires_at
FROM ledgerq_tasks
WHERE status IN ('waiting', 'pending', 'published')
  AND (CAST(:kind AS text) IS NULL OR kind = :kind)
  AND (CAST(:queue AS text) IS NULL OR queue = :queue)
ORDER BY id
LIMIT :limit

-- name: due_kinds
-- What is due now, by queue and kind, among :queues (NULL: every queue): the
-- queues drain claims from, and the kinds it checks it has handlers for.
SELECT queue, kind, count(*) AS n
FROM ledgerq_tasks
WHERE status = 'pending' AND run_at <= now()
  AND (CAST(:queues AS text[]) IS NULL OR queue = ANY(CAST(:queues AS text[])))
GROUP BY queue, kind
ORDER BY queue, kind

-- name: next_due_in
-- Seconds until the earliest pending task of :queues and :kinds (NULL: every
-- one) that is not due yet becomes due; NULL when there is none.
SELECT EXTRACT(EPOCH FROM min(run_at) - now())::float8 AS seconds
FROM ledgerq_tasks
WHERE status = 'pending' AND run_at > now()
  AND (CAST(:queues AS text[]) IS NULL OR queue = ANY(CAST(:queues AS text[])))
  AND (CAST(:kinds AS text[]) IS NULL OR kind = ANY(CAST(:kinds AS text[])))

-- name: advance
-- Test-only: as if :seconds had passed for the pending tasks of :queues and
-- :kinds (NULL: every one): their run_at moves that much earlier. The due rule
-- reads the database clock, which a test cannot move; nothing else is touched
-- (no epoch bump: the row's state is unchanged, only its due time). Its
-- expiry moves as much (a task that expires in an hour has expired after
-- advance(3600)).
UPDATE ledgerq_tasks
SET run_at = run_at - make_interval(secs => :seconds),
    expires_at = expires_at - make_interval(secs => :seconds)
WHERE status = 'pending'
  AND (CAST(:queues AS text[]) IS NULL OR queue = ANY(CAST(:queues AS text[])))
  AND (CAST(:kinds AS text[]) IS NULL OR kind = ANY(CAST(:kinds AS text[])))
RETURNING id

-- name: newest_pending
-- The newest pending ids as the caller's transaction sees them (to find what it
-- enqueued and has not committed: drain cannot see those).
SELECT id FROM ledgerq_tasks WHERE status = 'pending' ORDER BY id DESC LIMIT 100

-- name: existing
-- Which of :ids a connection of drain's own sees (committed rows).
SELECT id FROM ledgerq_tasks WHERE id = ANY(CAST(:ids AS bigint[]))
