-- The relay's statements on the MySQL / MariaDB ledger (ledger/mysql/relay.py
-- loads them as RelayQueries, fragments from ledger/mysql/fragments.sql), and
-- the reconciler's that publish or take back (ledger/mysql/reconcile.py).
-- PostgreSQL's select_due, mark_published, return_unpublished, kind_durations
-- (queries.sql) without RETURNING or unnest: a write locks its rows by primary
-- key first and reads their epochs (the caller keeps the rows whose epoch is
-- still the one it holds: the fence), then writes the kept rows by id, status
-- and epoch re-checked (the fence repeated), in the same transaction.
-- (Epochs are compared by the caller, not in SQL through a JSON batch: a JSON
-- document parsed once per row made a 500-row batch cost tens of ms.)

-- name: live_windows
-- The live broker routes (PostgreSQL's view ledgerq_windows, migrations 0014
-- and 0018): one row per queue and route ('' for the queue's own broker
-- queue) of the subscriptions that are live and not --direct; its kinds and
-- shards (JSON arrays, NULL: all; the route is a digest of them, so every
-- subscriber of a route has the same), its capacity (the subscribers' sum),
-- how many subscribers share it, its rows published there and not yet
-- claimed, and sticky NULL. Then one more row per live personal route (a
-- worker that runs a kind with @task(sticky_retry=...): its sticky_route, its
-- own kinds, shards and capacity, one subscriber, sticky its worker), which
-- gets only the rows held for that worker (fragment held_pick). The window's
-- credit is capacity minus published (relay_pick.py); a --direct worker's
-- queue and kinds are read apart (live_direct).
SELECT s.queue, s.route, s.kinds, s.shards, s.capacity, s.subscribers,
       (SELECT COUNT(*) FROM ledgerq_tasks p
        WHERE p.status = 'published' AND p.queue = s.queue AND p.route = s.route) AS published,
       s.sticky
FROM (SELECT queue, COALESCE(route, '') AS route, MIN(CAST(kinds AS CHAR)) AS kinds,
             MIN(CAST(shards AS CHAR)) AS shards, SUM(capacity) AS capacity,
             COUNT(*) AS subscribers, CAST(NULL AS CHAR) AS sticky
      FROM ledgerq_subscriptions
      WHERE expires_at > UTC_TIMESTAMP(6) AND NOT direct
      GROUP BY queue, COALESCE(route, '')
      UNION ALL
      SELECT queue, sticky_route, CAST(kinds AS CHAR), CAST(shards AS CHAR), capacity, 1,
             worker
      FROM ledgerq_subscriptions
      WHERE expires_at > UTC_TIMESTAMP(6) AND NOT direct AND sticky_route IS NOT NULL) s
ORDER BY s.queue, s.route

-- name: live_direct
-- The live --direct workers' queues and kinds (NULL: the whole queue): the
-- relay publishes none of those kinds there; a whole queue, nothing of it.
SELECT queue, kinds FROM ledgerq_subscriptions
WHERE direct AND expires_at > UTC_TIMESTAMP(6)

-- name: pick_window
-- One window's candidates, by the one pick rule (at most its credit).
{{due_pick}}

-- name: pick_held
-- A personal window's candidates: the rows held for its worker (:held_for), by
-- the pick's rule for them (at most its credit).
{{held_pick}}

-- name: lock_picked
-- The picked rows still pending, due and ready (fragment ready, re-checked on
-- the latest committed rows: a pause, or an earlier task of the key claimed or
-- published, since the pick's read stops the row), locked for the caller's
-- transaction by primary key only, and their epochs (the caller keeps those
-- still at the epoch it read); a row another transaction holds (another
-- relay's batch, a direct claim) is skipped, never waited for.
SELECT t.id, t.epoch
FROM ledgerq_tasks t
WHERE t.id IN :ids AND t.status = 'pending' AND t.run_at <= UTC_TIMESTAMP(6) AND {{ready}}
ORDER BY t.id
FOR UPDATE SKIP LOCKED

-- name: fence_publishing
-- mark_published, first step: the rows of :ids still pending or published,
-- locked (the caller's batch holds them already; a row outside it is waited
-- for, as PostgreSQL's UPDATE waits), and their epochs.
SELECT t.id, t.epoch
FROM ledgerq_tasks t
WHERE t.id IN :ids AND t.status IN ('pending', 'published')
ORDER BY t.id
FOR UPDATE

-- name: mark_published
-- By the relay before it publishes (its transaction commits, then the
-- messages go out), or by the reconciler after a confirmed publish (a stalled
-- published row, or an overdue pending one): published_at restarts the stall
-- clock (the statement's clock: MySQL's UTC_TIMESTAMP is the statement's, not
-- the transaction's start), route is where it went (:route, '' for the
-- queue's own: one statement per route). On the rows fence_publishing locked
-- whose epochs held, the fence repeated: (id, epoch) in :fences, status.
-- transitions: pending -> published, published -> published
UPDATE ledgerq_tasks t
SET t.status = 'published', t.published_at = UTC_TIMESTAMP(6), t.publishes = t.publishes + 1,
    t.route = :route
WHERE t.id IN :ids AND (t.id, t.epoch) IN :fences AND t.status IN ('pending', 'published')

-- name: fence_published
-- The rows of :ids still published, locked, their epochs and queues:
-- return_unpublished's and unpublish_unserved's first step.
SELECT t.id, t.epoch, t.queue
FROM ledgerq_tasks t
WHERE t.id IN :ids AND t.status = 'published'
ORDER BY t.id
FOR UPDATE

-- name: take_back
-- Published rows back to pending (the relay's publish failed; or the
-- reconciler's unpublish_unserved: their route lost its subscribers), their
-- epoch bumped so a message that reached the broker after all claims nothing.
-- On the rows fence_published locked whose epochs held, the fence repeated:
-- (id, epoch) in :fences, status.
-- transitions: published -> pending
UPDATE ledgerq_tasks t
SET t.status = 'pending', t.epoch = t.epoch + 1, t.published_at = NULL, t.publishes = 0,
    t.route = NULL
WHERE t.id IN :ids AND (t.id, t.epoch) IN :fences AND t.status = 'published'

-- name: kind_durations
-- How long each kind's attempts run, for the relay's envelopes (a long kind's
-- tasks travel one per message): the mean run time of its attempts that ended
-- in the last five minutes (at most the newest 5,000), and, for a kind with an
-- attempt running now, at least the oldest such attempt's age.
SELECT k.kind, MAX(k.s) AS seconds
FROM (SELECT r.kind, AVG(r.s) AS s
      FROM (SELECT h.kind, TIMESTAMPDIFF(MICROSECOND, h.started_at, h.finished_at) / 1e6 AS s
            FROM ledgerq_history h
            WHERE h.finished_at > UTC_TIMESTAMP(6) - INTERVAL 5 MINUTE
              AND h.started_at IS NOT NULL
            ORDER BY h.finished_at DESC
            LIMIT 5000) r
      GROUP BY r.kind
      UNION ALL
      SELECT t.kind, MAX(TIMESTAMPDIFF(MICROSECOND, t.started_at, UTC_TIMESTAMP(6))) / 1e6
      FROM ledgerq_tasks t
      WHERE t.status = 'running' AND t.lease_until IS NOT NULL
      GROUP BY t.kind) k
GROUP BY k.kind
