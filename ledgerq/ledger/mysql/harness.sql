-- The testing protocol's seeding on the MySQL ledger (ledger/mysql/harness.py):
-- synthetic finished rows, ids below 0 so they never meet real ones. MySQL has
-- no generate_series: the rows are numbered by five joined copies of the
-- digits, up to 100,000 per statement (:n at most that; the caller chunks).

-- name: seed_history
-- Rows -(:first) .. -(:first + :n - 1), one kind, succeeded now (in today's
-- day partition when it exists).
INSERT INTO ledgerq_history (id, kind, queue, payload, priority, shard, run_at, status,
                             attempts, max_attempts, epoch, publishes, created_at, published_at,
                             started_at, finished_at)
SELECT -(:first + g.n), 'bench.old', 'default', '{}', 0, 0, UTC_TIMESTAMP(6), 'succeeded',
       1, 5, 1, 1, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), UTC_TIMESTAMP(6)
FROM (SELECT a.d + 10 * b.d + 100 * c.d + 1000 * e.d + 10000 * f.d AS n
      FROM (SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3
            UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7
            UNION ALL SELECT 8 UNION ALL SELECT 9) a,
           (SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3
            UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7
            UNION ALL SELECT 8 UNION ALL SELECT 9) b,
           (SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3
            UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7
            UNION ALL SELECT 8 UNION ALL SELECT 9) c,
           (SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3
            UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7
            UNION ALL SELECT 8 UNION ALL SELECT 9) e,
           (SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3
            UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7
            UNION ALL SELECT 8 UNION ALL SELECT 9) f) g
WHERE g.n < :n

-- name: seed_varied_history
-- Rows shaped like a real history (PostgreSQL's seed_varied_history): ids
-- -(:first) .. -(:first + :n - 1), 90% succeeded, 7% dead (with an error), 3%
-- cancelled, ten kinds, three queues, a business key on one row in ten, created
-- over the last days (a quarter second apart, newest ids newest).
INSERT INTO ledgerq_history (id, kind, queue, payload, business_key, priority, shard, run_at,
                             status, attempts, max_attempts, epoch, publishes, last_error,
                             created_at, published_at, started_at, finished_at)
SELECT -k, CONCAT('bench.kind', k % 10), ELT(1 + k % 3, 'default', 'other', 'bulk'), '{}',
       CASE WHEN k % 10 = 0 THEN CONCAT('order-', k) END, 0, 0, c,
       CASE WHEN k % 100 < 90 THEN 'succeeded' WHEN k % 100 < 97 THEN 'dead'
            ELSE 'cancelled' END,
       1, 5, 1, 1,
       CASE WHEN k % 100 BETWEEN 90 AND 96 THEN CONCAT('RuntimeError: upstream ', k % 7) END,
       c, c, c, c
FROM (SELECT :first + n AS k,
             UTC_TIMESTAMP(6) - INTERVAL ((:first + n) * 250000) MICROSECOND AS c
      FROM (SELECT a.d + 10 * b.d + 100 * c.d + 1000 * e.d + 10000 * f.d AS n
            FROM (SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3
                  UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7
                  UNION ALL SELECT 8 UNION ALL SELECT 9) a,
                 (SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3
                  UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7
                  UNION ALL SELECT 8 UNION ALL SELECT 9) b,
                 (SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3
                  UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7
                  UNION ALL SELECT 8 UNION ALL SELECT 9) c,
                 (SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3
                  UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7
                  UNION ALL SELECT 8 UNION ALL SELECT 9) e,
                 (SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3
                  UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7
                  UNION ALL SELECT 8 UNION ALL SELECT 9) f) g
      WHERE g.n < :n) s

-- name: lowest_synthetic_id
-- How many synthetic rows exist below 0 (the next seed starts after them).
SELECT COALESCE(-MIN(id), 0) AS n FROM ledgerq_history WHERE id <= 0

-- name: analyze_history
-- After a seed: the optimizer's statistics of the filled table.
ANALYZE TABLE ledgerq_history

-- name: count_finished
-- Real tasks finished (ids <= 0 are synthetic history rows, see seed_history).
SELECT COUNT(*) AS n FROM ledgerq_history WHERE id > 0

-- name: drain_span
-- Tasks finished and the seconds from the first publication to the last finish
-- (from the first start for tasks claimed straight from the ledger: never published).
SELECT COUNT(*) AS n,
       TIMESTAMPDIFF(MICROSECOND, MIN(COALESCE(published_at, started_at)), MAX(finished_at))
           / 1000000.0 AS span
FROM ledgerq_history WHERE id > 0

-- name: timings
-- Each task's times as seconds since the epoch (UTC: every timestamp is).
SELECT id,
       TIMESTAMPDIFF(MICROSECOND, '1970-01-01', created_at) / 1000000.0 AS created,
       TIMESTAMPDIFF(MICROSECOND, '1970-01-01', published_at) / 1000000.0 AS published,
       TIMESTAMPDIFF(MICROSECOND, '1970-01-01', started_at) / 1000000.0 AS started,
       TIMESTAMPDIFF(MICROSECOND, '1970-01-01', finished_at) / 1000000.0 AS finished
FROM ledgerq_history WHERE id IN :ids

-- name: clear_finished
-- Finished rows go; synthetic ones (ids <= 0) stay.
DELETE FROM ledgerq_history WHERE id > 0
