-- Rate limits on the MySQL / MariaDB ledger (ledger/mysql/metering.py): the
-- token buckets of ledgerq_kinds (migration m0009), which the one pick rule's
-- callers (the relay's window, the reconciler's overdue pick, the direct claim)
-- take tokens from, and the limits operators and workers write. PostgreSQL's
-- buckets and taken (migration 0014, ledgerq_pick), set_limit
-- (scheduling.sql) and register_limits (queries.sql).

-- name: metered_kinds
-- The kinds under a limit, whoever holds their bucket now: the pick's ordinary
-- lanes leave them out (their rows go only through a bucket). A plain read.
SELECT kind FROM ledgerq_kinds WHERE rate_per_s IS NOT NULL ORDER BY kind

-- name: lock_buckets
-- The buckets this transaction takes from: locked in kind order, skipping one
-- another picker holds (its kind gives nothing to this pick: no two pickers
-- spend the same tokens, and none waits for another), each with what it holds
-- now (its tokens refilled at rate_per_s since refilled_at, at most burst)
-- and the clock reading that was computed at (the statement's: one reading for
-- every bucket).
SELECT kind,
       LEAST(burst, tokens + rate_per_s * GREATEST(
           TIMESTAMPDIFF(MICROSECOND, refilled_at, UTC_TIMESTAMP(6)), 0) / 1e6) AS avail,
       UTC_TIMESTAMP(6) AS at
FROM ledgerq_kinds
WHERE rate_per_s IS NOT NULL
ORDER BY kind
FOR UPDATE SKIP LOCKED

-- name: debit
-- A locked bucket after its pick: what it held at :at less the rows the pick
-- admitted, in the same transaction as those rows (a pick rolled back spends
-- nothing).
UPDATE ledgerq_kinds SET tokens = :tokens, refilled_at = :at
WHERE kind = :kind AND rate_per_s IS NOT NULL

-- name: kind_limits
-- The stored limits of :kinds (register_limits compares them first).
SELECT kind, rate_per_s, burst FROM ledgerq_kinds WHERE kind IN :kinds

-- name: set_limit
-- A kind's rate limit (NULL rate and burst: none), by an operator (`ledgerq
-- kinds limit`) or a worker at its start whose @task(rate_limit=...) differs
-- from the stored one. A changed limit starts a full bucket.
INSERT INTO ledgerq_kinds (kind, rate_per_s, burst, tokens, refilled_at, updated_at)
VALUES (:kind, :rate, :burst, COALESCE(:burst, 0), UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))
ON DUPLICATE KEY UPDATE rate_per_s = :rate, burst = :burst, tokens = COALESCE(:burst, 0),
                        refilled_at = UTC_TIMESTAMP(6), updated_at = UTC_TIMESTAMP(6)
