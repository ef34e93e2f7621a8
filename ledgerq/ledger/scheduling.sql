-- The operator's scheduling controls (ledger/pg/scheduling.py): pauses and
-- rate limits. ledger/sql.py loads them as SchedulingQueries. The relay's side
-- of the same tables (select_due, take_tokens, return_tokens, register_limits)
-- is in queries.sql.

-- name: pause
-- A queue or kind stops being published. Taking a pause already taken changes
-- nothing (and returns no row), so a second `pause` is not audited twice.
INSERT INTO ledgerq_pauses (scope, name, actor, reason)
VALUES (:scope, :name, :actor, :reason)
ON CONFLICT (scope, name) DO NOTHING
RETURNING paused_at

-- name: unpublish_paused
-- With a pause: the tasks of the paused queue or kind that were published but
-- not yet claimed go back to pending, their epoch bumped, so the messages in
-- RabbitMQ claim nothing (a worker acks them as stale) and the work waits in
-- the ledger. A running task runs on. Fenced like every write: a row a worker
-- claims meanwhile has moved on and is left alone.
-- transitions: published -> pending
UPDATE ledgerq_tasks t
SET status = 'pending', epoch = t.epoch + 1, published_at = NULL, publishes = 0
FROM (SELECT id, epoch FROM ledgerq_tasks
      WHERE status = 'published'
        AND ((:scope = 'queue' AND queue = :name) OR (:scope = 'kind' AND kind = :name))
      ORDER BY id
      FOR UPDATE SKIP LOCKED) m
WHERE t.id = m.id AND t.epoch = m.epoch AND t.status = 'published'
RETURNING t.id

-- name: resume
DELETE FROM ledgerq_pauses WHERE scope = :scope AND name = :name
RETURNING paused_at

-- name: list_pauses
SELECT scope, name, paused_at, actor, reason FROM ledgerq_pauses ORDER BY scope, name

-- name: set_limit
-- An operator's rate limit for a kind (`ledgerq kinds limit`), or NULL rate and
-- burst to lift it. A changed limit starts a full bucket.
INSERT INTO ledgerq_kinds AS k (kind, rate_per_s, burst, tokens)
VALUES (:kind, :rate, :burst, COALESCE(CAST(:burst AS float8), 0))
ON CONFLICT (kind) DO UPDATE
SET rate_per_s = excluded.rate_per_s, burst = excluded.burst, tokens = excluded.tokens,
    updated_at = now()
RETURNING kind

-- name: list_kinds
-- Every kind with a limit, a pause or ordering "block", and how many of its
-- tasks wait.
SELECT n.kind, k.rate_per_s, k.burst, p.paused_at IS NOT NULL AS paused,
       COALESCE(k.ordering, 'release') AS ordering,
       (SELECT count(*) FROM ledgerq_tasks t WHERE t.kind = n.kind AND t.status = 'pending')
           AS pending
FROM (SELECT kind FROM ledgerq_kinds WHERE rate_per_s IS NOT NULL OR ordering = 'block'
      UNION SELECT name FROM ledgerq_pauses WHERE scope = 'kind')
     AS n(kind)
LEFT JOIN ledgerq_kinds k ON k.kind = n.kind
LEFT JOIN ledgerq_pauses p ON p.scope = 'kind' AND p.name = n.kind
ORDER BY n.kind
