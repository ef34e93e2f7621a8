-- Sticky retries on the MySQL / MariaDB ledger (ledger/mysql/sticky.py):
-- what a worker registers for its kinds (ledgerq_kinds.sticky_s, migration
-- m0011). PostgreSQL's register_sticky (queries.sql), without unnest. The hold
-- itself is written by retry_tasks (queries.sql) and honoured by the pick
-- (fragments.sql held, due_lane, held_pick).

-- name: kind_windows
-- The stored windows of :kinds (register_sticky compares them first).
SELECT kind, sticky_s FROM ledgerq_kinds WHERE kind IN :kinds

-- name: set_window
-- A kind's window in seconds (NULL: none), written by a worker at its start
-- when it differs from the stored one.
INSERT INTO ledgerq_kinds (kind, sticky_s, updated_at)
VALUES (:kind, :seconds, UTC_TIMESTAMP(6))
ON DUPLICATE KEY UPDATE sticky_s = :seconds, updated_at = UTC_TIMESTAMP(6)
