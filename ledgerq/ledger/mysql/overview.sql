-- The dashboard's overview and task page on the MySQL / MariaDB ledger
-- (ledger/mysql/overview.py): PostgreSQL's overview.sql in MySQL's SQL. Anything
-- over time comes from the rollup (rollup.sql, migration m0012) for the minutes
-- before :upto (rolled_upto, read first by the caller; the year 1 if the rollup
-- never ran), plus the rows of history that finished since (the fresh tail,
-- through history's finished_at index), so the figures are exact up to the last
-- second and their cost does not grow with history. :grain picks the rollup's
-- minute or hour rows (hours for bins of an hour or more; :since is then on an
-- hour). Nothing here changes anything. Timestamps are DATETIME(6) in UTC;
-- :since, :upto and :tail are bound naive UTC.

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
-- PostgreSQL's date_bin), by status: the rollup's :grain rows before :upto,
-- history's fresh tail from :tail (the later of :upto and :since). Each side
-- is counted per bin before the two are added: MySQL materialises a UNION, so
-- it holds a row per bin, not one per finished task.
SELECT t.at, t.status, SUM(t.n) AS n
FROM (
    SELECT {{bin_of(r.at)}} AS at, r.status, SUM(r.n) AS n
    FROM ledgerq_rollup_counts r
    WHERE r.grain = :grain AND r.at >= :since AND r.at < :upto
    GROUP BY 1, 2
    UNION ALL
    SELECT {{bin_of(h.finished_at)}}, h.status, COUNT(*)
    FROM ledgerq_history h
    WHERE h.finished_at >= :tail
    GROUP BY 1, 2
) t
GROUP BY t.at, t.status
ORDER BY t.at, t.status

-- name: latency
-- Latency histogram buckets per kind and hop since :since (rollup + fresh
-- tail, each counted per bucket first, as throughput's): each finished task's
-- hops (a hop it never took left out), each in its log-scale bucket
-- (overview_fragments.sql, Python's ledgerq.ledger.rollup.bucket_of).
SELECT t.kind, t.hop, t.bucket, SUM(t.n) AS n
FROM (
    SELECT r.kind, r.hop, r.bucket, SUM(r.n) AS n
    FROM ledgerq_rollup_latency r
    WHERE r.grain = :grain AND r.at >= :since AND r.at < :upto
    GROUP BY 1, 2, 3
    UNION ALL
    SELECT x.kind, x.hop, {{latency_bucket(x.seconds)}}, COUNT(*)
    FROM (
        SELECT h.kind, hh.hop, {{hop_seconds(h, hh)}} AS seconds
        FROM ledgerq_history h
        CROSS JOIN {{hops}} hh
        WHERE h.finished_at >= :tail
    ) x
    WHERE x.seconds IS NOT NULL
    GROUP BY 1, 2, 3
) t
GROUP BY t.kind, t.hop, t.bucket
ORDER BY t.kind, t.hop, t.bucket

-- name: dead_errors
-- Dead tasks since :since grouped by their error's last line and kind
-- (overview_fragments.sql error_line), most common first, with the minute (the
-- hour, for :grain hour) the last one died.
SELECT t.error, t.kind, SUM(t.n) AS n, MAX(t.at) AS last_at
FROM (
    SELECT r.error, r.kind, r.n, r.at
    FROM ledgerq_rollup_counts r
    WHERE r.grain = :grain AND r.status = 'dead' AND r.at >= :since AND r.at < :upto
    UNION ALL
    SELECT {{error_line(h)}}, h.kind, 1, {{minute_of(h.finished_at)}}
    FROM ledgerq_history h
    WHERE h.status = 'dead' AND h.finished_at >= :tail
) t
GROUP BY t.error, t.kind
ORDER BY 3 DESC, 1
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
