-- Retention: the day partitions of ledgerq_history, dropped whole when they
-- expire, and what is left deleted in batches (migration 0004 defines the
-- functions; they run as their owner, so the service and operator roles need
-- only EXECUTE on them). Loaded by ledger/sql.py like queries.sql. No
-- statement here changes a live task; they remove finished ones.

-- name: database_now
-- Cutoffs are taken from the database's clock, like every time in the ledger.
SELECT now() AS now

-- name: history_days
-- The day partitions that exist, by status (ledgerq_history_<status>_pYYYYMMDD).
SELECT substring(parent.relname FROM '^ledgerq_history_(.*)$') AS status,
       to_date(substring(child.relname FROM '_p([0-9]{8})$'), 'YYYYMMDD') AS day
FROM pg_inherits i
JOIN pg_class child ON child.oid = i.inhrelid
JOIN pg_class parent ON parent.oid = i.inhparent
WHERE i.inhparent IN (to_regclass('ledgerq_history_succeeded'),
                      to_regclass('ledgerq_history_dead'),
                      to_regclass('ledgerq_history_cancelled'))
  AND child.relname ~ '_p[0-9]{8}$'
ORDER BY status, day

-- name: add_history_day
-- Creates one day's partition (rows of that day in the default partition move
-- into it); NULL if it existed.
SELECT ledgerq_history_add_day(:status, CAST(:day AS date)) AS moved

-- name: drop_history_day
-- Drops one day's partition and says how many rows it held; NULL if absent.
SELECT ledgerq_history_drop_day(:status, CAST(:day AS date)) AS dropped

-- name: purge_history_batch
-- Deletes at most :limit rows of one status finished before :before.
SELECT ledgerq_history_purge(:status, CAST(:before AS timestamptz), :limit) AS deleted

-- name: prune_dependencies
-- Deletes at most :limit dependency edges whose dependent ended before :before
-- and is not live (migration 0022: stamped by the release trigger, pruned by
-- ledgerq_dependencies_prune, oldest first).
SELECT ledgerq_dependencies_prune(CAST(:before AS timestamptz), :limit) AS pruned

-- name: count_purgeable
-- How many finished rows of each status end before its cutoff (pruned to the
-- status's partitions, then served by the finished_at index).
SELECT c.status,
       (SELECT count(*) FROM ledgerq_history h
        WHERE h.status = c.status AND h.finished_at < c.before) AS n
FROM unnest(CAST(:statuses AS text[]), CAST(:befores AS timestamptz[])) AS c(status, before)
