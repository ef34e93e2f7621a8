-- The testing protocol's own statements (ledger/protocol.py, HarnessLedger):
-- the tests and the benchmark use them, no service does.

-- name: backdate
-- Simulate time passing: one of a live task's timestamps set :seconds before
-- now (negative: after). Only the named column moves.
UPDATE ledgerq_tasks
SET run_at = CASE WHEN :column = 'run_at'
                  THEN now() - make_interval(secs => :seconds) ELSE run_at END,
    published_at = CASE WHEN :column = 'published_at'
                        THEN now() - make_interval(secs => :seconds) ELSE published_at END,
    lease_until = CASE WHEN :column = 'lease_until'
                       THEN now() - make_interval(secs => :seconds) ELSE lease_until END,
    expires_at = CASE WHEN :column = 'expires_at'
                      THEN now() - make_interval(secs => :seconds) ELSE expires_at END
WHERE id = ANY(CAST(:ids AS bigint[]))
RETURNING id
