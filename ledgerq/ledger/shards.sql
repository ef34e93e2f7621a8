-- Ledger shards (migration 0012; ledgerq/ledger/split/ids.py).

-- name: assign_shard
-- `ledgerq migrate`, on each shard's database: record the shard, narrow the id
-- sequence to its range. The index recorded before (NULL: none).
SELECT ledgerq_assign_shard(:shard_index, :shard_count, :first_id, :last_id) AS recorded

-- name: shard_identity
-- Every service's start check: what the database says it is (no row: never
-- assigned by `ledgerq migrate`).
SELECT shard_index, shard_count FROM ledgerq_ledger_shard

-- name: shard_table_exists
-- Before migration 0012 there is nothing to assign.
SELECT to_regclass('ledgerq_ledger_shard') IS NOT NULL
