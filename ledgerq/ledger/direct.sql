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
-- re-publishes it if the message is lost). The claim is the claim statement's
-- (fragments.sql claim_set, claimed_columns, claim_answer): epoch + 1, running,
-- attempts + 1, lease, worker; the message the relay may have published for
-- the old epoch claims nothing afterwards. As in claim: a picked row whose
-- expiry has passed ends cancelled and expired instead (expired_burial; and
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
), {{expired_burial}}, claimed AS (
    UPDATE ledgerq_tasks t
    {{claim_set}}
    FROM picked m
    WHERE t.id = m.id AND t.epoch = m.epoch AND t.status = 'pending'
      AND (t.expires_at IS NULL OR t.expires_at > now())
    RETURNING {{claimed_columns}}
)
SELECT {{claim_answer}}
FROM claimed LEFT JOIN told ON true
