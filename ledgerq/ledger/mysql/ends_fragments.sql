-- What a plan that ends tasks reads next, in one round trip (families.sql
-- ended_near) or each alone (dependencies.sql edges_near, families.sql
-- families_touched). Plain reads: see ledger/mysql/dependencies.py and
-- families.py for what the locks that follow them guarantee.

-- fragment: edges_near
-- The edges of the tasks that just ended (:ids, as dependents: their ended_at
-- is to be stamped), and every edge of each waiting task that depends on one
-- of them (the list of its dependencies; only the waiting ones, so the lock
-- that follows asks for rows that exist: a record lock each, never a gap).
-- UNION ALL, no temporary table: an edge met twice (a task waiting for two
-- of :ids) is counted once by the caller.
SELECT 'edge' AS what, e.task_id, e.depends_on
FROM ledgerq_dependencies e WHERE e.task_id IN :ids
UNION ALL
SELECT 'edge', e.task_id, e.depends_on
FROM ledgerq_dependencies d
JOIN ledgerq_tasks w ON w.id = d.task_id AND w.status = 'waiting'
JOIN ledgerq_dependencies e ON e.task_id = d.task_id
WHERE d.depends_on IN :ids

-- fragment: families_touched
-- The open families the tasks :ids (just ended, in history) touch: their own
-- (a parent ended) and their parents' (a child ended); a family met twice is
-- counted once by the caller.
SELECT 'family' AS what, f.parent_id, NULL
FROM ledgerq_families f
WHERE f.parent_id IN :ids AND f.completed_at IS NULL
UNION ALL
SELECT 'family', f.parent_id, NULL
FROM ledgerq_history h JOIN ledgerq_families f ON f.parent_id = h.parent_id
WHERE h.id IN :ids AND f.completed_at IS NULL
