-- The operator's statements (`ledgerq tasks ...`, ledger/actions.py), by name.
-- Loaded by ledger/sql.py like queries.sql. Every action is a compare-and-set
-- on (id, epoch, expected status) over parallel arrays, and RETURNs the ids it
-- won: a task that moved on since it was listed is not in the answer, and the
-- caller counts it as skipped. tests/unit/test_transitions.py reads this file
-- as it reads queries.sql.

-- name: list_tasks
-- Live and finished tasks together, newest (highest id) first, ids below
-- :before (keyset paging). Each history status is its own branch, with the
-- status a constant (fragments.sql history_branch, one instance per status):
-- the planner sees how common it is and picks the index ((status, id),
-- (status, kind, id), (status, queue, id), business_key, created_at, or the
-- primary key for a common status), each branch stops after :limit rows, and a
-- status not asked for is a one-time filter that skips its branch. The hot
-- table is small and read by its primary key. Each branch reads its table as x
-- and applies the one task filter (fragments.sql task_filter: unset criteria
-- are NULL and fold away when the statement is planned with its values).
SELECT id, kind, queue, status, attempts, max_attempts, business_key, run_at, created_at,
       finished_at, last_error, priority, epoch, result, progress, expires_at, expired, tags,
       location
FROM (
    (SELECT {{listed_columns}}, 'live' AS location
     FROM ledgerq_tasks x
     WHERE x.status = ANY(CAST(:statuses AS text[]))
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

-- name: cancel_queued
-- A task that has not started never will: it moves to history as cancelled.
-- Its message, if one is queued, claims nothing (the row is gone) and the
-- worker acks it. A row the relay holds locked while publishing is deleted
-- once the relay commits (the epoch is unchanged by a publication). A waiting
-- task (after=...) is cancelled likewise; its dependents are judged by the
-- release trigger in this transaction (migration 0020).
-- transitions: waiting -> cancelled, pending -> cancelled, published -> cancelled
WITH ended AS (
    DELETE FROM ledgerq_tasks t
    USING (SELECT u.id, u.epoch
           FROM unnest(CAST(:ids AS bigint[]), CAST(:epochs AS bigint[])) AS u(id, epoch)
           JOIN ledgerq_tasks x ON x.id = u.id
           ORDER BY u.id
           FOR UPDATE OF x) AS m  -- locked in id order first (fragments.sql, fence)
    WHERE t.id = m.id AND t.epoch = m.epoch AND t.status IN ('waiting', 'pending', 'published')
    RETURNING t.*, 'cancelled' AS ended_as, now() AS ended_at,
              CAST(NULL AS text) AS ended_worker, t.last_error AS ended_error,
              CAST(NULL AS jsonb) AS ended_result, false AS ended_attempt,
              CAST(NULL AS text) AS ended_attempt_error, now() AS ended_cancel,
              false AS ended_expired
), buried AS (
    -- the history row (fragments.sql); no attempt ended, its log is kept
    {{bury}}
    RETURNING id
), told AS (
    -- the ended ids to result() waiters, sent on commit (fragments.sql)
    {{tell_ended}}
)
SELECT id FROM buried LEFT JOIN told ON true

-- name: family
-- A parent's children counted by status (live and finished), and its family
-- row: when it completed and the on_children_done callback it enqueued.
SELECT count(*) FILTER (WHERE c.status = 'pending') AS pending,
       count(*) FILTER (WHERE c.status = 'published') AS published,
       count(*) FILTER (WHERE c.status = 'running') AS running,
       count(*) FILTER (WHERE c.status = 'succeeded') AS succeeded,
       count(*) FILTER (WHERE c.status = 'dead') AS dead,
       count(*) FILTER (WHERE c.status = 'cancelled') AS cancelled,
       count(*) AS total,
       (SELECT f.completed_at FROM ledgerq_families f WHERE f.parent_id = :id) AS completed_at,
       (SELECT f.callback_id FROM ledgerq_families f WHERE f.parent_id = :id) AS callback_id
FROM (SELECT status FROM ledgerq_tasks WHERE parent_id = :id
      UNION ALL SELECT status FROM ledgerq_history WHERE parent_id = :id) c

-- name: live_descendants
-- The live tasks below :ids in the fan-out tree (children, their children, ...)
-- and in the dependency graph (the tasks enqueued after=... one of them, their
-- dependents, ...), for a cascading cancel. The walk goes through finished
-- tasks too (a child that succeeded may have live children); each step reads
-- the parent_id indexes of both tables and the edges' indexes. UNION (not ALL)
-- stops at a task already met.
WITH RECURSIVE tree(id) AS (
    SELECT unnest(CAST(:ids AS bigint[]))
    UNION
    SELECT c.id
    FROM tree
    JOIN (SELECT id, parent_id FROM ledgerq_tasks
          UNION ALL SELECT id, parent_id FROM ledgerq_history
          UNION ALL SELECT task_id, depends_on FROM ledgerq_dependencies) c
      ON c.parent_id = tree.id
)
SELECT t.id, t.epoch, t.status
FROM ledgerq_tasks t
WHERE t.id IN (SELECT id FROM tree) AND t.id <> ALL(CAST(:ids AS bigint[]))
ORDER BY t.id

-- name: request_cancel
-- A running task is asked to stop: the worker's heartbeat reads the request
-- back (ctx.cancel_requested) and the finish statement ends it cancelled.
UPDATE ledgerq_tasks t
SET cancel_requested_at = COALESCE(t.cancel_requested_at, now())
{{fence}} AND t.status = 'running'
RETURNING t.id

-- name: retry_history
-- A dead or cancelled task runs again: back to the hot table as pending, the
-- same id, due now, attempts 0 (a fresh budget), the epoch bumped so a message
-- of its old life claims nothing. Its attempt_log, checkpoint and tags are
-- kept; its expiry is not (an operator's retry of an expired task means "run
-- it anyway").
-- transitions: dead -> pending, cancelled -> pending
WITH m AS (
    SELECT * FROM unnest(CAST(:ids AS bigint[]), CAST(:epochs AS bigint[])) AS m(id, epoch)
), revived AS (
    DELETE FROM ledgerq_history h USING m
    WHERE h.id = m.id AND h.epoch = m.epoch AND h.status IN ('dead', 'cancelled')
    RETURNING h.*
)
INSERT INTO ledgerq_tasks (id, kind, queue, payload, business_key, dedupe_key, priority, shard,
                           run_at, status, attempts, max_attempts, retry, epoch, publishes,
                           checkpoint, last_error, timeout_s, parent_id, created_at,
                           attempt_log, trace_context, ordering_key, tags)
SELECT id, kind, queue, payload, business_key, NULL, priority, shard,
       now(), 'pending', 0, max_attempts, retry, epoch + 1, 0,
       checkpoint, last_error, timeout_s, parent_id, created_at,
       attempt_log, trace_context, ordering_key, tags
FROM revived
RETURNING id

-- name: reschedule
-- When a task that has not started runs (:run_at NULL: now). The epoch is
-- bumped, so a message already queued for it claims nothing, and a published
-- task goes back to pending for the relay to publish when it is due.
-- transitions: pending -> pending, published -> pending
UPDATE ledgerq_tasks t
SET status = 'pending', run_at = COALESCE(CAST(:run_at AS timestamptz), now()),
    epoch = t.epoch + 1, published_at = NULL, publishes = 0
{{fence}} AND t.status IN ('pending', 'published')
RETURNING t.id

-- name: set_max_attempts
-- A live task's attempt budget. A running task whose attempts already reach
-- the new limit ends dead if this attempt fails.
UPDATE ledgerq_tasks t
SET max_attempts = :max_attempts
{{fence}}
  AND t.status IN ('waiting', 'pending', 'published', 'running')
RETURNING t.id

-- name: set_priority
-- A live task's priority (the relay publishes higher first; a task already
-- published keeps its message's priority).
UPDATE ledgerq_tasks t
SET priority = :priority
{{fence}}
  AND t.status IN ('waiting', 'pending', 'published', 'running')
RETURNING t.id

-- name: insert_audit
INSERT INTO ledgerq_audit (actor, action, selection, options, reason)
VALUES (:actor, :action, CAST(:selection AS jsonb), CAST(:options AS jsonb), :reason)
RETURNING id

-- name: record_audit_batch
-- One batch's counts, and what happened to each task it matched, in the
-- batch's own transaction.
WITH counted AS (
    UPDATE ledgerq_audit
    SET matched = matched + :matched, changed = changed + :changed,
        skipped = skipped + :skipped, finished_at = now()
    WHERE id = :audit_id
    RETURNING id
)
INSERT INTO ledgerq_audit_tasks (audit_id, task_id, outcome)
SELECT counted.id, r.task_id, r.outcome
FROM counted, unnest(CAST(:task_ids AS bigint[]), CAST(:outcomes AS text[])) AS r(task_id, outcome)
ON CONFLICT (audit_id, task_id) DO NOTHING
RETURNING task_id

-- name: list_audit
SELECT id, at, actor, action, selection, options, reason, matched, changed, skipped, finished_at
FROM ledgerq_audit
WHERE id < :before
ORDER BY id DESC
LIMIT :limit

-- name: task_audit
SELECT a.id, a.at, a.actor, a.action, a.reason, x.outcome
FROM ledgerq_audit_tasks x JOIN ledgerq_audit a ON a.id = x.audit_id
WHERE x.task_id = :id
ORDER BY a.id

-- name: key_holders
-- The deaths that hold ordering key :key (`ledgerq tasks release-key`): its dead
-- tasks of a kind registered with ordering "block" that no operator released
-- yet, the same rule as view ledgerq_ready (migration 0015). Reads the dead
-- rows' ordering index (migration 0007).
SELECT h.id, h.epoch, h.kind
FROM ledgerq_history h
WHERE h.ordering_key = :key AND h.status = 'dead'
  AND h.kind = ANY(ARRAY(SELECT kind FROM ledgerq_kinds WHERE ordering = 'block'))
  AND NOT EXISTS (SELECT 1 FROM ledgerq_key_releases r
                  WHERE r.task_id = h.id AND r.epoch = h.epoch)
ORDER BY h.id

-- name: key_tasks
-- What else ordering key :key has: its live tasks, of which pending (they wait
-- on the key), and whether any dead task has it (released or not). A key with
-- none of these is unknown to the ledger (its succeeded and cancelled tasks are
-- not looked for: history has no index on their keys).
SELECT (SELECT count(*) FROM ledgerq_tasks WHERE ordering_key = :key) AS live,
       (SELECT count(*) FROM ledgerq_tasks
        WHERE ordering_key = :key AND status = 'pending') AS waiting,
       EXISTS (SELECT 1 FROM ledgerq_history
               WHERE ordering_key = :key AND status = 'dead') AS has_dead

-- name: release_key
-- The deaths :ids (under :epochs) stop holding their ordering key: a
-- compare-and-set on (id, epoch, status) against history. A task retried
-- meanwhile (gone from history, or back under a new epoch) is not released and
-- not returned; releasing a death twice changes nothing. The task itself stays
-- dead in history, untouched.
INSERT INTO ledgerq_key_releases (task_id, epoch, ordering_key, audit_id)
SELECT h.id, h.epoch, h.ordering_key, :audit_id
FROM ledgerq_history h
JOIN unnest(CAST(:ids AS bigint[]), CAST(:epochs AS bigint[])) AS m(id, epoch)
  ON h.id = m.id AND h.epoch = m.epoch
WHERE h.status = 'dead' AND h.ordering_key = :key
ON CONFLICT (task_id, epoch) DO NOTHING
RETURNING task_id
