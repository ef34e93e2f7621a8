-- Retention on the MySQL / MariaDB ledger (ledger/mysql/retention.py): the day
-- partitions of ledgerq_history (migration m0004: RANGE COLUMNS (status,
-- finished_at)), dropped whole when they expire, and what is left deleted in
-- batches. No statement here changes a live task; they remove finished ones.
--
-- A partition's name cannot be bound: the statements that name one read it as
-- {partition} or {day}, filled by retention.py from a terminal status and a
-- date only (p_<status>_<YYYYMMDD>, p_<status>_old, p_<status>_new). Values are
-- bound as usual.

-- name: database_now
-- Cutoffs are taken from the database's clock, like every time in the ledger.
SELECT UTC_TIMESTAMP(6) AS now

-- name: history_partitions
-- History's partitions in bound order, with their bounds as the catalog shows
-- them ('dead','2026-11-29' or 'dead',MAXVALUE); none when it is not partitioned.
SELECT partition_name AS name, partition_description AS bound
FROM information_schema.partitions
WHERE table_schema = DATABASE() AND table_name = 'ledgerq_history'
  AND partition_name IS NOT NULL
ORDER BY partition_ordinal_position

-- name: take_lock
-- One pass changes history's partitions at a time (a named lock, held by the
-- session): another waits up to 2 s for it.
SELECT GET_LOCK(CONCAT('ledgerq.retention.', MD5(DATABASE())), 2) AS taken

-- name: release_lock
SELECT RELEASE_LOCK(CONCAT('ledgerq.retention.', MD5(DATABASE())))

-- name: short_lock_wait
-- A partition change waits at most 2 s for history's metadata lock (a long
-- transaction reading history holds it), then fails with 1205: busy.
SET SESSION lock_wait_timeout = 2

-- name: default_lock_wait
SET SESSION lock_wait_timeout = DEFAULT

-- name: split_last
-- A new day partition out of the status's last one (p_<status>_new): it takes the
-- rows below the day's end, the last one keeps the rest.
ALTER TABLE ledgerq_history REORGANIZE PARTITION {partition} INTO (
    PARTITION {day} VALUES LESS THAN (:status, :day_end),
    PARTITION {partition} VALUES LESS THAN (:status, MAXVALUE))

-- name: split_bounded
-- A new day partition out of the partition that holds its day and ends later
-- (p_<status>_old, or a day after it): the same, the old one keeping its bound.
ALTER TABLE ledgerq_history REORGANIZE PARTITION {partition} INTO (
    PARTITION {day} VALUES LESS THAN (:status, :day_end),
    PARTITION {partition} VALUES LESS THAN (:status, :bound))

-- name: split_old
-- A new day partition out of p_<status>_old when that one ends with the day (the
-- day before the migration's): the old one keeps what is below the day.
ALTER TABLE ledgerq_history REORGANIZE PARTITION {partition} INTO (
    PARTITION {partition} VALUES LESS THAN (:status, :day),
    PARTITION {day} VALUES LESS THAN (:status, :day_end))

-- name: rename_old
-- ... and when p_<status>_old holds that day alone (every day below it has a
-- partition): it becomes the day's partition.
ALTER TABLE ledgerq_history REORGANIZE PARTITION {partition} INTO (
    PARTITION {day} VALUES LESS THAN (:status, :day_end))

-- name: count_partition
-- The rows one partition holds.
SELECT COUNT(*) AS n FROM ledgerq_history PARTITION ({partition})

-- name: drop_partition
-- Its rows go with it (a file dropped, whatever their number); the next
-- partition's range grows down over its own, empty, range.
ALTER TABLE ledgerq_history DROP PARTITION {partition}

-- name: purge_history_batch
-- Deletes at most :limit rows of one status finished before :before (pruned to
-- the status's partitions up to :before's day, read by the finished_at index).
-- No ORDER BY: which expired rows go first does not matter, and sorting them
-- would read them all (a binary log in STATEMENT format calls a LIMIT without
-- ORDER BY unsafe: MIXED, MariaDB's default, logs it as rows; MySQL logs rows).
DELETE FROM ledgerq_history
WHERE status = :status AND finished_at < :before
LIMIT :limit

-- name: count_purgeable
-- How many finished rows of one status end before its cutoff (pruned as above).
SELECT COUNT(*) AS n FROM ledgerq_history WHERE status = :status AND finished_at < :before
