-- What a producer waiting for a task (ledger/results.py, ledgerq.result) and a
-- fan-out callback reading its children (ctx.children) ask of the ledger.
-- Loaded by ledger/sql.py as ResultsQueries. Read-only: a waiter never locks.

-- name: ended_results
-- Where each of :ids stands now: its row in the hot table (live: not ended
-- yet) or in history (ended: status, result, error and times). One statement,
-- one snapshot: a task moving from the hot table to history (finish,
-- cancel_queued: delete and insert in one statement) is seen in exactly one of
-- them, never neither. An id in neither is unknown: its enqueue has not
-- committed (or rolled back), or retention purged it. Each branch reads its
-- table's primary key; the waiter registry asks for all its waiters in one.
SELECT id, kind, status, result, last_error, attempts, max_attempts, created_at,
       started_at, finished_at, 'live' AS location
FROM ledgerq_tasks WHERE id = ANY(CAST(:ids AS bigint[]))
UNION ALL
SELECT id, kind, status, result, last_error, attempts, max_attempts, created_at,
       started_at, finished_at, 'history' AS location
FROM ledgerq_history WHERE id = ANY(CAST(:ids AS bigint[]))

-- name: child_results
-- A parent's children (parent_id), live and finished, in id order from above
-- :after (keyset paging: pass the last id of a page for the next), at most
-- :limit; the same columns as ended_results. The hot table by its parent_id
-- index, history by its own.
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

-- name: announce_waiting
-- A registry with waiters says so until :until_s seconds from now (renewed
-- while it has waiters), so that ending statements notify (fragments.sql
-- tell_ended); rows that ran out an hour ago (crashed processes') go. (Both
-- statements return their row: every runner reads the rows back.)
WITH gone AS (
    DELETE FROM ledgerq_waiting WHERE until < now() - interval '1 hour'
)
INSERT INTO ledgerq_waiting (registry, until)
VALUES (:registry, now() + make_interval(secs => :until_s))
ON CONFLICT (registry) DO UPDATE SET until = excluded.until
RETURNING registry

-- name: withdraw_waiting
-- A registry with no waiter left.
DELETE FROM ledgerq_waiting WHERE registry = :registry
RETURNING registry
