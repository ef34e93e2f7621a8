-- Ordering that blocks on the MySQL / MariaDB ledger (ledger/mysql/keys.py): what
-- a worker registers (ledgerq_kinds.ordering) and an operator's release of a
-- key held by dead tasks (ledgerq_key_releases), migration m0010. PostgreSQL's
-- register_ordering (queries.sql), key_holders, key_tasks and release_key
-- (operations.sql), without RETURNING or unnest.

-- name: kind_orderings
-- The stored orderings of :kinds (register_ordering compares them first).
SELECT kind, ordering FROM ledgerq_kinds WHERE kind IN :kinds

-- name: set_ordering
-- A kind's ordering, written by a worker at its start when it differs from
-- the stored one (a kind with no row is 'release').
INSERT INTO ledgerq_kinds (kind, ordering, updated_at)
VALUES (:kind, :ordering, UTC_TIMESTAMP(6))
ON DUPLICATE KEY UPDATE ordering = :ordering, updated_at = UTC_TIMESTAMP(6)

-- name: key_holders
-- The deaths that hold ordering key :key, by the pick's own rule
-- (fragments.sql key_holders), in id order.
{{key_holders(:key, ORDER BY h.id)}}

-- name: key_tasks
-- What else ordering key :key has: its live tasks, of which pending, and
-- whether any dead task has it (released or not).
SELECT (SELECT COUNT(*) FROM ledgerq_tasks WHERE ordering_key = :key) AS live,
       (SELECT COUNT(*) FROM ledgerq_tasks
        WHERE ordering_key = :key AND status = 'pending') AS waiting,
       EXISTS (SELECT 1 FROM ledgerq_history
               WHERE ordering_key = :key AND status = 'dead') AS has_dead

-- name: release_key
-- The deaths (id, epoch) in :fences stop holding ordering key :key: a
-- compare-and-set on (id, epoch, status) against history. A task retried
-- meanwhile (gone from history, or dead again under a new epoch) is not
-- released; a death released before keeps its first release (IGNORE meets only
-- the primary key). The task stays dead in history, untouched.
INSERT IGNORE INTO ledgerq_key_releases (task_id, epoch, ordering_key, audit_id, released_at)
SELECT h.id, h.epoch, h.ordering_key, :audit_id, UTC_TIMESTAMP(6)
FROM ledgerq_history h
WHERE (h.id, h.epoch) IN :fences AND h.status = 'dead' AND h.ordering_key = :key

-- name: released
-- ... and the deaths that release wrote (its audit record's).
SELECT task_id FROM ledgerq_key_releases WHERE audit_id = :audit_id ORDER BY task_id
