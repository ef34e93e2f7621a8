-- The MySQL / MariaDB ledger's statements, by name (ledger/mysql/queries.py loads
-- them as MyQueries through ledger/sql.py; fragments from ledger/mysql/fragments.sql).
--
-- What MySQL lacks, and what stands in for it:
-- - no RETURNING (MariaDB has it for INSERT and DELETE, not UPDATE; MySQL has
--   none): a write locks its rows first (SELECT ... FOR UPDATE, by primary
--   key), then writes them by id, then reads what it needs, in one
--   transaction; an insert's id is the driver's lastrowid.
-- - no unnest: a batch is a JSON object keyed by task id (:batch, fragment
--   field) beside an IN list of its ids (:ids, expanded by SQLAlchemy into one
--   placeholder per id).
-- - no ON CONFLICT DO NOTHING: a plain INSERT whose duplicate-key error (1062)
--   rolls back that statement only, caught by the plan, which then reads the
--   row it met with a lock (see insert_task). Not ON DUPLICATE KEY UPDATE: on
--   MariaDB it needs the UPDATE privilege on every inserted column.
-- Every timestamp is UTC_TIMESTAMP(6), never NOW(): a caller's connection in
-- another time zone writes the same values. Intervals are bound as whole
-- microseconds (:delay_us, :lease_us).
--
-- Every statement that changes a task's status says so in a
-- "-- transitions: from -> to" line, as queries.sql's do.

-- name: insert_task
-- The producer's insert, on the caller's connection: a plain INSERT, so a
-- producer needs the INSERT privilege on these columns and no UPDATE (an
-- upsert's ON DUPLICATE KEY UPDATE asks MariaDB for UPDATE on every column it
-- inserts, status included). With unique=True (a dedupe_key), a live task of
-- the same kind and key makes it fail with a duplicate key (1062), which rolls
-- back this statement only: the plan catches it and meets the holder
-- (live_task_by_key). A producer racing on the same key waits on the unique
-- index until the other one commits (then its insert fails and it meets the
-- task) or rolls back (then it inserts).
-- shard: the given one, else 0; with several shards and none given the caller
-- sets it from the new id afterwards (shard_task). expires_at: the given time,
-- else :expires_us from now (NULL, no expiry, when neither is given).
-- transitions: -> pending
INSERT INTO ledgerq_tasks (kind, queue, payload, business_key, dedupe_key, priority, shard,
                           run_at, status, max_attempts, retry, timeout_s, parent_id,
                           trace_context, ordering_key, expires_at, tags, created_at)
VALUES (:kind, :queue, :payload, :business_key, :dedupe_key, :priority, COALESCE(:shard, 0),
        COALESCE(:run_at, UTC_TIMESTAMP(6) + INTERVAL :delay_us MICROSECOND), 'pending',
        :max_attempts, :retry, :timeout_s, :parent_id, :trace_context, :ordering_key,
        COALESCE(:expires_at, UTC_TIMESTAMP(6) + INTERVAL :expires_us MICROSECOND), :tags,
        UTC_TIMESTAMP(6))

-- name: live_task_by_key
-- The live task holding a de-duplication key, after an insert met it. A locking
-- read: the latest committed row whatever snapshot the caller's REPEATABLE READ
-- transaction holds, share-locked until the producer's transaction ends (a
-- worker's finish of it waits for that commit). Shared, not FOR UPDATE: the
-- failed insert's duplicate check already holds a shared lock on the key, and
-- so do the other producers that met it at once; asking for an exclusive lock
-- on top would deadlock them against each other. No row: it finished meanwhile
-- (history keeps no dedupe_key), and the insert is tried again.
SELECT id FROM ledgerq_tasks
WHERE kind = :kind AND dedupe_key = :dedupe_key
LOCK IN SHARE MODE

-- name: shard_task
-- A new task's shard from its id (id modulo LEDGERQ_SHARDS), as PostgreSQL's
-- insert takes it from the sequence before it inserts.
UPDATE ledgerq_tasks SET shard = id % :shards WHERE id = :id

-- name: take_once_key
-- once=True: the permanent key is taken first, in the producer's transaction.
-- A plain INSERT: a key held already (by a task that may have finished or been
-- purged) fails it with a duplicate key (1062, this statement rolled back
-- only), and the holder's id is then once_task_id's.
INSERT INTO ledgerq_unique_keys (kind, business_key, task_id, created_at)
VALUES (:kind, :business_key, NULL, UTC_TIMESTAMP(6))

