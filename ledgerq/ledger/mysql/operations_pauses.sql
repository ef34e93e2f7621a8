-- The operator's pauses on the MySQL / MariaDB ledger (ledger/mysql/operations_pauses.py):
-- PostgreSQL's scheduling.sql pause, unpublish_paused, resume, list_pauses and
-- list_kinds, without RETURNING. Table ledgerq_pauses: migration m0003 (set_limit:
-- metering.sql).

-- name: pause
-- A queue or kind is paused. A pause already in force is left as it is (its
-- first actor, time and reason stand) and the statement reports 0 rows, so a
-- second `pause` changes nothing and is not audited twice. (IGNORE only
-- meets the duplicate key: scope and name are validated before, and actor is
-- bounded like the audit record's.)
INSERT IGNORE INTO ledgerq_pauses (scope, name, paused_at, actor, reason)
VALUES (:scope, :name, UTC_TIMESTAMP(6), :actor, :reason)

-- name: lock_paused_published
-- With a new pause, first step: the published tasks of the paused queue or
-- kind, locked unless another transaction holds them (a worker claiming one:
-- it runs on).
SELECT t.id, t.epoch FROM ledgerq_tasks t
WHERE t.status = 'published'
  AND ((:scope = 'queue' AND t.queue = :name) OR (:scope = 'kind' AND t.kind = :name))
ORDER BY t.id
FOR UPDATE SKIP LOCKED

-- name: unpublish_paused
-- ... then those locked rows go back to pending, their epoch bumped, so the
-- messages already sent claim nothing and the work waits in the ledger.
-- Fenced like every write (:batch's field epoch).
-- transitions: published -> pending
UPDATE ledgerq_tasks t
SET t.status = 'pending', t.epoch = t.epoch + 1, t.published_at = NULL, t.publishes = 0
WHERE t.id IN :ids AND t.epoch = CAST({{field(epoch)}} AS SIGNED) AND t.status = 'published'

-- name: resume
-- A pause is lifted; 0 rows: there was none.
DELETE FROM ledgerq_pauses WHERE scope = :scope AND name = :name

-- name: list_pauses
SELECT scope, name, paused_at, actor, reason FROM ledgerq_pauses ORDER BY scope, name

-- name: list_kinds
-- Every kind with a limit, a pause or ordering "block", and how many of its
-- tasks wait (migrations m0009 and m0010 for the limits and orderings).
SELECT n.kind, k.rate_per_s, k.burst, p.paused_at IS NOT NULL AS paused,
       COALESCE(k.ordering, 'release') AS ordering,
       (SELECT COUNT(*) FROM ledgerq_tasks t WHERE t.kind = n.kind AND t.status = 'pending')
           AS pending
FROM (SELECT kind FROM ledgerq_kinds WHERE rate_per_s IS NOT NULL OR ordering = 'block'
      UNION SELECT name FROM ledgerq_pauses WHERE scope = 'kind') n
LEFT JOIN ledgerq_kinds k ON k.kind = n.kind
LEFT JOIN ledgerq_pauses p ON p.scope = 'kind' AND p.name = n.kind
ORDER BY n.kind

-- name: truncate_pauses
-- The testing protocol's truncate: every pause.
DELETE FROM ledgerq_pauses
