-- Read-only questions about the ledger, and the maintenance the benchmark, the
-- demo and the tests need. Loaded by ledger/sql.py like queries.sql; no
-- statement here changes a live task's status.

-- name: stats_live
SELECT status, kind, count(*) AS n FROM ledgerq_tasks GROUP BY status, kind ORDER BY status, kind

-- name: stats_history
SELECT status, kind, count(*) AS n FROM ledgerq_history GROUP BY status, kind
ORDER BY status, kind

-- name: show_task
SELECT *, 'live' AS location FROM ledgerq_tasks WHERE id = :id
UNION ALL
SELECT *, 'history' AS location FROM ledgerq_history WHERE id = :id

-- name: ping
-- The readiness probe's question (/readyz): is the ledger reachable and its
-- table there? Reads the catalogue, not a row.
SELECT to_regclass('ledgerq_tasks') IS NOT NULL AS ok

-- name: count_expired
SELECT count(*) FROM ledgerq_tasks WHERE status = 'running' AND lease_until < now()

-- name: autovacuum_off
-- Why autovacuum would not clean the hot table: the server setting, or the
-- table's own storage parameter. No rows: it will.
SELECT 'the server runs with autovacuum = off' AS reason
WHERE current_setting('autovacuum') <> 'on'
UNION ALL
SELECT 'ledgerq_tasks has autovacuum_enabled = false' AS reason
FROM pg_class c, unnest(c.reloptions) AS o(opt)
WHERE c.oid = to_regclass('ledgerq_tasks') AND lower(o.opt) IN ('autovacuum_enabled=false',
                                                               'autovacuum_enabled=off')

-- name: count_finished
-- (ids <= 0 are synthetic history rows, see seed_history)
SELECT count(*) FROM ledgerq_history WHERE id > 0

-- name: drain_span
-- Tasks finished and the seconds from the first publication to the last finish
-- (from the first start for tasks claimed straight from the ledger: never published).
SELECT count(*) AS n,
       EXTRACT(EPOCH FROM max(finished_at) - min(COALESCE(published_at, started_at)))::float8
           AS span
FROM ledgerq_history WHERE id > 0

-- name: timings
SELECT id, EXTRACT(EPOCH FROM created_at)::float8 AS created,
       EXTRACT(EPOCH FROM published_at)::float8 AS published,
       EXTRACT(EPOCH FROM started_at)::float8 AS started,
       EXTRACT(EPOCH FROM finished_at)::float8 AS finished
FROM ledgerq_history WHERE id = ANY(CAST(:ids AS bigint[]))

-- name: truncate
-- Every task, every permanent de-duplication key, the audit trail, the
-- scheduling state (pauses, rate limits and their buckets), the dashboard's
-- rollup (whose mark reset_rollup clears), the fan-out families, the
-- released ordering keys, the dependency edges (after=: left behind, they made
-- every later terminal write stamp edges, migration 0022), and the result()
-- registries' announcements (a registry still waiting announces again within
-- RENEW_S). A table of fewer than 1,000 rows is emptied by DELETE, the others
-- by one TRUNCATE: TRUNCATE swaps every relation's files (history has a
-- partition per status and day, 200 and more), about 150 ms even for empty
-- tables, against a few ms for the DELETE a test's handful of rows needs.
-- (A DELETE leaves the statistics as they were; a TRUNCATE resets them.)
DO $$
DECLARE
    t text;
    n bigint;
    small text[] := ARRAY[]::text[];
    big text[] := ARRAY[]::text[];