-- name: once_task_id
-- The task holding a permanent key, after take_once_key met it. A locking read:
-- the latest committed value, whatever snapshot the caller's REPEATABLE READ
-- transaction holds; shared, as live_task_by_key's (the producers that met the
-- key at once all hold a shared lock on it already).
SELECT task_id FROM ledgerq_unique_keys
WHERE kind = :kind AND business_key = :business_key
LOCK IN SHARE MODE

-- name: set_once_task
UPDATE ledgerq_unique_keys SET task_id = :task_id
WHERE kind = :kind AND business_key = :business_key

-- name: due_candidates
-- The direct claim's first step (claim_due): the due pending tasks of :queues
-- (and :kinds, unless :every_kind), picked by the relay's rule (fragment
-- due_pick, every shard, nothing excluded, no wait), read without a lock.
{{due_pick}}

-- name: lock_due
-- The direct claim's second step: lock the candidates still pending, due and
-- ready (fragment ready: not paused, first of their ordering key), skipping
-- any row another transaction holds (another worker claiming it, a relay
-- publishing it). By primary key only: nothing else is locked. The ready
-- re-check reads the latest committed rows (a plain read inside the locking
-- one, under READ COMMITTED), so a pause or a claim of an earlier task of the
-- key committed since the candidates were read stops the row here.
SELECT t.id
FROM ledgerq_tasks t
WHERE t.id IN :ids AND t.status = 'pending' AND t.run_at <= UTC_TIMESTAMP(6) AND {{ready}}
ORDER BY t.id
FOR UPDATE SKIP LOCKED

-- name: lock_fenced
-- The broker path's claim, first step: lock the rows of :ids whose epoch is
-- still the message's (:batch's field epoch), pending or published, and due
-- (a forged or early message claims nothing). It waits for a row another
-- transaction holds, as PostgreSQL's claim does.
SELECT t.id
FROM ledgerq_tasks t
WHERE t.id IN :ids AND t.epoch = CAST({{field(epoch)}} AS SIGNED)
  AND t.status IN ('pending', 'published') AND t.run_at <= UTC_TIMESTAMP(6)
ORDER BY t.id
FOR UPDATE

-- name: claim_locked
-- Both claims' write, on the rows the caller locked: running, the epoch bumped
-- (a message of the old epoch claims nothing afterwards), one more attempt,
-- the publication count reset, start, heartbeat and lease on this statement's
-- clock, the worker. At a task's first claim what the producer left unset
-- (max_attempts, retry, timeout_s) is filled from its kind's defaults
-- (ledgerq_kinds, written by the workers), max_attempts else 5: PostgreSQL's
-- BEFORE UPDATE trigger (migration 0019), written into the SET here. MySQL
-- assigns a single-table UPDATE's columns left to right, so the defaults come
-- first, while attempts is still the old count.
-- transitions: pending -> running, published -> running
UPDATE ledgerq_tasks t
SET t.max_attempts = CASE WHEN t.attempts = 0 THEN COALESCE(
        t.max_attempts, (SELECT k.max_attempts FROM ledgerq_kinds k WHERE k.kind = t.kind), 5)
        ELSE t.max_attempts END,
    t.retry = CASE WHEN t.attempts = 0 THEN COALESCE(
        t.retry, (SELECT k.retry FROM ledgerq_kinds k WHERE k.kind = t.kind))
        ELSE t.retry END,
    t.timeout_s = CASE WHEN t.attempts = 0 THEN COALESCE(
        t.timeout_s, (SELECT k.timeout_s FROM ledgerq_kinds k WHERE k.kind = t.kind))
        ELSE t.timeout_s END,
    t.status = 'running', t.epoch = t.epoch + 1, t.attempts = t.attempts + 1, t.publishes = 0,
    t.started_at = UTC_TIMESTAMP(6), t.heartbeat_at = UTC_TIMESTAMP(6),
    t.lease_until = UTC_TIMESTAMP(6) + INTERVAL :lease_us MICROSECOND, t.worker = :worker
WHERE t.id IN :ids

