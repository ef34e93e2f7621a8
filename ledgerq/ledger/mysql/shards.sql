-- Ledger shards on MySQL / MariaDB (migration m0008; ledger/mysql/shards.py).

-- name: lock_assign
-- One `ledgerq migrate` at a time assigns this database (a named lock of the
-- session: it spans the commit and the ALTER TABLE that follows; named locks are
-- the server's, so the name carries the database's, hashed to stay within
-- MySQL's 64 characters). 1: taken.
SELECT GET_LOCK(CONCAT('ledgerq.assign.', MD5(DATABASE())), :wait_s) AS got

-- name: unlock_assign
SELECT RELEASE_LOCK(CONCAT('ledgerq.assign.', MD5(DATABASE()))) AS released

-- name: shard_table_exists
-- Before migration m0008 there is nothing to assign.
SELECT COUNT(*) AS n FROM information_schema.tables
WHERE table_schema = DATABASE() AND table_name = 'ledgerq_ledger_shard'

-- name: shard_identity
-- Every command's start check, and migrate's: what the database says it is (no
-- row: never assigned by `ledgerq migrate`).
SELECT shard_index, shard_count FROM ledgerq_ledger_shard

-- name: record_shard
-- Record the shard, or confirm it with the list's new count (assigned_at moves
-- only when the count does; assignments run left to right, so the IF reads the
-- count as it was).
INSERT INTO ledgerq_ledger_shard (one, shard_index, shard_count, assigned_at)
VALUES (TRUE, :shard_index, :shard_count, UTC_TIMESTAMP(6))
ON DUPLICATE KEY UPDATE
    assigned_at = IF(shard_count = :shard_count, assigned_at, UTC_TIMESTAMP(6)),
    shard_count = :shard_count

-- name: used_ids
-- The highest id of the shard's range any table holds (0: none): the hot table,
-- history (finished tasks leave the hot table, and InnoDB's AUTO_INCREMENT knows
-- only the hot table's rows) and the permanent keys' tasks.
SELECT GREATEST(
    COALESCE((SELECT MAX(id) FROM ledgerq_tasks WHERE id BETWEEN :first_id AND :last_id), 0),
    COALESCE((SELECT MAX(id) FROM ledgerq_history WHERE id BETWEEN :first_id AND :last_id), 0),
    COALESCE((SELECT MAX(task_id) FROM ledgerq_unique_keys
              WHERE task_id BETWEEN :first_id AND :last_id), 0)
) AS used

-- name: start_ids
-- The hot table's next id (DDL: it commits, and waits for the transactions that
-- hold the table; InnoDB raises a value at or below the table's highest id to
-- that id + 1, so it never hands out an id a live row has). The value is bound
-- as a literal by the driver (PyMySQL formats parameters on the client).
ALTER TABLE ledgerq_tasks AUTO_INCREMENT = :next_id
