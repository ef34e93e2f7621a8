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
