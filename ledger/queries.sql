-- Every statement the ledger runs, by name. ledger/sql.py loads them as
-- SQLAlchemy text() clauses; no SQL is built at run time.
--
-- Conventions: batch statements take parallel arrays (:ids, :epochs, ...) and
-- unnest them, so a batch is one round trip. Every state change is a
-- compare-and-set on (id, epoch, expected status) and RETURNs the rows it won:
-- a row missing from the result means another actor got there first.
--
-- Every statement that changes a task's status says so in a
-- "-- transitions: from -> to, ..." line; tests/unit/test_transitions.py derives
-- the transitions from the SQL itself and checks both against ledger/states.py.
-- The columns of a history row are listed once, in finish.

-- name: insert_task
INSERT INTO ledgerq_tasks (kind, queue, payload, business_key, dedupe_key, priority, shard,
                           run_at, status, max_attempts, retry, timeout_s, parent_id,
                           trace_context)
VALUES (:kind, :queue, CAST(:payload AS jsonb), :business_key, :dedupe_key, :priority, :shard,
        COALESCE(CAST(:run_at AS timestamptz), now() + make_interval(secs => :delay_s)),
        'pending', :max_attempts,
        CAST(:retry AS jsonb), :timeout_s, :parent_id, CAST(:trace_context AS jsonb))
ON CONFLICT (kind, dedupe_key) WHERE dedupe_key IS NOT NULL DO NOTHING
RETURNING id

-- name: insert_tasks
INSERT INTO ledgerq_tasks (kind, queue, payload, business_key, dedupe_key, priority, shard,
                           run_at, status, max_attempts, retry, timeout_s, parent_id,
                           trace_context)
SELECT r.kind, r.queue, r.payload, r.business_key, r.dedupe_key, r.priority, r.shard,
       COALESCE(r.run_at, now() + make_interval(secs => r.delay_s)), 'pending', r.max_attempts,
       r.retry, r.timeout_s, r.parent_id, r.trace_context
FROM ROWS FROM (jsonb_to_recordset(CAST(:rows AS jsonb))
         AS (kind text, queue text, payload jsonb, business_key text, dedupe_key text,
             priority smallint, shard smallint, run_at timestamptz, delay_s float8,
             max_attempts integer,
             retry jsonb, timeout_s double precision, parent_id bigint,
             trace_context jsonb)) WITH ORDINALITY
     AS r(kind, queue, payload, business_key, dedupe_key, priority, shard, run_at, delay_s,
          max_attempts, retry, timeout_s, parent_id, trace_context, n)
ORDER BY r.n
ON CONFLICT (kind, dedupe_key) WHERE dedupe_key IS NOT NULL DO NOTHING
RETURNING id

-- name: live_id_by_dedupe_key
SELECT id FROM ledgerq_tasks WHERE kind = :kind AND dedupe_key = :dedupe_key

-- name: select_due
-- The relay's claim. SKIP LOCKED: relays never wait for or collide with each
-- other; the lock is held until the confirmed rows are marked published.
-- trace_context: the producer's trace, which the publish span continues.
SELECT id, kind, queue, priority, epoch, trace_context
FROM ledgerq_tasks
WHERE status = 'pending' AND run_at <= now()
ORDER BY priority DESC, run_at, id
LIMIT :limit
FOR UPDATE SKIP LOCKED

-- name: mark_published
-- After a confirmed publish, by the relay (the row is pending and locked since
-- select_due) or the reconciler (a stalled published row, or an overdue pending
-- one): published_at restarts the stall clock.
-- transitions: pending -> published, published -> published
UPDATE ledgerq_tasks t
SET status = 'published', published_at = now(), publishes = t.publishes + 1
FROM unnest(CAST(:ids AS bigint[]), CAST(:epochs AS bigint[])) AS m(id, epoch)
WHERE t.id = m.id AND t.epoch = m.epoch AND t.status IN ('pending', 'published')
RETURNING t.id

