-- Dependencies between tasks (enqueue(..., after=...); migration 0020 holds the
-- functions these call and the trigger that releases dependents when a task
-- ends). ledger/sql.py loads them as AQ.

-- name: after_check
-- The producer's check before it writes: the live dependencies are locked FOR
-- KEY SHARE until its transaction ends; each id on another ledger shard
-- ('shard') or in neither table ('unknown') is returned.
SELECT dep, problem FROM ledgerq_after_check(CAST(:ids AS bigint[]))

-- name: after_add
-- The edges of tasks just inserted (parallel arrays); the tasks become waiting
-- and are judged at once (a dependency may have ended already). Returns how
-- many of them moved (released or cancelled) at once.
SELECT ledgerq_after_add(CAST(:tasks AS bigint[]), CAST(:deps AS bigint[]),
                         CAST(:always AS boolean[]))

-- name: release_stuck
-- The reconciler's safety net: waiting tasks none of whose dependencies is live
-- (a release the terminal write's trigger did not make: a dependency ended in a
-- REPEATABLE READ transaction that could not see the edge, or an operator's
-- retry brought a dependency back and it ended again), judged by the same
-- function as the trigger. Idempotent: a task already moved is skipped.
SELECT r.id, r.outcome
FROM ledgerq_release(ARRAY(
    SELECT w.id FROM ledgerq_tasks w
    WHERE w.status = 'waiting'
      AND NOT EXISTS (SELECT 1 FROM ledgerq_dependencies e
                      JOIN ledgerq_tasks t ON t.id = e.depends_on
                      WHERE e.task_id = w.id)
    ORDER BY w.id
    LIMIT :limit)) AS r

-- name: dependency_results
-- ctx.dependencies: each dependency of :id with its status and result (NULL
-- while it is live; a purged one is missing).
SELECT e.depends_on, h.status, h.result
FROM ledgerq_dependencies e
JOIN ledgerq_history h ON h.id = e.depends_on
WHERE e.task_id = :id
ORDER BY e.depends_on

-- name: task_graph
-- show: the dependencies ('dependency') and dependents ('dependent') of :id,
-- each with its status (NULL when purged) and kind (fragments.sql
-- status_and_kind).
SELECT 'dependency' AS side, e.depends_on AS id, e.always, x.status, x.kind
FROM ledgerq_dependencies e
{{status_and_kind(e.depends_on)}}
WHERE e.task_id = :id
UNION ALL
SELECT 'dependent', e.task_id, e.always, x.status, x.kind
FROM ledgerq_dependencies e
{{status_and_kind(e.task_id)}}
WHERE e.depends_on = :id
ORDER BY 1, 2
