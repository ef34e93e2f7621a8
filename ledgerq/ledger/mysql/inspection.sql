-- Read-only questions about the MySQL / MariaDB ledger (ledger/mysql/inspection.py):
-- PostgreSQL's routing.sql list_subscriptions, list_windows and unserved, in
-- MySQL's SQL. A subscription's kinds and shards are JSON arrays (NULL: all); a route is '' for the queue's own broker
-- queue. No statement here changes anything.

-- name: list_subscriptions
-- Every subscription (live first), for `ledgerq stats` and the dashboard.
SELECT worker, queue, kinds, shards, route, capacity, direct, started_at, expires_at,
       expires_at > UTC_TIMESTAMP(6) AS live
FROM ledgerq_subscriptions
ORDER BY expires_at > UTC_TIMESTAMP(6) DESC, queue, route, worker

-- name: unserved
-- Due pending tasks that no live subscription covers, by queue, kind and
-- shard: the backlog that waits for a worker to serve it (a kind no live
-- worker registers, a shard no live worker serves, a queue nobody consumes).
-- Grouped first (the due index), then each group asked once.
SELECT g.queue, g.kind, g.shard, g.tasks, g.oldest
FROM (SELECT t.queue, t.kind, t.shard, COUNT(*) AS tasks, MIN(t.run_at) AS oldest
      FROM ledgerq_tasks t
      WHERE t.status = 'pending' AND t.run_at <= UTC_TIMESTAMP(6)
      GROUP BY t.queue, t.kind, t.shard) g
WHERE NOT EXISTS (
    SELECT 1 FROM ledgerq_subscriptions s
    WHERE s.queue = g.queue AND s.expires_at > UTC_TIMESTAMP(6)
      AND (s.kinds IS NULL OR JSON_CONTAINS(s.kinds, JSON_QUOTE(g.kind)))
      AND (s.shards IS NULL OR JSON_CONTAINS(s.shards, CAST(g.shard AS CHAR))))
ORDER BY g.queue, g.kind, g.shard

-- name: list_windows
-- Each live broker route's window (PostgreSQL's view ledgerq_windows): its
-- live broker subscribers' capacity and what is published to it and not yet
-- claimed (published); the room left is what the relay may still publish. A
-- queue a live direct worker serves whole has no broker window. A worker's
-- personal route (sticky retries, migration m0011) is a window of its own.
SELECT w.queue, w.route, w.capacity,
       (SELECT COUNT(*) FROM ledgerq_tasks p
        WHERE p.status = 'published' AND p.queue = w.queue AND p.route = w.route) AS published
FROM (SELECT queue, COALESCE(route, '') AS route, SUM(capacity) AS capacity
      FROM ledgerq_subscriptions
      WHERE expires_at > UTC_TIMESTAMP(6) AND NOT direct
      GROUP BY queue, COALESCE(route, ''), kinds, shards
      UNION ALL
      SELECT queue, sticky_route, capacity
      FROM ledgerq_subscriptions
      WHERE expires_at > UTC_TIMESTAMP(6) AND NOT direct AND sticky_route IS NOT NULL) w
WHERE NOT EXISTS (SELECT 1 FROM ledgerq_subscriptions d
                  WHERE d.direct AND d.queue = w.queue AND d.expires_at > UTC_TIMESTAMP(6)
                    AND d.kinds IS NULL)
ORDER BY w.queue, w.route