-- name: claim
-- The consumer's claim. It accepts 'pending' as well as 'published': the
-- delivery can overtake the relay's commit (the UPDATE then waits on the
-- relay's row lock and re-checks), or the relay can die after the publish.
-- The epoch in the message must match, so a stale message cannot claim a
-- later attempt (for instance one waiting out its retry backoff), and the row
-- must be due: a message forged for a task scheduled later (or a copy that
-- overtook a retry's backoff) claims nothing. The relay publishes only due rows
-- and both compare run_at with the database's clock, so a real message is
-- always due here. The payload comes back as the text PostgreSQL prints (the
-- worker decodes it), converted once; one larger than :max_payload_bytes is
-- not sent: the row is claimed, payload is NULL and payload_bytes says why,
-- and the worker ends the task dead without running it. waited_s is how long
-- the task waited, on the database's clock, from when it became due (its
-- enqueue, or its run_at if later: a scheduled task, a retry) to this claim
-- (the metric ledgerq_start_latency_seconds).
-- transitions: pending -> running, published -> running
WITH claimed AS (
    UPDATE ledgerq_tasks t
    SET status = 'running', epoch = t.epoch + 1, attempts = t.attempts + 1, publishes = 0,
        started_at = now(), heartbeat_at = now(),
        lease_until = clock_timestamp() + make_interval(secs => :lease_s), worker = :worker
    FROM unnest(CAST(:ids AS bigint[]), CAST(:epochs AS bigint[])) AS m(id, epoch)
    WHERE t.id = m.id AND t.epoch = m.epoch AND t.status IN ('pending', 'published')
      AND t.run_at <= now()
    RETURNING t.id, t.epoch, t.kind, t.queue, CAST(t.payload AS text) AS payload_text,
              t.attempts, t.max_attempts, t.retry, t.timeout_s, t.checkpoint, t.business_key,
              t.parent_id, t.trace_context,
              EXTRACT(EPOCH FROM now() - GREATEST(t.created_at, t.run_at))::float8 AS waited_s
)
SELECT id, epoch, kind, queue,
       CASE WHEN octet_length(payload_text) <= :max_payload_bytes THEN payload_text END
           AS payload_text,
       octet_length(payload_text) AS payload_bytes,
       attempts, max_attempts, retry, timeout_s, checkpoint, business_key, parent_id, waited_s,
       trace_context
FROM claimed



-- name: whereabouts
-- Where the tasks named by deliveries that lost their claim are now.
SELECT id, status FROM ledgerq_tasks WHERE id = ANY(CAST(:ids AS bigint[]))
UNION ALL
SELECT id, status FROM ledgerq_history WHERE id = ANY(CAST(:ids AS bigint[]))



-- name: finish
-- How attempts ended, one verdict per row, fenced like every write after a
-- claim: 'succeeded' and 'dead' move the row to history; 'retry' sends it back
-- to pending after its delay, or to history as dead once its attempts are spent.
-- transitions: running -> succeeded, running -> dead, running -> pending
WITH m AS (
    SELECT * FROM unnest(CAST(:ids AS bigint[]), CAST(:epochs AS bigint[]),
                         CAST(:verdicts AS text[]), CAST(:delays AS float8[]),
                         CAST(:errors AS text[])) AS m(id, epoch, verdict, delay, error)
), ended AS (
    DELETE FROM ledgerq_tasks t USING m
    WHERE t.id = m.id AND t.epoch = m.epoch AND t.status = 'running'
      AND (m.verdict <> 'retry' OR t.attempts >= t.max_attempts)
    RETURNING t.*, m.error AS new_error,
              CASE WHEN m.verdict = 'succeeded' THEN 'succeeded' ELSE 'dead' END AS ended_as
), buried AS (
    INSERT INTO ledgerq_history (id, kind, queue, payload, business_key, dedupe_key, priority,
                                 shard, run_at, status, attempts, max_attempts, retry, epoch,
                                 publishes, lease_until, heartbeat_at, worker, checkpoint,
                                 last_error, timeout_s, parent_id, created_at, published_at,
                                 started_at, finished_at, trace_context)
    SELECT id, kind, queue, payload, business_key, NULL, priority,
           shard, run_at, ended_as, attempts, max_attempts, retry, epoch,
           publishes, NULL, heartbeat_at, worker, checkpoint,
           COALESCE(new_error, last_error), timeout_s, parent_id, created_at, published_at,
           started_at, now(), trace_context
    FROM ended
    RETURNING id, kind, attempts, status, last_error
), retried AS (
    UPDATE ledgerq_tasks t
    SET status = 'pending', run_at = now() + make_interval(secs => m.delay),
        last_error = m.error, lease_until = NULL, worker = NULL
    FROM m
    WHERE t.id = m.id AND t.epoch = m.epoch AND t.status = 'running'
      AND m.verdict = 'retry' AND t.attempts < t.max_attempts
    RETURNING t.id, t.kind, t.attempts, t.status, t.last_error
)
SELECT id, kind, attempts, status, last_error FROM buried
UNION ALL
SELECT id, kind, attempts, status, last_error FROM retried

