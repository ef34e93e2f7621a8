-- Fan-out on the MySQL / MariaDB ledger (parent_id, @task(on_children_done=...);
-- migration m0007; ledger/mysql/families.py runs them and states their locks).

-- name: parents_known
-- The named parents that exist, live or in history (a plain read, as
-- PostgreSQL's trigger reads them).
SELECT id FROM ledgerq_tasks WHERE id IN :ids
UNION
SELECT id FROM ledgerq_history WHERE id IN :ids

-- name: open_family
-- A parent's family row, created by its first child's insert. A plain INSERT:
-- a row that exists already fails it with a duplicate key (1062, this
-- statement rolled back alone), caught by the plan; either way the producer's
-- transaction now holds a lock on the row (the insert's, or the duplicate
-- check's shared one) until it ends.
INSERT INTO ledgerq_families (parent_id, created_at) VALUES (:parent_id, UTC_TIMESTAMP(6))

-- name: completed_families
-- Of the families :ids, the ones completed already, read locked (the latest
-- committed row): a child of one is refused.
SELECT parent_id FROM ledgerq_families
WHERE parent_id IN :ids AND completed_at IS NOT NULL
ORDER BY parent_id
LOCK IN SHARE MODE

-- name: families_touched
-- The open families the tasks :ids touch (ends_fragments.sql families_touched):
-- rows ('family', parent_id, NULL).
{{families_touched}}

-- name: ended_near
-- What every plan that ends tasks (:ids) reads first, one round trip: the
-- edges near them and the open families they touch (ends_fragments.sql), each
-- row tagged 'edge' or 'family'. Nothing, when nobody uses after= or parent_id
-- near them: the finish's cost then.
({{edges_near}})
UNION ALL
({{families_touched}})

-- name: lock_families
-- The open families :ids, locked in parent-id order: the lock every
-- completion check of a family takes first.
SELECT parent_id FROM ledgerq_families
WHERE parent_id IN :ids AND completed_at IS NULL
ORDER BY parent_id
FOR UPDATE

-- name: families_done
-- Of the locked families :ids, those whose parent and children are all
-- terminal (none live), with the parent's kind, queue, priority and shard and
-- its kind's callback (NULL: none, or the parent purged). A plain read: READ
-- COMMITTED in ledgerq's own transactions, so it sees every end committed
-- before it, the one the family lock waited for included.
SELECT f.parent_id, h.queue, h.priority, h.shard, k.on_children_done
FROM ledgerq_families f
LEFT JOIN ledgerq_history h ON h.id = f.parent_id
LEFT JOIN ledgerq_kinds k ON k.kind = h.kind
WHERE f.parent_id IN :ids
  AND NOT EXISTS (SELECT 1 FROM ledgerq_tasks t WHERE t.id = f.parent_id)
  AND NOT EXISTS (SELECT 1 FROM ledgerq_tasks c WHERE c.parent_id = f.parent_id)
ORDER BY f.parent_id

-- name: insert_callback
-- The family's callback: a task of the kind :callback, in the parent's queue,
-- priority and shard, its payload the children's counts by outcome in history.
-- transitions: -> pending
INSERT INTO ledgerq_tasks (kind, queue, payload, priority, shard, run_at, status, created_at)
SELECT :callback, :queue,
       JSON_OBJECT('parent_id', :parent_id,
                   'succeeded', CAST(COALESCE(SUM(h.status = 'succeeded'), 0) AS SIGNED),
                   'dead', CAST(COALESCE(SUM(h.status = 'dead'), 0) AS SIGNED),
                   'cancelled', CAST(COALESCE(SUM(h.status = 'cancelled'), 0) AS SIGNED)),
       :priority, :shard, UTC_TIMESTAMP(6), 'pending', UTC_TIMESTAMP(6)
FROM ledgerq_history h
WHERE h.parent_id = :parent_id

-- name: complete_family
-- The family completes, once (its row locked since lock_families).
UPDATE ledgerq_families SET completed_at = UTC_TIMESTAMP(6), callback_id = :callback_id
WHERE parent_id = :parent_id AND completed_at IS NULL

-- name: family_row
-- show: when the family of :id completed and the callback it enqueued.
SELECT completed_at, callback_id FROM ledgerq_families WHERE parent_id = :id

-- name: children_done_kinds
-- The stored callbacks of :kinds (register_children_done compares them first).
SELECT kind, on_children_done FROM ledgerq_kinds WHERE kind IN :kinds

-- name: set_children_done
-- A kind's callback, written by a worker at its start when it differs from the
-- stored one (the latest worker to start stands).
INSERT INTO ledgerq_kinds (kind, on_children_done, updated_at)
VALUES (:kind, :callback, UTC_TIMESTAMP(6))
ON DUPLICATE KEY UPDATE on_children_done = :callback, updated_at = UTC_TIMESTAMP(6)

-- name: truncate_families
-- The testing protocol's truncate.
DELETE FROM ledgerq_families
