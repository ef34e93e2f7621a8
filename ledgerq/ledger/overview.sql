-- The dashboard's overview and the rollup that keeps it fast (migration 0008).
-- Loaded by ledger/sql.py like queries.sql. Nothing here changes a task.
--
-- Current state comes from the hot table (small: live tasks only). Anything
-- over time comes from the rollup for the minutes before :upto (rolled_upto,
-- read first by the caller; the year 1 if the rollup never ran), plus the few
-- rows of history that finished since (the "fresh tail", read through the
-- finished_at index), so the figures are exact up to the last second and the
-- cost does not grow with history. :grain picks the rollup's minute or hour
-- rows (hours for bins of an hour or more; :since is then on an hour). :upto is a parameter, not a join with the
-- state row: given a value, the planner prunes history's partitions and uses
-- the index; joined, it scanned all of history (10M rows: 15 s).

-- name: rollup_span
-- The next span of the rollup, [lo, hi): from the mark (before the first step,
-- :backfill_s ago), moved on to the minute of the next finished task if there
-- is a gap (so an idle ledger, or a first pass over a young one, takes one
-- step, not one per empty hour), to at most :max_span_s later and at most
-- :settle_s before now (a finish commits after its now(): a task committed
-- more than :settle_s late is not counted). Locks the state row (FOR UPDATE)
-- until the step commits, so two steps at once run one after the other and
-- the second finds the span done.
SELECT lo,
       GREATEST(lo, LEAST(lo + make_interval(secs => :max_span_s), ripe)) AS hi,
       lo + make_interval(secs => :max_span_s) >= ripe AS caught_up
FROM (
    SELECT LEAST(ripe, GREATEST(mark, COALESCE(
               (SELECT date_trunc('minute', min(h.finished_at))
                FROM ledgerq_history h WHERE h.finished_at >= mark),
               ripe))) AS lo,
           ripe
    FROM (
        SELECT COALESCE(s.rolled_upto,
                        date_trunc('minute', now() - make_interval(secs => :backfill_s)))
                   AS mark,
               date_trunc('minute', now() - make_interval(secs => :settle_s)) AS ripe
        FROM ledgerq_rollup_state s
        WHERE s.id = 1
        FOR UPDATE
    ) AS state
) AS span

-- name: roll_up
-- Counts the tasks that finished in [:lo, :hi) per minute and per hour (and
-- hop, for latencies), and moves
-- the mark to :hi, in the transaction that locked the state row (rollup_span):
-- a span is counted whole or not at all. :lo and :hi are parameters, so the
-- planner prunes history to the span's day partitions and reads them through
-- the finished_at index.
WITH src AS (
    SELECT h.queue, h.kind, h.status, h.last_error, h.created_at, h.run_at, h.published_at,
           h.started_at, h.finished_at
    FROM ledgerq_history h
    WHERE h.finished_at >= :lo AND h.finished_at < :hi
), grains AS (
    SELECT grain FROM (VALUES ('minute'), ('hour')) AS g(grain)
), counted AS (
    INSERT INTO ledgerq_rollup_counts AS r (grain, at, queue, kind, status, error, n)
    SELECT g.grain, date_trunc(g.grain, src.finished_at, 'UTC'), src.queue, src.kind,
           src.status, ledgerq_error_line(src.status, src.last_error), count(*)
    FROM src CROSS JOIN grains g
    GROUP BY 1, 2, 3, 4, 5, 6
    ON CONFLICT (grain, at, queue, kind, status, error) DO UPDATE SET n = r.n + excluded.n
    RETURNING 1
), timed AS (
    INSERT INTO ledgerq_rollup_latency AS r (grain, at, queue, kind, hop, bucket, n)
    SELECT g.grain, date_trunc(g.grain, src.finished_at, 'UTC'), src.queue, src.kind, x.hop,
           ledgerq_latency_bucket(x.seconds), count(*)
    FROM src
    CROSS JOIN LATERAL ledgerq_hops(src.created_at, src.run_at, src.published_at,
                                    src.started_at, src.finished_at) AS x
    CROSS JOIN grains g
    GROUP BY 1, 2, 3, 4, 5, 6
    ON CONFLICT (grain, at, queue, kind, hop, bucket) DO UPDATE SET n = r.n + excluded.n
    RETURNING 1
), moved AS (
    UPDATE ledgerq_rollup_state SET rolled_upto = :hi WHERE id = 1
    RETURNING rolled_upto
)
SELECT (SELECT count(*) FROM src) AS tasks,
       (SELECT count(*) FROM counted) + (SELECT count(*) FROM timed) AS rows,
       (SELECT rolled_upto FROM moved) AS rolled_upto