-- name: heartbeat
UPDATE ledgerq_tasks t
SET heartbeat_at = now(), lease_until = clock_timestamp() + make_interval(secs => :lease_s)
FROM unnest(CAST(:ids AS bigint[]), CAST(:epochs AS bigint[])) AS m(id, epoch)
WHERE t.id = m.id AND t.epoch = m.epoch AND t.status = 'running'
RETURNING t.id

-- name: save_checkpoint
UPDATE ledgerq_tasks
SET checkpoint = CAST(:checkpoint AS jsonb), heartbeat_at = now()
WHERE id = :id AND epoch = :epoch AND status = 'running'
RETURNING id




-- name: try_reconciler_lock
-- Session-level advisory lock: one reconciler acts at a time.
SELECT pg_try_advisory_lock(hashtext('ledgerq.reconciler'))

-- name: release_reconciler_lock
SELECT pg_advisory_unlock(hashtext('ledgerq.reconciler'))

-- name: select_stalled
-- Published but unclaimed for longer than the row's queue's stall window, which
-- doubles with each publication since the last claim (up to 64x), so a queue
-- with a deep backlog or no consumer is not flooded with copies. Keyset
-- pagination by id so a huge ledger is read a page at a time; the plain
-- :min_stall_s bound lets the partial index on published_at narrow the scan.
SELECT t.id, t.kind, t.queue, t.priority, t.epoch
FROM ledgerq_tasks t
LEFT JOIN unnest(CAST(:queues AS text[]), CAST(:stalls AS float8[])) AS w(queue, stall_s)
       ON w.queue = t.queue
WHERE t.status = 'published' AND t.id > :after
  AND t.published_at < now() - make_interval(secs => :min_stall_s)
  AND t.published_at < now() - make_interval(
        secs => COALESCE(w.stall_s, :default_stall_s) * power(2, LEAST(GREATEST(t.publishes - 1, 0), 6)))
ORDER BY t.id
LIMIT :limit
FOR UPDATE OF t SKIP LOCKED

-- name: select_overdue
-- Pending rows due for longer than the default stall window: the relay should
-- have published them; the reconciler stands in for a relay that is down.
SELECT id, kind, queue, priority, epoch
FROM ledgerq_tasks
WHERE status = 'pending' AND id > :after
  AND run_at < now() - make_interval(secs => :default_stall_s)
ORDER BY id
LIMIT :limit
FOR UPDATE SKIP LOCKED


-- name: select_expired
-- Running rows whose lease ran out: their worker stopped heartbeating.
SELECT id, epoch, kind, attempts, retry, worker
FROM ledgerq_tasks
WHERE status = 'running' AND lease_until < now() AND id > :after
ORDER BY id
LIMIT :limit
FOR UPDATE SKIP LOCKED

