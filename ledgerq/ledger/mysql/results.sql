-- Where tasks stand, for result() and aresult() on the MySQL ledger
-- (ledger/mysql/results.py), PostgreSQL's ended_results of results.sql.

-- name: ended_results
-- Where each of :ids stands now: its row in the hot table (live: not ended yet)
-- or in history (ended: status, result, error and times). One statement, one
-- consistent read (READ COMMITTED: a snapshot per statement), and a finish
-- moves a row to history (insert, then delete) in one transaction, so a task
-- ending meanwhile is seen in exactly one of the two tables, never neither.
-- An id in neither is unknown: its enqueue has not committed (or rolled back),
-- or retention purged it. Each branch reads its table's primary key (history's
-- starts with id, in every partition).
SELECT id, kind, status, result, last_error, attempts, max_attempts, created_at,
       started_at, finished_at, 'live' AS location
FROM ledgerq_tasks WHERE id IN :ids
UNION ALL
SELECT id, kind, status, result, last_error, attempts, max_attempts, created_at,
       started_at, finished_at, 'history' AS location
FROM ledgerq_history WHERE id IN :ids

-- name: child_results
-- A parent's children (parent_id), live and finished, in id order from above
-- :after (keyset paging), at most :limit; the same columns as ended_results.
-- Each table by its parent_id index.
SELECT id, kind, status, result, last_error, attempts, max_attempts, created_at,
       started_at, finished_at, location
FROM (
    (SELECT id, kind, status, result, last_error, attempts, max_attempts, created_at,
            started_at, finished_at, 'live' AS location
     FROM ledgerq_tasks WHERE parent_id = :parent_id AND id > :after
     ORDER BY id LIMIT :limit)
    UNION ALL
    (SELECT id, kind, status, result, last_error, attempts, max_attempts, created_at,
            started_at, finished_at, 'history' AS location
     FROM ledgerq_history WHERE parent_id = :parent_id AND id > :after
     ORDER BY id LIMIT :limit)
) c
ORDER BY id
LIMIT :limit
