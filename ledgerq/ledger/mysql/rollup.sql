-- The dashboard's rollup on the MySQL / MariaDB ledger (migration m0012,
-- ledger/mysql/rollup.py): PostgreSQL's overview.sql rollup_span, roll_up and
-- prune_rollup in MySQL's SQL. A step is one transaction: lock_rollup, then
-- next_finished, then the four inserts, rollup_summary and move_mark, so a
-- span is counted whole or not at all. Timestamps are DATETIME(6) in UTC;
-- :lo, :hi and :mark are bound naive UTC, whole minutes. Every read of history
-- is a plain read (READ COMMITTED: no lock on history, so a finish never
-- waits for the rollup), through its finished_at index.

-- name: lock_rollup
-- The mark and the database's clock, the state row locked until the step
-- commits: two steps at once run one after the other, and the second finds
-- the span done.
SELECT rolled_upto, UTC_TIMESTAMP(6) AS now
FROM ledgerq_rollup_state
WHERE id = 1
FOR UPDATE

-- name: next_finished
-- The first finish at or after the mark: a gap with nothing finished is
-- skipped in one step (one index probe).
SELECT MIN(h.finished_at) AS at FROM ledgerq_history h WHERE h.finished_at >= :mark

-- name: roll_up_counts
-- The tasks that finished in [:lo, :hi), per minute, queue, kind, status and
-- error line.
INSERT INTO ledgerq_rollup_counts (grain, at, queue, kind, status, error, n)
SELECT 'minute', {{minute_of(h.finished_at)}}, h.queue, h.kind, h.status,
       {{error_line(h)}}, COUNT(*)
FROM ledgerq_history h
WHERE h.finished_at >= :lo AND h.finished_at < :hi
GROUP BY 2, 3, 4, 5, 6
ON DUPLICATE KEY UPDATE n = ledgerq_rollup_counts.n + VALUES(n)

-- name: roll_up_latency
-- Their hops, per minute, queue, kind, hop and latency bucket.
INSERT INTO ledgerq_rollup_latency (grain, at, queue, kind, hop, bucket, n)
SELECT 'minute', x.at, x.queue, x.kind, x.hop, {{latency_bucket(x.seconds)}}, COUNT(*)
FROM (
    SELECT {{minute_of(h.finished_at)}} AS at, h.queue, h.kind, hh.hop,
           {{hop_seconds(h, hh)}} AS seconds
    FROM ledgerq_history h
    CROSS JOIN {{hops}} hh
    WHERE h.finished_at >= :lo AND h.finished_at < :hi
) x
WHERE x.seconds IS NOT NULL
GROUP BY 2, 3, 4, 5, 6
ON DUPLICATE KEY UPDATE n = ledgerq_rollup_latency.n + VALUES(n)

-- name: roll_up_count_hours
-- The span's minutes (whole minutes: the span starts and ends on one) added to
-- their hours, which a span may share with the steps before and after it.
INSERT INTO ledgerq_rollup_counts (grain, at, queue, kind, status, error, n)
SELECT 'hour', {{hour_of(m.at)}}, m.queue, m.kind, m.status, m.error, SUM(m.n)
FROM ledgerq_rollup_counts m
WHERE m.grain = 'minute' AND m.at >= :lo AND m.at < :hi
GROUP BY 2, 3, 4, 5, 6
ON DUPLICATE KEY UPDATE n = ledgerq_rollup_counts.n + VALUES(n)

-- name: roll_up_latency_hours
INSERT INTO ledgerq_rollup_latency (grain, at, queue, kind, hop, bucket, n)
SELECT 'hour', {{hour_of(m.at)}}, m.queue, m.kind, m.hop, m.bucket, SUM(m.n)
FROM ledgerq_rollup_latency m
WHERE m.grain = 'minute' AND m.at >= :lo AND m.at < :hi
GROUP BY 2, 3, 4, 5, 6
ON DUPLICATE KEY UPDATE n = ledgerq_rollup_latency.n + VALUES(n)

-- name: rollup_summary
-- What the step counted: the tasks (from its minute rows) and the hour rows it
-- wrote (MySQL's affected rows count an upsert's update twice; the minute rows
-- are the inserts' row counts).
SELECT (SELECT COALESCE(SUM(c.n), 0) FROM ledgerq_rollup_counts c
        WHERE c.grain = 'minute' AND c.at >= :lo AND c.at < :hi) AS tasks,
       (SELECT COUNT(DISTINCT {{hour_of(c.at)}}, c.queue, c.kind, c.status, c.error)
        FROM ledgerq_rollup_counts c
        WHERE c.grain = 'minute' AND c.at >= :lo AND c.at < :hi)
       + (SELECT COUNT(DISTINCT {{hour_of(l.at)}}, l.queue, l.kind, l.hop, l.bucket)
          FROM ledgerq_rollup_latency l
          WHERE l.grain = 'minute' AND l.at >= :lo AND l.at < :hi) AS hour_rows

-- name: move_mark
UPDATE ledgerq_rollup_state SET rolled_upto = :hi WHERE id = 1

-- name: prune_rollup_counts
-- Rollup rows older than :keep_us microseconds (the overview's longest window
-- is 7 days); each grain named, so the primary key's (grain, at) prefix finds them.
DELETE FROM ledgerq_rollup_counts
WHERE grain IN ('minute', 'hour') AND at < UTC_TIMESTAMP(6) - INTERVAL :keep_us MICROSECOND

-- name: prune_rollup_latency
DELETE FROM ledgerq_rollup_latency
WHERE grain IN ('minute', 'hour') AND at < UTC_TIMESTAMP(6) - INTERVAL :keep_us MICROSECOND

-- name: rolled_upto
SELECT rolled_upto FROM ledgerq_rollup_state WHERE id = 1

-- name: truncate_rollup_counts
-- The testing protocol's truncate empties the rollup with the tasks (DELETE:
-- no implicit commit), and reset_rollup starts it again from its backfill.
DELETE FROM ledgerq_rollup_counts

-- name: truncate_rollup_latency
DELETE FROM ledgerq_rollup_latency

-- name: reset_rollup
UPDATE ledgerq_rollup_state SET rolled_upto = NULL WHERE id = 1