-- name: claimed
-- What a claim answers of the rows it won (claim_locked, same transaction): the
-- payload as text, unless larger than :max_payload_bytes (NULL; payload_bytes
-- says why, and the worker ends the task dead without running it); waited_s,
-- from when the task became due to the claim, on the database's clock.
SELECT t.id, t.epoch, t.kind, t.queue,
       CASE WHEN LENGTH(t.payload) <= :max_payload_bytes THEN t.payload END AS payload_text,
       LENGTH(t.payload) AS payload_bytes, t.attempts, t.max_attempts, t.retry, t.timeout_s,
       t.checkpoint, t.business_key, t.parent_id,
       TIMESTAMPDIFF(MICROSECOND, GREATEST(t.created_at, t.run_at), t.started_at) / 1000000.0
           AS waited_s,
       t.trace_context
FROM ledgerq_tasks t
WHERE t.id IN :ids
ORDER BY t.id

-- name: whereabouts
-- Where the tasks named by deliveries that lost their claim are now.
SELECT id, status FROM ledgerq_tasks WHERE id IN :ids
UNION ALL
SELECT id, status FROM ledgerq_history WHERE id IN :ids

-- name: lock_finishing
-- finish, first step: lock the rows of :ids still running under their
-- fences (:batch's field epoch), and decide, once, where each goes for its
-- verdict (:batch's field verdict): ended_as is its status in history, or NULL
-- for a retry (attempts left, no cancel asked: back to pending) or a release
-- (the reconciler's: back to pending, the attempt uncharged). A success or a
-- death stands even when a cancel was requested; a retry or a release of a
-- task an operator asked to stop ends it cancelled (a cancelled task is never
-- retried). The rows stay locked to the transaction's end, so the decision
-- holds for the statements that carry it out (bury, delete_ended,
-- retry_tasks). at: the database's clock, the attempts' end, passed back to them as :at.
SELECT t.id, t.kind, t.attempts, t.last_error,
       CASE WHEN {{field(verdict)}} = 'succeeded' THEN 'succeeded'
            WHEN {{field(verdict)}} = 'cancelled' THEN 'cancelled'
            WHEN {{field(verdict)}} IN ('retry', 'release')
                 AND t.cancel_requested_at IS NOT NULL THEN 'cancelled'
            WHEN {{field(verdict)}} = 'dead' THEN 'dead'
            WHEN {{field(verdict)}} = 'retry' AND t.attempts >= t.max_attempts THEN 'dead'
            END AS ended_as,
       UTC_TIMESTAMP(6) AS at
FROM ledgerq_tasks t
WHERE t.id IN :ids AND t.epoch = CAST({{field(epoch)}} AS SIGNED) AND t.status = 'running'
ORDER BY t.id
FOR UPDATE

-- name: bury
-- The history rows of the locked tasks that end (:ids): every column, written
-- once here. From :batch: ended_as (the status), error (the attempt's, else
-- the task's last), result (the handler's JSON, text), attempt_error and
-- outcome (the attempt's record, appended to the log). A finished task has no
-- lease and no de-duplication key (its key is free for a new task), and is held
-- for nobody (sticky_worker, sticky_until NULL, as PostgreSQL's history insert).
-- transitions: running -> succeeded, running -> cancelled, running -> dead
INSERT INTO ledgerq_history (id, {{task_columns}})
SELECT t.id, t.kind, t.queue, t.payload, t.business_key, NULL, t.priority, t.shard, t.run_at,
       {{field(ended_as)}}, t.attempts, t.max_attempts, t.retry, t.epoch, NULL, t.heartbeat_at,
       t.worker, t.checkpoint, COALESCE({{field(error)}}, t.last_error), t.timeout_s,
       t.parent_id, t.created_at, t.published_at, t.started_at, :at, t.publishes, t.suspect,
       {{field(result)}}, {{attempt_record}}, t.cancel_requested_at, t.trace_context,
       t.ordering_key, t.progress, t.route, NULL, NULL, t.expires_at, FALSE, t.tags
FROM ledgerq_tasks t
WHERE t.id IN :ids

-- name: delete_ended
-- The rows bury copied leave the hot table (locked since lock_finishing).
DELETE FROM ledgerq_tasks WHERE id IN :ids

-- name: retry_tasks
-- The locked tasks that go back to pending (:ids): after their delay (:batch's
-- delay_us) from the finish's clock (:at), their error kept, lease and worker
-- cleared; a release (:batch's outcome 'released') uncharges the attempt and
-- marks the task suspect. The attempt's record is appended first (MySQL assigns
-- left to right: it reads the attempt and worker before they change).
-- A retry of a kind with @task(sticky_retry=s) (ledgerq_kinds.sticky_s,
-- migration m0011) is held for the attempt's worker (sticky_worker) until s
-- seconds after it is due (sticky_until; the pick reads both: fragments.sql
-- held); any other retry, and a release, for nobody. Both are assigned before
-- the worker is cleared (MySQL assigns left to right).
-- transitions: running -> pending
UPDATE ledgerq_tasks t
SET t.attempt_log = {{attempt_record}},
    t.sticky_worker = CASE WHEN {{field(outcome)}} = 'retry' AND EXISTS (
        SELECT 1 FROM ledgerq_kinds k WHERE k.kind = t.kind AND k.sticky_s IS NOT NULL)
        THEN t.worker END,
    t.sticky_until = CASE WHEN {{field(outcome)}} = 'retry' THEN
        :at + INTERVAL CAST({{field(delay_us)}} AS SIGNED) MICROSECOND
            + INTERVAL CAST((SELECT k.sticky_s FROM ledgerq_kinds k WHERE k.kind = t.kind)
                            * 1000000 AS SIGNED) MICROSECOND END,
    t.status = 'pending',
    t.run_at = :at + INTERVAL CAST({{field(delay_us)}} AS SIGNED) MICROSECOND,
    t.last_error = {{field(error)}}, t.lease_until = NULL, t.worker = NULL,
    t.attempts = CASE WHEN {{field(outcome)}} = 'released' THEN GREATEST(t.attempts - 1, 0)
                      ELSE t.attempts END,
    t.suspect = t.suspect OR {{field(outcome)}} = 'released'
WHERE t.id IN :ids

-- name: lock_beating
-- heartbeat, first step: the rows of :ids still running under their fences,
-- locked unless another transaction holds them (SKIP LOCKED: one long
-- transaction never holds up the beat of every other task), and whether an
-- operator asked each to stop.
SELECT t.id, t.cancel_requested_at IS NOT NULL AS cancel_requested
FROM ledgerq_tasks t
WHERE t.id IN :ids AND t.epoch = CAST({{field(epoch)}} AS SIGNED) AND t.status = 'running'
ORDER BY t.id
FOR UPDATE SKIP LOCKED

-- name: still_running
-- heartbeat: the rows of :ids still running under their fences, locked or not
-- (a plain read): those lock_beating skipped are busy, not lost.
SELECT t.id
FROM ledgerq_tasks t
WHERE t.id IN :ids AND t.epoch = CAST({{field(epoch)}} AS SIGNED) AND t.status = 'running'

-- name: beat
-- heartbeat's write, on the rows lock_beating locked: the lease extended from
-- now, the progress reported since the last beat (:batch's field progress,
-- JSON text; absent: the stored one stays).
UPDATE ledgerq_tasks t
SET t.heartbeat_at = UTC_TIMESTAMP(6),
    t.lease_until = UTC_TIMESTAMP(6) + INTERVAL :lease_us MICROSECOND,
    t.progress = COALESCE({{field(progress)}}, t.progress)
WHERE t.id IN :ids

-- name: save_checkpoint
UPDATE ledgerq_tasks
SET checkpoint = :checkpoint, heartbeat_at = UTC_TIMESTAMP(6)
WHERE id = :id AND epoch = :epoch AND status = 'running'

-- name: show_task
-- One task, live or finished, every column (but the upsert's duplicates count).
SELECT id, {{task_columns}}, 'live' AS location FROM ledgerq_tasks WHERE id = :id
UNION ALL
SELECT id, {{task_columns}}, 'history' AS location FROM ledgerq_history WHERE id = :id

-- name: try_reconciler_lock
-- A named lock, held by the session that took it (not by a transaction):
-- one reconciler acts at a time on this database. 0: do not wait for it. A
-- lock's name is the server's, not the database's: the name carries the
-- database's digest, so the ledgers of two databases on one server (two
-- deployments, or two ledger shards) never skip each other's passes.
SELECT GET_LOCK(CONCAT('ledgerq.reconciler.', MD5(DATABASE())), 0)

-- name: release_reconciler_lock
SELECT RELEASE_LOCK(CONCAT('ledgerq.reconciler.', MD5(DATABASE())))

-- name: silent_workers
-- Workers every one of whose running rows has an expired lease, and how many
-- rows each left behind (read once per pass, before the pages; see
-- queries.sql's silent_workers for why).
SELECT worker, COUNT(*) AS in_flight
FROM ledgerq_tasks
WHERE status = 'running' AND worker IS NOT NULL
GROUP BY worker
HAVING MAX(lease_until) < UTC_TIMESTAMP(6)

-- name: dead_workers
-- Workers presumed dead (fragment worker_dead) that still have running rows,
-- and how many each left: rescued at once (select_orphaned), leases or not.
SELECT t.worker, COUNT(*) AS in_flight
FROM ledgerq_tasks t
JOIN ledgerq_workers d ON d.worker = t.worker
WHERE t.status = 'running' AND t.lease_until IS NOT NULL AND {{worker_dead}}
GROUP BY t.worker

-- name: lapse_dead_subscriptions
-- The subscriptions of workers presumed dead expire now.
UPDATE ledgerq_subscriptions s
JOIN ledgerq_workers d ON d.worker = s.worker
SET s.expires_at = UTC_TIMESTAMP(6)
WHERE s.expires_at > UTC_TIMESTAMP(6) AND {{worker_dead}}

-- name: select_orphaned
-- A page (ids above :after) of the running rows of :workers (dead_workers'),
-- whose worker is still presumed dead, locked for the page's finish (rows
-- another transaction holds are left to the next pass).
SELECT t.id, t.epoch, t.kind, t.attempts, t.retry, t.worker
FROM ledgerq_tasks t
WHERE t.status = 'running' AND t.lease_until IS NOT NULL AND t.id > :after
  AND t.worker IN :workers
  AND EXISTS (SELECT 1 FROM ledgerq_workers d WHERE d.worker = t.worker AND {{worker_dead}})
ORDER BY t.id
LIMIT :limit
FOR UPDATE SKIP LOCKED

-- name: select_expired
-- A page (ids above :after) of running rows whose lease ran out, whose worker
-- is one of :workers (all its leases ran out: silent_workers') or whose own
-- lease ran out over :settle_us ago; a row with no worker is judged alone.
-- Locked for the page's finish.
SELECT t.id, t.epoch, t.kind, t.attempts, t.retry, t.worker
FROM ledgerq_tasks t
WHERE t.status = 'running' AND t.lease_until < UTC_TIMESTAMP(6) AND t.id > :after
  AND (t.worker IS NULL OR t.worker IN :workers
       OR t.lease_until < UTC_TIMESTAMP(6) - INTERVAL :settle_us MICROSECOND)
ORDER BY t.id
LIMIT :limit
FOR UPDATE SKIP LOCKED

-- name: count_expired
-- Running rows whose lease ran out (what the next rescue will judge).
SELECT COUNT(*) FROM ledgerq_tasks WHERE status = 'running' AND lease_until < UTC_TIMESTAMP(6)

-- name: stats_live
-- Counts by status and kind (ledgerq stats), live ...
SELECT status, kind, COUNT(*) AS n FROM ledgerq_tasks GROUP BY status, kind

-- name: stats_history
-- ... and finished.
SELECT status, kind, COUNT(*) AS n FROM ledgerq_history GROUP BY status, kind

-- name: ping
-- The readiness probe's question: is the ledger reachable and its table there?
SELECT COUNT(*) > 0 AS ok FROM information_schema.tables
WHERE table_schema = DATABASE() AND table_name = 'ledgerq_tasks'

-- name: kind_defaults
-- The stored defaults of :kinds (register_defaults compares them first).
SELECT kind, max_attempts, retry, timeout_s FROM ledgerq_kinds WHERE kind IN :kinds

-- name: set_kind_defaults
-- A kind's defaults, written by a worker at its start when they differ from
-- the stored ones (the latest worker to start stands).
INSERT INTO ledgerq_kinds (kind, max_attempts, retry, timeout_s, updated_at)
VALUES (:kind, :max_attempts, :retry, :timeout_s, UTC_TIMESTAMP(6))
ON DUPLICATE KEY UPDATE max_attempts = :max_attempts, retry = :retry, timeout_s = :timeout_s,
                        updated_at = UTC_TIMESTAMP(6)

-- name: drop_subscriptions
-- subscribe: the worker's rows for queues it no longer consumes go.
DELETE FROM ledgerq_subscriptions WHERE worker = :worker AND queue NOT IN :queues

-- name: subscribe
-- One of a worker's subscriptions (run once per queue), (re)written with a new
-- expiry; kinds and shards as JSON arrays (NULL: all).
INSERT INTO ledgerq_subscriptions (worker, queue, kinds, shards, route, started_at, expires_at,
                                   capacity, direct, sticky_route)
VALUES (:worker, :queue, :kinds, :shards, :route, UTC_TIMESTAMP(6),
        UTC_TIMESTAMP(6) + INTERVAL :ttl_us MICROSECOND, :capacity, :direct, :sticky)
ON DUPLICATE KEY UPDATE kinds = :kinds, shards = :shards, route = :route,
    expires_at = UTC_TIMESTAMP(6) + INTERVAL :ttl_us MICROSECOND, capacity = :capacity,
    direct = :direct, sticky_route = :sticky

-- name: drop_stale_subscriptions
-- Rows that expired a week ago, of any worker (their workers are long gone).
DELETE FROM ledgerq_subscriptions WHERE expires_at < UTC_TIMESTAMP(6) - INTERVAL 7 DAY

-- name: unsubscribe
-- A worker that stops: its rows expire now but stay (their queues stay routed).
UPDATE ledgerq_subscriptions SET expires_at = UTC_TIMESTAMP(6) WHERE worker = :worker

-- name: worker_alive
-- A worker's liveness beat.
INSERT INTO ledgerq_workers (worker, started_at, beat_at, silence_s)
VALUES (:worker, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), :silence_s)
ON DUPLICATE KEY UPDATE beat_at = UTC_TIMESTAMP(6), silence_s = :silence_s

-- name: drop_stale_workers
-- Rows of workers gone over a week ago.
DELETE FROM ledgerq_workers WHERE beat_at < UTC_TIMESTAMP(6) - INTERVAL 7 DAY

-- name: worker_gone
-- A worker that stopped: presumed dead at once.
UPDATE ledgerq_workers SET beat_at = UTC_TIMESTAMP(6), silence_s = 0 WHERE worker = :worker

-- name: pool_members
-- The live members of a `--shards auto` pool: the workers whose id ends with
-- the pool's tag, not gone, whose last beat is within their silence.
SELECT worker FROM ledgerq_workers
WHERE RIGHT(worker, CHAR_LENGTH(:tag)) = :tag AND silence_s > 0
  AND beat_at >= UTC_TIMESTAMP(6) - INTERVAL CAST(silence_s * 1000000 AS SIGNED) MICROSECOND
ORDER BY worker

-- name: backdate
-- The testing protocol: one of a live task's timestamps set :offset_us before
-- now (negative: after). Only the named column moves.
UPDATE ledgerq_tasks
SET run_at = CASE WHEN :column = 'run_at'
                  THEN UTC_TIMESTAMP(6) - INTERVAL :offset_us MICROSECOND ELSE run_at END,
    published_at = CASE WHEN :column = 'published_at'
                        THEN UTC_TIMESTAMP(6) - INTERVAL :offset_us MICROSECOND
                        ELSE published_at END,
    lease_until = CASE WHEN :column = 'lease_until'
                       THEN UTC_TIMESTAMP(6) - INTERVAL :offset_us MICROSECOND
                       ELSE lease_until END,
    expires_at = CASE WHEN :column = 'expires_at'
                      THEN UTC_TIMESTAMP(6) - INTERVAL :offset_us MICROSECOND
                      ELSE expires_at END
WHERE id IN :ids

-- name: truncate_tasks
-- The testing protocol's truncate: every task, live and finished, every
-- permanent key, the kinds' defaults (DELETE, not TRUNCATE: ids keep growing,
-- as PostgreSQL's sequence does, and no implicit commit).
DELETE FROM ledgerq_tasks

-- name: truncate_history
DELETE FROM ledgerq_history

-- name: truncate_keys
DELETE FROM ledgerq_unique_keys

-- name: truncate_kinds
DELETE FROM ledgerq_kinds

-- name: truncate_subscriptions
-- The workers' subscriptions and liveness rows (unless the caller keeps them).
DELETE FROM ledgerq_subscriptions

-- name: truncate_workers
DELETE FROM ledgerq_workers
