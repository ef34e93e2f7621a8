-- The MySQL ledger's shared rules (ledger/mysql/queries.sql includes them with
-- {{name}}; ledger/sql.py splices them in when it loads the statements, as it
-- does fragments.sql's for PostgreSQL).

-- fragment: task_columns
-- Every column a task has, live or finished, but its id: the order of
-- ledgerq_history's INSERT in bury, and of show.
kind, queue, payload, business_key, dedupe_key, priority, shard, run_at, status, attempts,
max_attempts, retry, epoch, lease_until, heartbeat_at, worker, checkpoint, last_error,
timeout_s, parent_id, created_at, published_at, started_at, finished_at, publishes, suspect,
result, attempt_log, cancel_requested_at, trace_context, ordering_key, progress, route,
sticky_worker, sticky_until, expires_at, expired, tags

-- fragment: field(name)
-- A batch without unnest: the parameter :batch is one JSON object keyed by task
-- id ({"17": {"epoch": 3, ...}}), and this reads the field `name` of the row
-- t's entry, as text (SQL NULL when the entry has no such field: the caller
-- leaves a None out rather than write JSON null, which JSON_UNQUOTE would read
-- as 'null'). The statement also names the ids in an IN list, so the primary
-- key finds the rows and only the rows of the batch read it.
JSON_UNQUOTE(JSON_EXTRACT(:batch, CONCAT('$."', t.id, '".{{name}}')))

-- fragment: iso(column)
-- A DATETIME(6) (UTC) as the ISO text PostgreSQL's jsonb gives a timestamptz, for
-- the attempt log's records.
DATE_FORMAT({{column}}, '%Y-%m-%dT%H:%i:%s.%f+00:00')

-- fragment: attempt_record
-- The attempt log of the row t with its running attempt appended, as
-- PostgreSQL's finish writes it: the attempt's number, worker, start, end (:at,
-- the finish's clock reading), error and outcome (the batch's fields
-- attempt_error and outcome) and the cancel request's time, if any.
JSON_ARRAY_APPEND(COALESCE(t.attempt_log, JSON_ARRAY()), '$', JSON_OBJECT(
    'attempt', t.attempts, 'worker', t.worker, 'started_at', {{iso(t.started_at)}},
    'ended_at', {{iso(:at)}}, 'error', {{field(attempt_error)}},
    'outcome', {{field(outcome)}}, 'cancel_requested_at', {{iso(t.cancel_requested_at)}}))

-- fragment: worker_dead
-- Whether the worker of the ledgerq_workers row d is presumed dead (PostgreSQL's
-- ledgerq_worker_dead, migration 0017): its silence ran out, and another
-- worker's beat reached the database after that (silence alone is no proof:
-- after a restart every worker was silent). A worker with no row is never
-- presumed dead: its lease is its only bound.
d.beat_at + INTERVAL CAST(d.silence_s * 1000000 AS SIGNED) MICROSECOND < UTC_TIMESTAMP(6)
AND d.beat_at + INTERVAL CAST(d.silence_s * 1000000 AS SIGNED) MICROSECOND
    < (SELECT MAX(o.beat_at) FROM ledgerq_workers o WHERE o.worker <> d.worker)

-- fragment: aged
-- Whether the row t has waited long enough to go first (priority aging): due
-- :aging_us or longer (0: aging off), and never less than :min_wait_us (the
-- reconciler's overdue pick takes only rows due that long: PostgreSQL's
-- ledgerq_pick, GREATEST(p_aging_s, p_min_wait_s)).
(:aging_us > 0
 AND t.run_at <= UTC_TIMESTAMP(6) - INTERVAL GREATEST(:aging_us, :min_wait_us) MICROSECOND)

