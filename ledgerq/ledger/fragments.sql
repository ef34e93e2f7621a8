-- Rules several statements share, each written once. A statement includes one
-- with {{name}}; ledger/sql.py splices it in when it loads the statement, so
-- what runs (and what EXPLAIN shows) is the whole text. A fragment's comments
-- say what it reads from the statement around it. tests/unit/test_rules_once.py
-- fails when a statement restates one instead of including it.

-- fragment: bury
-- The history row of a task leaving the hot table: every column of
-- ledgerq_history, written once. It reads the CTE `ended`, the statement's
-- DELETE FROM ledgerq_tasks, which returns the task's row (t.*) and how it
-- ended:
--   ended_as      its status in history (a literal or a CASE of literals:
--                 tests/unit/test_transitions.py reads it there)
--   ended_at      finished_at
--   ended_worker  worker
--   ended_error   last_error
--   ended_result  result (jsonb)
--   ended_attempt whether an attempt ended with it: then its record (the
--                 attempt's number, worker, start, end, error, outcome = ended_as
--                 and the cancel request's time) is appended to attempt_log;
--                 otherwise attempt_log is kept as it is
--   ended_attempt_error  that record's error (the attempt's own, or NULL)
--   ended_cancel  cancel_requested_at
--   ended_expired whether it ended by expiring (not started by expires_at)
-- A finished task has no lease and no de-duplication key (its key is free for
-- a new task).
INSERT INTO ledgerq_history (id, kind, queue, payload, business_key, dedupe_key, priority,
                             shard, run_at, status, attempts, max_attempts, retry, epoch,
                             publishes, lease_until, heartbeat_at, worker, checkpoint,
                             last_error, timeout_s, parent_id, created_at, published_at,
                             started_at, finished_at, suspect, result, attempt_log,
                             cancel_requested_at, trace_context, ordering_key, progress,
                             expires_at, expired, tags)
SELECT id, kind, queue, payload, business_key, NULL, priority,
       shard, run_at, ended_as, attempts, max_attempts, retry, epoch,
       publishes, NULL, heartbeat_at, ended_worker, checkpoint,
       ended_error, timeout_s, parent_id, created_at, published_at,
       started_at, ended_at, suspect, ended_result,
       CASE WHEN ended_attempt
            THEN COALESCE(attempt_log, '[]'::jsonb) || jsonb_build_array(jsonb_build_object(
                'attempt', attempts, 'worker', worker, 'started_at', started_at,
                'ended_at', ended_at, 'error', ended_attempt_error, 'outcome', ended_as,
                'cancel_requested_at', cancel_requested_at))
            ELSE attempt_log END,
       ended_cancel, trace_context, ordering_key, progress,
       expires_at, ended_expired, tags
FROM ended

-- fragment: listed_columns
-- The columns of a task-list row (ledger/actions.py LIST_COLUMNS), of the branch's
-- table under the alias x.
x.id, x.kind, x.queue, x.status, x.attempts, x.max_attempts, x.business_key, x.run_at,
x.created_at, x.finished_at, x.last_error, x.priority, x.epoch, x.result, x.progress,
x.expires_at, x.expired, x.tags

-- fragment: task_filter
-- The operator's task filter (ledger/filters.py TaskFilter.params), on the row
-- x of either table: ids below :before (keyset paging), then each criterion,
-- NULL when unset (it folds away when the statement is planned with its
-- values). The error criterion reads only rows that have an error (on history,
-- the partial index (status, id) WHERE last_error IS NOT NULL) and tests the
-- substring there. The tags criterion: every tag given (@>, the GIN index on
-- tags of either table).
x.id < :before
AND (CAST(:kind AS text) IS NULL OR x.kind = :kind)
AND (CAST(:queue AS text) IS NULL OR x.queue = :queue)
AND (CAST(:business_key AS text) IS NULL OR x.business_key = :business_key)
AND (CAST(:since AS timestamptz) IS NULL OR x.created_at >= :since)
AND (CAST(:until AS timestamptz) IS NULL OR x.created_at < :until)
AND (CAST(:error AS text) IS NULL
     OR (x.last_error IS NOT NULL AND strpos(lower(x.last_error), lower(:error)) > 0))
AND (CAST(:ids AS bigint[]) IS NULL OR x.id = ANY(CAST(:ids AS bigint[])))
AND (CAST(:tags AS text[]) IS NULL OR x.tags @> CAST(:tags AS text[]))

-- fragment: expired_end
-- How a task that expired ends (the `ended` columns bury reads), after the
-- DELETE's RETURNING t.*: cancelled, expired, no attempt ended; its
-- last_error says so (the time it expired).
'cancelled' AS ended_as, now() AS ended_at, CAST(NULL AS text) AS ended_worker,
'expired: not started by ' || to_char(t.expires_at AT TIME ZONE 'UTC',
                                      'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS ended_error,
CAST(NULL AS jsonb) AS ended_result, false AS ended_attempt,
CAST(NULL AS text) AS ended_attempt_error, t.cancel_requested_at AS ended_cancel,
true AS ended_expired

-- fragment: expired_audit
-- The audit record of tasks that expired (actor ledgerq, action expire) and
-- its task lines, from the CTE `buried` (the ids bury moved); nothing when it
-- moved none.
audited AS (
    INSERT INTO ledgerq_audit (actor, action, selection, reason, matched, changed, finished_at)
    SELECT 'ledgerq', 'expire', '{}'::jsonb, 'not started by its expiry, expires_at',
           count(*), count(*), now()
    FROM buried HAVING count(*) > 0
    RETURNING id
), audited_tasks AS (
    INSERT INTO ledgerq_audit_tasks (audit_id, task_id, outcome)
    SELECT a.id, b.id, 'changed' FROM audited a CROSS JOIN buried b
)


-- fragment: tell_ended
-- One NOTIFY ledgerq_ended per statement that ended tasks, delivered on commit
-- (never for a rollback), for the result() waiters (ledger/pg/waiters.py), and
-- only while some process waits (a row of ledgerq_waiting stands, migration
-- 0021): PostgreSQL serialises the commits of transactions that notify, which
-- the worker's finishes must not pay when nobody listens. It reads the CTE
-- `buried` (the history rows inserted, RETURNING id). The payload is the ended
-- ids, comma-separated, when there are at most 400 of them (17 characters each
-- at most: under NOTIFY's 8,000-byte limit); empty for a larger statement,
-- which a waiter reads as "anything may have ended: look". A statement that
-- ended nothing sends nothing. The statement selects from `buried` joined to
-- this CTE (LEFT JOIN ... ON true), or PostgreSQL would not evaluate it. A
-- wake-up, not a record: waiters poll as well.
SELECT pg_notify('ledgerq_ended',
                 CASE WHEN count(*) <= 400 THEN string_agg(CAST(id AS text), ',') ELSE '' END)
FROM buried
HAVING count(*) > 0 AND EXISTS (SELECT 1 FROM ledgerq_waiting w WHERE w.until > now())
