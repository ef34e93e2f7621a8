-- Rules several statements share, each written once. A statement includes one
-- with {{name}}; ledger/sql.py splices it in when it loads the statement, so
-- what runs (and what EXPLAIN shows) is the whole text. A fragment may include
-- others, and may take parameters (`-- fragment: name(p, ...)`, read as {{p}}
-- in its body, given as {{name(value, ...)}}: each value is spliced in as
-- written, so every instance has its values as constants). A fragment's
-- comments say what it reads from the statement around it.
-- tests/unit/test_rules_once.py fails when a statement restates one instead of
-- including it.

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

-- fragment: history_branch(status)
-- One history status's branch of list_tasks (operations.sql), the status a
-- constant (a literal, 'dead'): the planner sees how common it is and picks
-- the index, the branch stops after :limit rows, and when the status is not
-- among :statuses the branch is a one-time filter that skips it.
(SELECT {{listed_columns}}, 'history' AS location
 FROM ledgerq_history x
 WHERE {{status}} = ANY(CAST(:statuses AS text[])) AND x.status = {{status}}
   AND {{task_filter}}
 ORDER BY x.id DESC
 LIMIT :limit)

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

-- fragment: expired_burial
-- How the tasks that expired end, after the statement's CTE `ended` deleted
-- them (DELETE FROM ledgerq_tasks ... RETURNING t.*, {{expired_end}}): the CTEs
--   buried         their history rows (bury), RETURNING id;
--   audited        the audit record (actor ledgerq, action expire), nothing
--                  when none expired, and audited_tasks its task lines;
--   told           the ended ids to result() waiters (tell_ended).
-- The statement joins told to its answer (LEFT JOIN told ON true).
buried AS (
    {{bury}}
    RETURNING id
), audited AS (
    INSERT INTO ledgerq_audit (actor, action, selection, reason, matched, changed, finished_at)
    SELECT 'ledgerq', 'expire', '{}'::jsonb, 'not started by its expiry, expires_at',
           count(*), count(*), now()
    FROM buried HAVING count(*) > 0
    RETURNING id
), audited_tasks AS (
    INSERT INTO ledgerq_audit_tasks (audit_id, task_id, outcome)
    SELECT a.id, b.id, 'changed' FROM audited a CROSS JOIN buried b
), told AS (
    {{tell_ended}}
)

-- fragment: kind_setting(setting, values, type, default)
-- One per-kind setting of a worker's kinds, written at its start: the column
-- `setting` of ledgerq_kinds, each kind of :kinds with its value from the
-- array parameter `values` (of `type`), and the setting's `default` (what a
-- kind without a row has). A kind whose value is not the default gets a row
-- (or its row is set); a kind at the default is written only if it has a row
-- that says otherwise (set back to the default). Only a row that changes is
-- written; the answer is the kinds written.
WITH r AS (
    SELECT * FROM unnest(CAST(:kinds AS text[]), CAST({{values}} AS {{type}}[])) AS r(kind, value)
), differing AS (
    INSERT INTO ledgerq_kinds AS k (kind, {{setting}})
    SELECT kind, value FROM r WHERE value IS DISTINCT FROM {{default}}
    ON CONFLICT (kind) DO UPDATE SET {{setting}} = excluded.{{setting}}, updated_at = now()
    WHERE k.{{setting}} IS DISTINCT FROM excluded.{{setting}}
    RETURNING k.kind
), defaulted AS (
    UPDATE ledgerq_kinds k SET {{setting}} = {{default}}, updated_at = now()
    FROM r
    WHERE k.kind = r.kind AND r.value IS NOT DISTINCT FROM {{default}}
      AND k.{{setting}} IS DISTINCT FROM {{default}}
    RETURNING k.kind
)
SELECT kind FROM differing UNION ALL SELECT kind FROM defaulted

-- fragment: fence
-- The task rows t an UPDATE's compare-and-set names: the parallel arrays :ids
-- and :epochs, each row only while its epoch is still the one given (a row
-- that moved on since, claimed, retried, rescheduled, is left alone, and the
-- statement's RETURNING leaves it out, so the caller counts it as skipped).
-- The statement follows it with the statuses it expects (AND t.status ...).
-- The rows are locked first, in id order (the sort below the lock), whatever
-- plan joins them: a worker's finish locks in id order too (its planner joins
-- the sorted arrays by primary key), and an UPDATE joined by hash would lock in
-- heap order, where a row updated since lies after the rows beside it: the two
-- would deadlock (tests/integration/test_operations.py, "id order"). A row
-- gone meanwhile is not locked, and not changed.
FROM (SELECT u.id, u.epoch
      FROM unnest(CAST(:ids AS bigint[]), CAST(:epochs AS bigint[])) AS u(id, epoch)
      JOIN ledgerq_tasks x ON x.id = u.id
      ORDER BY u.id
      FOR UPDATE OF x) AS m
WHERE t.id = m.id AND t.epoch = m.epoch

-- fragment: status_and_kind(task)
-- The status and kind (x.status, x.kind) of the task whose id is `task` (a
-- column of the statement's row), live or finished: a LEFT JOIN, so both are
-- NULL when it is gone (purged). Two primary-key lookups at most.
LEFT JOIN LATERAL (SELECT t.status, t.kind FROM ledgerq_tasks t WHERE t.id = {{task}}
                   UNION ALL
                   SELECT h.status, h.kind FROM ledgerq_history h WHERE h.id = {{task}}
                   LIMIT 1) x ON true

-- fragment: claim_set
-- What a claim writes on the task row t it wins (the broker path's claim and
-- the direct path's claim_due): running, the epoch bumped (a message of the
-- old epoch claims nothing afterwards), one more attempt, the publication
-- count reset, the attempt's start and first heartbeat on the wall clock
-- (clock_timestamp(), after any wait for a row lock), the lease of :lease_s
-- seconds and the :worker.
SET status = 'running', epoch = t.epoch + 1, attempts = t.attempts + 1, publishes = 0,
    started_at = clock_timestamp(), heartbeat_at = clock_timestamp(),
    lease_until = clock_timestamp() + make_interval(secs => :lease_s), worker = :worker

-- fragment: claimed_columns
-- What a claim's UPDATE returns of each row t it won, for the CTE `claimed`:
-- the payload as the text PostgreSQL prints, and waited_s, how long the task
-- waited from when it became due (its enqueue, or its run_at if later) to the
-- claim, on the database's clock.
t.id, t.epoch, t.kind, t.queue, CAST(t.payload AS text) AS payload_text,
t.attempts, t.max_attempts, t.retry, t.timeout_s, t.checkpoint, t.business_key,
t.parent_id, t.trace_context,
EXTRACT(EPOCH FROM t.started_at - GREATEST(t.created_at, t.run_at))::float8
    AS waited_s

-- fragment: claim_answer
-- The columns a claim answers, from the CTE `claimed` (claimed_columns): a
-- payload larger than :max_payload_bytes is not sent (NULL; payload_bytes says
-- why, and the worker ends the task dead without running it).
id, epoch, kind, queue,
CASE WHEN octet_length(payload_text) <= :max_payload_bytes THEN payload_text END
    AS payload_text,
octet_length(payload_text) AS payload_bytes,
attempts, max_attempts, retry, timeout_s, checkpoint, business_key, parent_id, waited_s,
trace_context


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