-- fragment: ready
-- Whether the pending row t may go now as far as the task itself is concerned
-- (PostgreSQL's view ledgerq_ready, migrations 0014, 0015 and 0020): neither
-- its queue nor its kind is paused (ledgerq_pauses, by primary key; probed per
-- row only when some pause is in force: the first, uncorrelated, NOT EXISTS is
-- read once per statement), and a
-- keyed task (ordering_key) has no other live task of its key ahead of it:
-- none with a smaller id (whatever its status), none published or running
-- (whatever its id): PostgreSQL's one probe (another row of the key, not
-- pending or waiting, or with a smaller id) as two, each read from migration
-- m0006's index (ordering_key, status, id) alone, without the rows. A dead or
-- cancelled task has left the hot table and holds nothing, unless it is a
-- dead task of a kind registered with ordering "block" (ledgerq_kinds.ordering,
-- migration m0010) with a smaller id that no operator released
-- (ledgerq_key_releases, by its epoch): that holds the key's later tasks. The
-- history probe (migration m0010's index, ordering_key, status, id) is made
-- only while some kind blocks (the uncorrelated NOT EXISTS, read once).
(NOT EXISTS (SELECT 1 FROM ledgerq_pauses)
 OR (NOT EXISTS (SELECT 1 FROM ledgerq_pauses p WHERE p.scope = 'queue' AND p.name = t.queue)
     AND NOT EXISTS (SELECT 1 FROM ledgerq_pauses p WHERE p.scope = 'kind' AND p.name = t.kind)))
AND (t.ordering_key IS NULL
     OR (NOT EXISTS (SELECT 1 FROM ledgerq_tasks e
                     WHERE e.ordering_key = t.ordering_key AND e.id < t.id)
         AND NOT EXISTS (SELECT 1 FROM ledgerq_tasks e
                         WHERE e.ordering_key = t.ordering_key
                           AND e.status IN ('published', 'running'))
         AND (NOT EXISTS (SELECT 1 FROM ledgerq_kinds b WHERE b.ordering = 'block')
              OR NOT EXISTS ({{key_holders(t.ordering_key, AND h.id < t.id)}}))))

-- fragment: key_holders(key, tail)
-- The dead tasks that hold ordering key `key`: of a kind registered with
-- ordering "block", not released by an operator under their epoch
-- (PostgreSQL's key_holders, operations.sql, and its view ledgerq_ready);
-- `tail` ends the statement (a further condition, or an order).
SELECT h.id, h.epoch, h.kind
FROM ledgerq_history h
WHERE h.ordering_key = {{key}} AND h.status = 'dead'
  AND h.kind IN (SELECT b.kind FROM ledgerq_kinds b WHERE b.ordering = 'block')
  AND NOT EXISTS (SELECT 1 FROM ledgerq_key_releases r
                  WHERE r.task_id = h.id AND r.epoch = h.epoch)
  {{tail}}

-- fragment: held
-- Whether the pending row t is held for its sticky_worker (a retry of a kind
-- with @task(sticky_retry=...), queries.sql retry_tasks; PostgreSQL's view
-- ledgerq_ready, sticky_to, migration 0018): its sticky_until is ahead and that
-- worker has a live personal subscription of its queue (a sticky_route, not
-- expired, not --direct, not presumed dead: fragment worker_dead). Otherwise
-- the hold has lapsed and the row is anyone's. Probed only for a row with a
-- sticky_worker (a retry of a sticky kind), by the subscriptions' primary key.
(t.sticky_worker IS NOT NULL AND t.sticky_until > UTC_TIMESTAMP(6)
 AND EXISTS (SELECT 1 FROM ledgerq_subscriptions s
             WHERE s.worker = t.sticky_worker AND s.queue = t.queue
               AND s.sticky_route IS NOT NULL AND NOT s.direct
               AND s.expires_at > UTC_TIMESTAMP(6)
               AND NOT EXISTS (SELECT 1 FROM ledgerq_workers d
                               WHERE d.worker = s.worker AND {{worker_dead}})))

-- fragment: due_lane(priority, attempts)
-- One lane of the pick: the due pending rows of one priority, first attempts
-- (attempts "= 0") or retries ("> 0"), oldest first, at most :limit, that are
-- ready (fragment ready: not paused, first of their ordering key) and held for
-- nobody (fragment held: a held row goes only to its worker's window,
-- held_pick); the rest
-- of the pick's conditions as due_pick says. Read along the pick index
-- (migration m0005: status, queue, priority, attempts, run_at, id): a lane of
-- first attempts in its order, stopping after :limit ready rows; a lane of
-- retries (few, as a rule) sorted. Never the queue's whole backlog, unless
-- most of it is not ready (a paused kind's rows are read and passed over, as
-- PostgreSQL's pick reads them through its view).
(SELECT t.id, t.kind, t.queue, t.priority, t.epoch, t.suspect, t.trace_context, t.attempts,
        t.run_at
 FROM ledgerq_tasks t
 WHERE t.status = 'pending' AND t.queue IN :queues AND t.priority = {{priority}}
   AND t.attempts {{attempts}}
   AND (:every_kind OR t.kind IN :kinds)
   AND (:every_shard OR t.shard IN :shards)
   AND (:none_excluded OR t.kind NOT IN :excluded)
   AND t.run_at <= UTC_TIMESTAMP(6) - INTERVAL :min_wait_us MICROSECOND
   AND {{ready}}
   AND NOT {{held}}
 ORDER BY t.run_at, t.id
 LIMIT :limit)

-- fragment: due_pick
-- The one rule that picks due tasks on MySQL (PostgreSQL's ledgerq_pick: pauses,
-- ordering keys and ordering that blocks honoured, fragment ready; a row held
-- for a worker's sticky retry left to that worker's window, fragment held and
-- held_pick, until its hold lapses; an expired row
-- is picked, and its claim ends it, as on PostgreSQL; a rate-limited kind is
-- in :excluded of the ordinary pick and read by this rule for itself alone,
-- within its bucket: ledger/mysql/metering.py): for the
-- relay and the reconciler standing in
-- for it, one live broker route's window at a time (relay.sql pick_window), and
-- for the direct claim (queries.sql due_candidates). The due pending rows of
-- :queues whose kind is in :kinds (unless :every_kind), whose shard is in
-- :shards (unless :every_shard), whose kind is not in :excluded (unless
-- :none_excluded: the kinds a live --direct worker of the queue claims itself),
-- due for :min_wait_us or longer; aged rows first, oldest first (reported at
-- priority 9, aged = 1), then by priority, never-run tasks before retries,
-- then due time and id; at most :limit. A plain read: the caller locks the rows
-- it keeps by primary key (FOR UPDATE SKIP LOCKED) and re-checks them there.
-- The rows come from the twenty lanes (priorities 9 to 0, first attempts and
-- retries: priorities are 0-9), each its :limit oldest: the :limit first rows
-- of the order are among them, since every row older than one of them in its
-- lane comes before it in the order too. Only those are sorted here.
SELECT t.*, {{aged}} AS aged
FROM ({{due_lane(9, = 0)}}
    UNION ALL {{due_lane(9, > 0)}}
    UNION ALL {{due_lane(8, = 0)}}
    UNION ALL {{due_lane(8, > 0)}}
    UNION ALL {{due_lane(7, = 0)}}
    UNION ALL {{due_lane(7, > 0)}}
    UNION ALL {{due_lane(6, = 0)}}
    UNION ALL {{due_lane(6, > 0)}}
    UNION ALL {{due_lane(5, = 0)}}
    UNION ALL {{due_lane(5, > 0)}}
    UNION ALL {{due_lane(4, = 0)}}
    UNION ALL {{due_lane(4, > 0)}}
    UNION ALL {{due_lane(3, = 0)}}
    UNION ALL {{due_lane(3, > 0)}}
    UNION ALL {{due_lane(2, = 0)}}
    UNION ALL {{due_lane(2, > 0)}}
    UNION ALL {{due_lane(1, = 0)}}
    UNION ALL {{due_lane(1, > 0)}}
    UNION ALL {{due_lane(0, = 0)}}
    UNION ALL {{due_lane(0, > 0)}}) t
ORDER BY {{aged}} DESC, CASE WHEN {{aged}} THEN 10 ELSE t.priority END DESC,
         (NOT {{aged}} AND t.attempts > 0), t.run_at, t.id
LIMIT :limit

-- fragment: held_pick
-- A worker's personal window (its sticky_route; PostgreSQL's ledgerq_pick's
-- fourth scan, migration 0018): the rows of :queues held for :held_for
-- (fragment held), of :kinds, :shards, not :excluded, due for :min_wait_us
-- or longer and ready, in due_pick's order and columns, at most :limit. Read
-- through the index ledgerq_tasks_held (sticky_worker, status, queue,
-- migration m0011): only the worker's held retries, never the due set.
SELECT t.id, t.kind, t.queue, t.priority, t.epoch, t.suspect, t.trace_context, t.attempts,
       t.run_at, {{aged}} AS aged
FROM ledgerq_tasks t
WHERE t.sticky_worker = :held_for AND t.status = 'pending' AND t.queue IN :queues
  AND (:every_kind OR t.kind IN :kinds)
  AND (:every_shard OR t.shard IN :shards)
  AND (:none_excluded OR t.kind NOT IN :excluded)
  AND t.run_at <= UTC_TIMESTAMP(6) - INTERVAL :min_wait_us MICROSECOND
  AND {{ready}}
  AND {{held}}
ORDER BY {{aged}} DESC, CASE WHEN {{aged}} THEN 10 ELSE t.priority END DESC,
         (NOT {{aged}} AND t.attempts > 0), t.run_at, t.id
LIMIT :limit

-- fragment: route_served
-- Whether a live broker route serves the row t where it was published (its
-- queue and route, '' for the queue's own, or a worker's personal route for a
-- sticky retry): a live subscription that is not --direct, and no live
-- --direct worker claiming the whole queue itself (PostgreSQL's view
-- ledgerq_windows).
(EXISTS (SELECT 1 FROM ledgerq_subscriptions s
         WHERE s.queue = t.queue
           AND (COALESCE(s.route, '') = COALESCE(t.route, '') OR s.sticky_route = t.route)
           AND NOT s.direct AND s.expires_at > UTC_TIMESTAMP(6))
 AND NOT EXISTS (SELECT 1 FROM ledgerq_subscriptions d
                 WHERE d.queue = t.queue AND d.direct AND d.kinds IS NULL
                   AND d.expires_at > UTC_TIMESTAMP(6)))
