-- The ledger-direct path (consumers/direct.py): a worker claims due tasks
-- straight from the ledger, with no broker in between. ledger/sql.py loads
-- them as DirectQueries.

-- name: claim_due
-- select_due (queries.sql) and claim in one statement: one round trip per
-- batch, autocommit. The scheduling CTEs (buckets, aged, fresh, metered,
-- taken) are select_due's, word for word, with one more predicate: the
-- worker's :queues. tests/unit/test_direct_sql.py checks they stay in step.
-- SKIP LOCKED: direct workers and relays never wait for each other; a row a
-- relay holds (selected, being published) is skipped, and a row this
-- statement holds is skipped by the relay. Only 'pending' rows are taken: a
-- row the relay marked published is left to its message (the reconciler
-- re-publishes it if the message is lost). The claim is the claim statement's:
-- epoch + 1, running, attempts + 1, lease, worker; the message the relay may
-- have published for the old epoch claims nothing afterwards.
-- transitions: pending -> running
WITH buckets AS (
    SELECT kind, clock_timestamp() AS at,
           LEAST(burst, tokens + rate_per_s * GREATEST(
               EXTRACT(EPOCH FROM clock_timestamp() - refilled_at), 0)) AS avail
    FROM ledgerq_kinds
    WHERE rate_per_s IS NOT NULL
    ORDER BY kind
    FOR UPDATE SKIP LOCKED
), aged AS (
    SELECT t.id, t.kind, t.queue, t.priority, t.epoch, t.suspect, t.trace_context, t.attempts, t.run_at,
           t.shard
    FROM ledgerq_tasks t
    WHERE t.status = 'pending' AND t.run_at <= now() - make_interval(secs => :aging_s)
      AND t.queue = ANY(CAST(:queues AS text[]))
      AND t.queue <> ALL(ARRAY(SELECT name FROM ledgerq_pauses WHERE scope = 'queue'))
      AND t.kind <> ALL(ARRAY(SELECT name FROM ledgerq_pauses WHERE scope = 'kind'))
      AND t.kind <> ALL(ARRAY(SELECT kind FROM ledgerq_kinds WHERE rate_per_s IS NOT NULL))
      AND (t.queue <> ALL(ARRAY(SELECT DISTINCT queue FROM ledgerq_subscriptions))
        OR t.queue = ANY(ARRAY(SELECT queue FROM ledgerq_subscriptions
                               WHERE kinds IS NULL AND shards IS NULL AND expires_at > now()))
        OR ledgerq_route(t.queue, t.kind, t.shard) IS NOT NULL)
      AND (t.ordering_key IS NULL OR (NOT EXISTS (
          SELECT 1 FROM ledgerq_tasks e
          WHERE e.ordering_key = t.ordering_key AND e.id <> t.id
            AND (e.status <> 'pending' OR e.id < t.id))
        AND NOT (cardinality(ARRAY(SELECT kind FROM ledgerq_kinds WHERE ordering = 'block')) > 0
          AND EXISTS (
            SELECT 1 FROM ledgerq_history h
            WHERE h.ordering_key = t.ordering_key AND h.status = 'dead' AND h.id < t.id
              AND h.kind = ANY(ARRAY(SELECT kind FROM ledgerq_kinds WHERE ordering = 'block'))))))
    ORDER BY t.run_at, t.id
    LIMIT :limit
    FOR UPDATE SKIP LOCKED
), fresh AS (
    SELECT t.id, t.kind, t.queue, t.priority, t.epoch, t.suspect, t.trace_context, t.attempts, t.run_at,
           t.shard
    FROM ledgerq_tasks t
    WHERE t.status = 'pending' AND t.run_at <= now()
      AND t.id <> ALL(ARRAY(SELECT id FROM aged))
      AND t.queue = ANY(CAST(:queues AS text[]))
      AND t.queue <> ALL(ARRAY(SELECT name FROM ledgerq_pauses WHERE scope = 'queue'))
      AND t.kind <> ALL(ARRAY(SELECT name FROM ledgerq_pauses WHERE scope = 'kind'))
      AND t.kind <> ALL(ARRAY(SELECT kind FROM ledgerq_kinds WHERE rate_per_s IS NOT NULL))
      AND (t.queue <> ALL(ARRAY(SELECT DISTINCT queue FROM ledgerq_subscriptions))
        OR t.queue = ANY(ARRAY(SELECT queue FROM ledgerq_subscriptions
                               WHERE kinds IS NULL AND shards IS NULL AND expires_at > now()))
        OR ledgerq_route(t.queue, t.kind, t.shard) IS NOT NULL)
      AND (t.ordering_key IS NULL OR (NOT EXISTS (
          SELECT 1 FROM ledgerq_tasks e
          WHERE e.ordering_key = t.ordering_key AND e.id <> t.id
            AND (e.status <> 'pending' OR e.id < t.id))
        AND NOT (cardinality(ARRAY(SELECT kind FROM ledgerq_kinds WHERE ordering = 'block')) > 0
          AND EXISTS (
            SELECT 1 FROM ledgerq_history h
            WHERE h.ordering_key = t.ordering_key AND h.status = 'dead' AND h.id < t.id
              AND h.kind = ANY(ARRAY(SELECT kind FROM ledgerq_kinds WHERE ordering = 'block'))))))
    ORDER BY t.priority DESC, t.attempts > 0, t.run_at, t.id
    LIMIT GREATEST(:limit - (SELECT count(*) FROM aged), 0)
    FOR UPDATE SKIP LOCKED
), metered AS (
    SELECT l.*
    FROM buckets b
    CROSS JOIN LATERAL (
        SELECT t.id, t.kind, t.queue, t.priority, t.epoch, t.suspect, t.trace_context, t.attempts, t.run_at,
           t.shard
        FROM ledgerq_tasks t
        WHERE t.status = 'pending' AND t.run_at <= now() AND t.kind = b.kind
          AND t.queue = ANY(CAST(:queues AS text[]))
          AND (t.queue <> ALL(ARRAY(SELECT DISTINCT queue FROM ledgerq_subscriptions))
            OR t.queue = ANY(ARRAY(SELECT queue FROM ledgerq_subscriptions
                                   WHERE kinds IS NULL AND shards IS NULL AND expires_at > now()))
            OR ledgerq_route(t.queue, t.kind, t.shard) IS NOT NULL)
          AND t.queue <> ALL(ARRAY(SELECT name FROM ledgerq_pauses WHERE scope = 'queue'))
          AND t.kind <> ALL(ARRAY(SELECT name FROM ledgerq_pauses WHERE scope = 'kind'))
          AND (t.ordering_key IS NULL OR (NOT EXISTS (
              SELECT 1 FROM ledgerq_tasks e
              WHERE e.ordering_key = t.ordering_key AND e.id <> t.id
                AND (e.status <> 'pending' OR e.id < t.id))
            AND NOT (cardinality(ARRAY(SELECT kind FROM ledgerq_kinds WHERE ordering = 'block')) > 0
              AND EXISTS (
                SELECT 1 FROM ledgerq_history h
                WHERE h.ordering_key = t.ordering_key AND h.status = 'dead' AND h.id < t.id
                  AND h.kind = ANY(ARRAY(SELECT kind FROM ledgerq_kinds WHERE ordering = 'block'))))))
        ORDER BY t.priority DESC, t.attempts > 0, t.run_at, t.id
        LIMIT CAST(floor(LEAST(b.avail, :limit)) AS bigint)
        FOR UPDATE SKIP LOCKED
    ) l
), taken AS (
    UPDATE ledgerq_kinds k
    SET tokens = b.avail - (SELECT count(*) FROM metered m WHERE m.kind = b.kind),
        refilled_at = b.at
    FROM buckets b
    WHERE k.kind = b.kind AND EXISTS (SELECT 1 FROM metered m WHERE m.kind = b.kind)
    RETURNING k.kind
), picked AS (
    SELECT id, epoch FROM aged
    UNION ALL SELECT id, epoch FROM fresh
    UNION ALL SELECT id, epoch FROM metered
), claimed AS (
    UPDATE ledgerq_tasks t
    SET status = 'running', epoch = t.epoch + 1, attempts = t.attempts + 1, publishes = 0,
        started_at = now(), heartbeat_at = now(),
        lease_until = clock_timestamp() + make_interval(secs => :lease_s), worker = :worker
    FROM picked m
    WHERE t.id = m.id AND t.epoch = m.epoch AND t.status = 'pending'
    RETURNING t.id, t.epoch, t.kind, t.queue, CAST(t.payload AS text) AS payload_text,
              t.attempts, t.max_attempts, t.retry, t.timeout_s, t.checkpoint, t.business_key,
              t.parent_id, t.trace_context,
              EXTRACT(EPOCH FROM now() - GREATEST(t.created_at, t.run_at))::float8 AS waited_s
)
SELECT id, epoch, kind, queue,
       CASE WHEN octet_length(payload_text) <= :max_payload_bytes THEN payload_text END
           AS payload_text,
       octet_length(payload_text) AS payload_bytes,
       attempts, max_attempts, retry, timeout_s, checkpoint, business_key, parent_id, waited_s,
       trace_context
FROM claimed
