-- Routing (ledger/routing.py, migrations 0011 and 0014): the workers'
-- subscriptions. The relay reads them as windows (the view ledgerq_windows)
-- inside select_due (queries.sql); ledgerq_route() says whether a live
-- subscription covers a task at all (unserved).

-- name: subscribe
-- A worker's subscriptions, at its start and on every refresh: (re)written
-- with a new expiry, its capacity per queue (the window's share it brings) and
-- whether it claims from the ledger itself (direct), and its personal route
-- (sticky_route, migration 0018; NULL: none). Its other rows (a queue it no
-- longer consumes) go.
WITH gone AS (
    DELETE FROM ledgerq_subscriptions
    WHERE worker = :worker AND queue <> ALL(CAST(:queues AS text[]))
)
INSERT INTO ledgerq_subscriptions AS s (worker, queue, kinds, shards, route, expires_at,
                                         capacity, direct, sticky_route)
SELECT :worker, r.queue, CAST(NULLIF(r.kinds, '') AS text[]), CAST(NULLIF(r.shards, '') AS integer[]),
       NULLIF(r.route, ''), now() + make_interval(secs => :ttl_s), r.capacity, :direct,
       NULLIF(r.sticky, '')
FROM unnest(CAST(:queues AS text[]), CAST(:kinds AS text[]), CAST(:shards AS text[]),
            CAST(:routes AS text[]), CAST(:capacities AS integer[]), CAST(:stickies AS text[]))
     AS r(queue, kinds, shards, route, capacity, sticky)
ON CONFLICT (worker, queue) DO UPDATE
SET kinds = excluded.kinds, shards = excluded.shards, route = excluded.route,
    expires_at = excluded.expires_at, capacity = excluded.capacity, direct = excluded.direct,
    sticky_route = excluded.sticky_route
RETURNING s.queue

-- name: unsubscribe
-- A worker that stops: its rows expire now but stay, so their queues stay
-- routed (what nothing serves waits in the ledger). Rows that expired a week
-- ago, of any worker, go (their workers are long gone).
WITH stale AS (
    DELETE FROM ledgerq_subscriptions WHERE expires_at < now() - interval '7 days'
)
UPDATE ledgerq_subscriptions SET expires_at = now()
WHERE worker = :worker
RETURNING queue

-- name: list_subscriptions
-- Every subscription (live first), for `ledgerq stats` and the dashboard.
SELECT worker, queue, kinds, shards, route, capacity, direct, started_at, expires_at,
       expires_at > now() AS live
FROM ledgerq_subscriptions
ORDER BY expires_at > now() DESC, queue, route NULLS FIRST, worker

-- name: unserved
-- Due pending tasks that no live subscription covers, by queue, kind and
-- shard: the backlog that waits for a worker to serve it (a kind no live
-- worker registers, a shard no live worker serves, a queue nobody consumes).
-- None of it was attempted; it runs once a worker that covers it starts.
-- Grouped first, then asked once per group (MATERIALIZED: else the planner
-- pushes the call back down to every row; 55-82 ms against 750-1,150 ms at
-- 200,000 due tasks).
WITH g AS MATERIALIZED (
    SELECT t.queue, t.kind, t.shard, count(*) AS tasks, min(t.run_at) AS oldest
    FROM ledgerq_tasks t
    WHERE t.status = 'pending' AND t.run_at <= now()
    GROUP BY t.queue, t.kind, t.shard
)
SELECT g.queue, g.kind, g.shard, g.tasks, g.oldest
FROM g
WHERE ledgerq_route(g.queue, g.kind, g.shard) IS NULL
ORDER BY g.queue, g.kind, g.shard

-- name: list_windows
-- Each live broker route's window: its subscribers' capacity, what is
-- published to it and not yet claimed, and the room left (ledgerq stats, the
-- benchmark's occupancy samples).
SELECT queue, route, capacity, capacity - credit AS published, GREATEST(credit, 0) AS room
FROM ledgerq_windows
ORDER BY queue, route

-- name: worker_alive
-- A worker's liveness beat (migration 0017), every second or so from its start
-- to the end of its stop: a dead worker's running tasks are rescued once its
-- :silence_s ran out while other workers' beats went on (ledgerq_worker_dead).
INSERT INTO ledgerq_workers AS w (worker, beat_at, silence_s)
VALUES (:worker, now(), :silence_s)
ON CONFLICT (worker) DO UPDATE SET beat_at = excluded.beat_at, silence_s = excluded.silence_s

-- name: worker_gone
-- A worker that stopped: its last beat says "presumed dead at once" (a task it
-- still held, a sync handler that outlived the grace, is rescued on the next
-- pass). Rows of workers gone over a week ago go.
WITH stale AS (
    DELETE FROM ledgerq_workers WHERE beat_at < now() - interval '7 days'
)
UPDATE ledgerq_workers SET beat_at = now(), silence_s = 0 WHERE worker = :worker

-- name: pool_members
-- The live members of a `--shards auto` pool (consumers/shard_pool.py): the
-- workers whose id ends with the pool's tag, not gone and not presumed dead
-- (ledgerq_worker_dead: so after a PostgreSQL restart, every worker silent at
-- once, nobody leaves the pool).
SELECT worker FROM ledgerq_workers
WHERE right(worker, length(:tag)) = :tag AND silence_s > 0
  AND NOT ledgerq_worker_dead(worker)
ORDER BY worker
