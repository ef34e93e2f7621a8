-- The ledger-direct path (consumers/direct.py): a worker claims due tasks
-- straight from the ledger, with no broker in between. ledger/sql.py loads
-- them as DirectQueries.

-- name: claim_due
-- The due tasks of the worker's :queues and :kinds (NULL: every kind), picked
-- by ledgerq_pick (migration 0014), the relay's rule exactly, each queue a
-- window of :limit, and claimed in the same statement: one round trip per
-- batch, autocommit.
-- SKIP LOCKED: direct workers and relays never wait for each other; a row a
-- relay holds (selected, being published) is skipped, and a row this
-- statement holds is skipped by the relay. Only 'pending' rows are taken: a
-- row the relay marked published is left to its message (the reconciler
-- re-publishes it if the message is lost). The claim is the claim statement's:
-- epoch + 1, running, attempts + 1, lease, worker; the message the relay may
-- have published for the old epoch claims nothing afterwards. As in claim: a
-- picked row whose expiry has passed ends cancelled and expired instead (and
-- the first claim's trigger fills what the producer left unset).
-- transitions: pending -> running, pending -> cancelled
WITH picked AS (
    SELECT id, epoch
    FROM ledgerq_pick(
        (SELECT jsonb_agg(jsonb_build_object('queue', q, 'route', '',
                                             'kinds', CAST(:kinds AS text[]), 'credit', :limit))
         FROM unnest(CAST(:queues AS text[])) AS q),
        :limit, :aging_s)
), ended AS (
    DELETE FROM ledgerq_tasks t USING picked m
    WHERE t.id = m.id AND t.epoch = m.epoch AND t.status = 'pending' AND t.expires_at <= now()
    RETURNING t.*, {{expired_end}}
), buried AS (
    {{bury}}
    RETURNING id
), {{expired_audit}}, told AS (
    {{tell_ended}}
), claimed AS (
    UPDATE ledgerq_tasks t
    SET status = 'running', epoch = t.epoch + 1, attempts = t.attempts + 1, publishes = 0,
        started_at = clock_timestamp(), heartbeat_at = clock_timestamp(),
        lease_until = clock_timestamp() + make_interval(secs => :lease_s), worker = :worker
    FROM picked m
    WHERE t.id = m.id AND t.epoch = m.epoch AND t.status = 'pending'
      AND (t.expires_at IS NULL OR t.expires_at > now())
    RETURNING t.id, t.epoch, t.kind, t.queue, CAST(t.payload AS text) AS payload_text,
              t.attempts, t.max_attempts, t.retry, t.timeout_s, t.checkpoint, t.business_key,
              t.parent_id, t.trace_context,
              EXTRACT(EPOCH FROM t.started_at - GREATEST(t.created_at, t.run_at))::float8 AS waited_s
)
SELECT id, epoch, kind, queue,
       CASE WHEN octet_length(payload_text) <= :max_payload_bytes THEN payload_text END
           AS payload_text,
       octet_length(payload_text) AS payload_bytes,
       attempts, max_attempts, retry, timeout_s, checkpoint, business_key, parent_id, waited_s,
       trace_context
FROM claimed LEFT JOIN told ON true