-- name: prune_rollup
-- Rollup rows older than :keep_s seconds (the overview's longest window is 7 days).
-- (Each grain named, so the primary key's (grain, at) prefix finds them.)
WITH c AS (
    DELETE FROM ledgerq_rollup_counts
    WHERE grain = ANY(ARRAY['minute', 'hour']) AND at < now() - make_interval(secs => :keep_s)
    RETURNING 1
), l AS (
    DELETE FROM ledgerq_rollup_latency
    WHERE grain = ANY(ARRAY['minute', 'hour']) AND at < now() - make_interval(secs => :keep_s)
    RETURNING 1
)
SELECT (SELECT count(*) FROM c) + (SELECT count(*) FROM l) AS n

-- name: rolled_upto
SELECT rolled_upto FROM ledgerq_rollup_state WHERE id = 1

-- name: live_counts
-- Per queue and kind, from the hot table: pending, of them due now (the
-- relay's backlog) and the oldest due one's age, published (in the broker),
-- running, and waiting (enqueued with after=, for the tasks it names). A
-- pending task due later counts as scheduled.
SELECT queue, kind,
       count(*) FILTER (WHERE status = 'pending') AS pending,
       count(*) FILTER (WHERE status = 'pending' AND run_at <= now()) AS due,
       count(*) FILTER (WHERE status = 'pending' AND run_at > now()) AS scheduled,
       count(*) FILTER (WHERE status = 'published') AS published,
       count(*) FILTER (WHERE status = 'running') AS running,
       count(*) FILTER (WHERE status = 'waiting') AS waiting,
       EXTRACT(epoch FROM now() - min(run_at) FILTER (WHERE status = 'pending'
                                                       AND run_at <= now())) AS oldest_due_s
FROM ledgerq_tasks
GROUP BY queue, kind
ORDER BY queue, kind

-- name: throughput
-- Finished tasks per :step_s bin since :since, by status: the rollup before
-- :upto, history's fresh tail after it.
SELECT date_bin(make_interval(secs => :step_s), t.at, CAST(:since AS timestamptz)) AS at,
       t.status, CAST(sum(t.n) AS bigint) AS n
FROM (
    SELECT r.at, r.status, r.n
    FROM ledgerq_rollup_counts r
    WHERE r.grain = :grain AND r.at >= :since AND r.at < CAST(:upto AS timestamptz)
    UNION ALL
    SELECT h.finished_at, h.status, 1
    FROM ledgerq_history h
    WHERE h.finished_at >= GREATEST(CAST(:upto AS timestamptz), CAST(:since AS timestamptz))
) t
GROUP BY 1, 2
ORDER BY 1, 2

-- name: latency
-- Latency histogram buckets per kind and hop since :since (rollup + fresh tail).
SELECT t.kind, t.hop, t.bucket, CAST(sum(t.n) AS bigint) AS n
FROM (
    SELECT r.kind, r.hop, r.bucket, r.n
    FROM ledgerq_rollup_latency r
    WHERE r.grain = :grain AND r.at >= :since AND r.at < CAST(:upto AS timestamptz)
    UNION ALL
    SELECT h.kind, x.hop, ledgerq_latency_bucket(x.seconds), 1
    FROM ledgerq_history h
    CROSS JOIN LATERAL ledgerq_hops(h.created_at, h.run_at, h.published_at, h.started_at,
                                    h.finished_at) AS x
    WHERE h.finished_at >= GREATEST(CAST(:upto AS timestamptz), CAST(:since AS timestamptz))
) t
GROUP BY 1, 2, 3
ORDER BY 1, 2, 3

-- name: dead_errors
-- Dead tasks since :since grouped by their error's last line and kind, most
-- common first, with the minute (hour, for :grain hour) the last one died.
SELECT t.error, t.kind, CAST(sum(t.n) AS bigint) AS n, max(t.at) AS last_at
FROM (
    SELECT r.error, r.kind, r.n, r.at
    FROM ledgerq_rollup_counts r
    WHERE r.grain = :grain AND r.status = 'dead'
      AND r.at >= :since AND r.at < CAST(:upto AS timestamptz)
    UNION ALL
    SELECT ledgerq_error_line(h.status, h.last_error), h.kind, 1,
           date_trunc('minute', h.finished_at)
    FROM ledgerq_history h
    WHERE h.status = 'dead'
      AND h.finished_at >= GREATEST(CAST(:upto AS timestamptz), CAST(:since AS timestamptz))
) t
GROUP BY 1, 2
ORDER BY 3 DESC, 1
LIMIT :limit

-- name: workers
-- Workers seen recently: those with running tasks (their heartbeat and lease),
-- and those that finished a task in the last :recent_s seconds (history's
-- worker column, read through the finished_at index).
SELECT w.worker,
       CAST(sum(w.running) AS bigint) AS running,
       CAST(sum(1 - w.running) AS bigint) AS finished_recently,
       array_remove(array_agg(DISTINCT CASE WHEN w.running = 1 THEN w.kind END), NULL)
           AS running_kinds,
       array_agg(DISTINCT w.queue) AS queues,
       max(w.seen) AS last_seen,
       min(w.lease_until) AS lease_until
FROM (
    SELECT worker, kind, queue, 1 AS running,
           GREATEST(heartbeat_at, started_at) AS seen, lease_until
    FROM ledgerq_tasks
    WHERE status = 'running' AND worker IS NOT NULL
    UNION ALL
    SELECT worker, kind, queue, 0, finished_at, NULL
    FROM ledgerq_history
    WHERE finished_at >= now() - make_interval(secs => :recent_s) AND worker IS NOT NULL
) w
GROUP BY w.worker
ORDER BY max(w.seen) DESC NULLS LAST
LIMIT 50

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
