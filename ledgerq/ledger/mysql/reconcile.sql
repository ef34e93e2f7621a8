-- The reconciler's broker duties on the MySQL / MariaDB ledger
-- (ledger/mysql/reconcile.py loads them as ReconcileQueries; fragments from
-- ledger/mysql/fragments.sql). PostgreSQL's select_stalled and
-- unpublish_unserved (queries.sql): candidates read first, then locked by
-- primary key (FOR UPDATE SKIP LOCKED) with their conditions re-checked, then
-- written by id (relay.sql's mark_published, take_back).

-- name: stalled_candidates
-- Published but unclaimed for longer than the row's queue's stall window
-- (:stalls, a JSON object of seconds by queue; else :default_stall_s), which
-- doubles with each publication since the last claim (up to 64x), so a queue
-- with a deep backlog or no consumer is not flooded with copies. Only rows
-- whose route a live subscriber still serves (fragment route_served): they are
-- published there again; a row whose route lost its subscribers goes back to
-- pending instead (unserved_candidates). A page at a time, by id (ids above
-- :after); the plain :min_stall_us bound narrows the scan.
SELECT t.id, t.epoch
FROM ledgerq_tasks t
WHERE t.status = 'published' AND t.id > :after
  AND t.published_at < UTC_TIMESTAMP(6) - INTERVAL :min_stall_us MICROSECOND
  AND TIMESTAMPDIFF(MICROSECOND, t.published_at, UTC_TIMESTAMP(6))
      > COALESCE(JSON_UNQUOTE(JSON_EXTRACT(:stalls, CONCAT('$."', t.queue, '"'))) + 0e0,
                 :default_stall_s) * 1e6 * POW(2, LEAST(GREATEST(t.publishes - 1, 0), 6))
  AND {{route_served}}
ORDER BY t.id
LIMIT :limit

-- name: lock_stalled
-- The stalled candidates still published, locked (a row a worker is claiming
-- right now is left to the next pass); the caller keeps those still at the
-- epoch it read.
SELECT t.id, t.kind, t.queue, t.priority, t.epoch, t.suspect, COALESCE(t.route, '') AS route
FROM ledgerq_tasks t
WHERE t.id IN :ids AND t.status = 'published'
ORDER BY t.id
FOR UPDATE SKIP LOCKED

-- name: unserved_candidates
-- Published rows whose route no live subscriber serves any more (its workers
-- stopped, or died and their subscriptions lapsed; or the queue is now served
-- --direct), oldest id first, at most :limit.
SELECT t.id, t.epoch
FROM ledgerq_tasks t
WHERE t.status = 'published' AND NOT {{route_served}}
ORDER BY t.id
LIMIT :limit

-- name: lock_unserved
-- The unserved candidates still published and still unserved, locked (SKIP
-- LOCKED: a row a worker is claiming is left alone), and their epochs.
SELECT t.id, t.epoch
FROM ledgerq_tasks t
WHERE t.id IN :ids AND t.status = 'published' AND NOT {{route_served}}
ORDER BY t.id
FOR UPDATE SKIP LOCKED