BEGIN
    -- referencing tables before the audit they reference (the DELETEs' order)
    FOREACH t IN ARRAY ARRAY['ledgerq_audit_tasks', 'ledgerq_key_releases', 'ledgerq_audit',
                             'ledgerq_tasks', 'ledgerq_history', 'ledgerq_unique_keys',
                             'ledgerq_pauses', 'ledgerq_kinds', 'ledgerq_rollup_counts',
                             'ledgerq_rollup_latency', 'ledgerq_families',
                             'ledgerq_dependencies', 'ledgerq_waiting'] LOOP
        EXECUTE format('SELECT count(*) FROM (SELECT FROM %I LIMIT 1000) s', t) INTO n;
        IF n < 1000 THEN
            small := small || t;
        ELSE
            big := big || t;
        END IF;
    END LOOP;
    IF cardinality(big) > 0 THEN  -- CASCADE: the audit's referencing tables with it
        EXECUTE 'TRUNCATE ' || array_to_string(big, ', ') || ' CASCADE';
    END IF;
    FOREACH t IN ARRAY small LOOP
        EXECUTE format('DELETE FROM %I', t);
    END LOOP;
END
$$

-- name: truncate_subscriptions
-- The workers' subscriptions and liveness rows (truncate's, unless the caller
-- keeps them): a few rows, so DELETE (truncate says why).
WITH workers AS (DELETE FROM ledgerq_workers)
DELETE FROM ledgerq_subscriptions

-- name: reset_rollup
-- After truncate: the rollup starts again from its backfill.
UPDATE ledgerq_rollup_state SET rolled_upto = NULL WHERE id = 1

-- name: clear_finished
-- Finished rows go; synthetic ones (ids <= 0) stay.
DELETE FROM ledgerq_history WHERE id > 0

-- name: seed_history
-- Synthetic finished rows, for measuring with a large history (negative ids never
-- meet real ones).
INSERT INTO ledgerq_history (id, kind, queue, payload, priority, shard, run_at, status,
                             attempts, max_attempts, epoch, publishes, created_at, published_at,
                             started_at, finished_at)
SELECT -g, 'bench.old', 'default', '{}'::jsonb, 0, 0, now(), 'succeeded', 1, 5, 1, 1,
       now(), now(), now(), now()
FROM generate_series(1, :n) AS g

-- name: vacuum_history
-- Run in autocommit: a filled (or just cleared) history starts each drain in the
-- state a long-lived, vacuumed history table is in.
VACUUM (ANALYZE) ledgerq_history

-- name: checkpoint
-- After a burst of WAL, so the checkpoint it triggers does not land in the
-- middle of a measurement (needs a superuser; skipped otherwise).
CHECKPOINT

-- name: seed_varied_history
-- Synthetic finished rows shaped like a real history, for measuring the
-- operator's listing (docs/performance.md): ids -:first .. -(:first + :n - 1),
-- 90% succeeded, 7% dead (with an error), 3% cancelled, ten kinds, three queues,
-- a business key on one row in ten, created over the last 30 days (newest ids
-- newest).
INSERT INTO ledgerq_history (id, kind, queue, payload, business_key, priority, shard, run_at,
                             status, attempts, max_attempts, epoch, publishes, last_error,
                             created_at, published_at, started_at, finished_at)
SELECT -g, 'bench.kind' || (g % 10), (ARRAY['default', 'other', 'bulk'])[1 + g % 3], '{}'::jsonb,
       CASE WHEN g % 10 = 0 THEN 'order-' || g END, 0, 0, c,
       CASE WHEN g % 100 < 90 THEN 'succeeded' WHEN g % 100 < 97 THEN 'dead'
            ELSE 'cancelled' END,
       1, 5, 1, 1,
       CASE WHEN g % 100 BETWEEN 90 AND 96 THEN 'RuntimeError: upstream ' || (g % 7) END,
       c, c, c, c
FROM generate_series(CAST(:first AS bigint), CAST(:first AS bigint) + :n - 1) AS g,
     LATERAL (SELECT now() - make_interval(secs => g * 0.25) AS c) AS t

-- name: lowest_synthetic_id
-- How many synthetic rows exist below 0 (the next seed starts after them).
SELECT COALESCE(-min(id), 0) FROM ledgerq_history WHERE id <= 0
