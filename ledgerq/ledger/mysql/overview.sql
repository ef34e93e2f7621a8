-- The dashboard's overview and task page on the MySQL / MariaDB ledger
-- (ledger/mysql/overview.py): PostgreSQL's overview.sql in MySQL's SQL, without
-- the rollup. The MySQL ledger has no rollup tables, so everything over time is
-- read from history since :since, through its finished_at index: exact, and its
-- cost grows with what finished in the window (retention bounds it). Nothing
-- here changes anything. Timestamps are DATETIME(6) in UTC; :since is bound
-- naive UTC.

-- name: live_counts
-- Per queue and kind, from the hot table: pending, of them due now (the
-- relay's backlog) and the oldest due one's age, published (in the broker),
-- running, and waiting (enqueued with after=; none on this ledger yet). A
-- pending task due later counts as scheduled.
SELECT queue, kind,
       SUM(status = 'pending') AS pending,
       SUM(status = 'pending' AND run_at <= UTC_TIMESTAMP(6)) AS due,
       SUM(status = 'pending' AND run_at > UTC_TIMESTAMP(6)) AS scheduled,
       SUM(status = 'published') AS published,
       SUM(status = 'running') AS running,
       SUM(status = 'waiting') AS waiting,
       TIMESTAMPDIFF(MICROSECOND,
                     MIN(CASE WHEN status = 'pending' AND run_at <= UTC_TIMESTAMP(6)
                              THEN run_at END),
                     UTC_TIMESTAMP(6)) / 1000000 AS oldest_due_s
FROM ledgerq_tasks
GROUP BY queue, kind
ORDER BY queue, kind

-- name: throughput
-- Finished tasks per :step_s bin since :since (bins start at :since, as
-- PostgreSQL's date_bin), by status.
SELECT DATE_ADD(CAST(:since AS DATETIME(6)), INTERVAL FLOOR(TIMESTAMPDIFF(MICROSECOND, :since, h.finished_at)
                                       / (:step_s * 1000000)) * :step_s SECOND) AS at,
       h.status, COUNT(*) AS n
FROM ledgerq_history h
WHERE h.finished_at >= :since
GROUP BY 1, 2
ORDER BY 1, 2

-- name: latency
-- Latency histogram buckets per kind and hop since :since: each finished task's
-- four hops (PostgreSQL's ledgerq_hops: due to published, published to started,
-- started to finished, created to finished; a hop it never took is left out),
-- each in its log-scale bucket (PostgreSQL's ledgerq_latency_bucket, Python's
-- ledgerq.ledger.rollup.bucket_of).
SELECT t.kind, t.hop,
       LEAST(47, GREATEST(0, FLOOR(2 * LOG2(GREATEST(t.seconds, 0.0001) / 0.001)) + 1))
           AS bucket,
       COUNT(*) AS n
FROM (
    SELECT h.kind, x.hop,
           CASE x.hop
               WHEN 'due_publish' THEN TIMESTAMPDIFF(MICROSECOND, GREATEST(h.created_at, h.run_at),
                                                     h.published_at)
               WHEN 'publish_start' THEN TIMESTAMPDIFF(MICROSECOND, h.published_at, h.started_at)
               WHEN 'start_end' THEN TIMESTAMPDIFF(MICROSECOND, h.started_at, h.finished_at)
               ELSE TIMESTAMPDIFF(MICROSECOND, h.created_at, h.finished_at)
           END / 1000000 AS seconds
    FROM ledgerq_history h
    CROSS JOIN (SELECT 'due_publish' AS hop UNION ALL SELECT 'publish_start'
                UNION ALL SELECT 'start_end' UNION ALL SELECT 'total') x
    WHERE h.finished_at >= :since
) t
WHERE t.seconds IS NOT NULL
GROUP BY t.kind, t.hop, bucket
ORDER BY t.kind, t.hop, bucket

-- name: dead_errors
-- Dead tasks since :since grouped by their error's last line (PostgreSQL's
-- ledgerq_error_line: spaces and newlines trimmed, the last line, 200
-- characters) and kind, most common first, with the minute the last one died.
SELECT t.error, t.kind, COUNT(*) AS n,
       MAX(t.finished_at) - INTERVAL (SECOND(MAX(t.finished_at)) * 1000000
                                      + MICROSECOND(MAX(t.finished_at))) MICROSECOND AS last_at
FROM (
    SELECT LEFT(SUBSTRING_INDEX(REGEXP_REPLACE(COALESCE(h.last_error, ''),
                                               '^[ \n]+|[ \n]+$', ''), '\n', -1), 200) AS error,
           h.kind, h.finished_at
    FROM ledgerq_history h
    WHERE h.status = 'dead' AND h.finished_at >= :since
) t
GROUP BY t.error, t.kind
ORDER BY n DESC, t.error
LIMIT :limit

-- name: workers
-- Workers seen recently, by worker, kind, queue and whether running (merged
-- per worker by the caller: MySQL has no array_agg): those with running tasks
-- (their heartbeat and lease), and those that finished a task in the last
-- :recent_s seconds (history's worker column, through the finished_at index).
SELECT w.worker, w.kind, w.queue, w.running, COUNT(*) AS n, MAX(w.seen) AS seen,
       MIN(w.lease_until) AS lease_until
FROM (
    SELECT worker, kind, queue, 1 AS running,
           GREATEST(COALESCE(heartbeat_at, started_at), started_at) AS seen, lease_until
    FROM ledgerq_tasks
    WHERE status = 'running' AND worker IS NOT NULL
    UNION ALL
    SELECT worker, kind, queue, 0, finished_at, NULL
    FROM ledgerq_history
    WHERE finished_at >= UTC_TIMESTAMP(6) - INTERVAL :recent_us MICROSECOND
      AND worker IS NOT NULL
) w
GROUP BY w.worker, w.kind, w.queue, w.running

-- name: children
-- The tasks a task enqueued (parent_id), live and finished, newest first.
SELECT id, kind, queue, status, created_at, finished_at
FROM (
    SELECT id, kind, queue, status, created_at, finished_at
    FROM ledgerq_tasks WHERE parent_id = :id
    UNION ALL
    SELECT id, kind, queue, status, created_at, finished_at
    FROM ledgerq_history WHERE parent_id = :id
) c
ORDER BY id DESC
LIMIT :limit
