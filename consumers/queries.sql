-- The SQL of the consumers package: the demo's tables and the benchmark's
-- measurements. Loaded by consumers/sql.py; see ledger/sql.py for the format.

-- name: create_orders
CREATE TABLE IF NOT EXISTS ledgerq_demo_orders (
    id bigserial PRIMARY KEY, customer text NOT NULL, created_at timestamptz DEFAULT now())

-- name: create_receipts
CREATE TABLE IF NOT EXISTS ledgerq_demo_receipts (
    task_id bigint PRIMARY KEY, order_id bigint NOT NULL,
    written_at timestamptz NOT NULL DEFAULT now())

-- name: insert_order
INSERT INTO ledgerq_demo_orders (customer) VALUES (:customer) RETURNING id

-- name: insert_receipt
INSERT INTO ledgerq_demo_receipts (task_id, order_id) VALUES (:task_id, :order_id)

-- name: reset_demo
TRUNCATE ledgerq_tasks, ledgerq_history, ledgerq_demo_orders, ledgerq_demo_receipts

-- name: clear_run
-- Between drains over a filled history: the last run's rows go, the filler stays.
DELETE FROM ledgerq_history WHERE id > 0

-- name: count_receipts
SELECT count(*), count(DISTINCT task_id) FROM ledgerq_demo_receipts

-- name: count_history
-- (ids <= 0 are the benchmark's filler rows, see fill_history)
SELECT count(*) FROM ledgerq_history WHERE id > 0

-- name: drain_span
-- Tasks finished and the seconds from the first publication to the last finish.
SELECT count(*), EXTRACT(EPOCH FROM max(finished_at) - min(published_at))::float8
FROM ledgerq_history WHERE id > 0

-- name: latencies
SELECT id, EXTRACT(EPOCH FROM started_at)::float8 AS started,
       EXTRACT(EPOCH FROM finished_at)::float8 AS finished
FROM ledgerq_history WHERE id = ANY(CAST(:ids AS bigint[]))

-- name: fill_history
-- Finished rows for the flat-cost check (negative ids never meet real ones).
INSERT INTO ledgerq_history (id, kind, queue, payload, priority, shard, run_at, status,
                             attempts, max_attempts, epoch, publishes, created_at, published_at,
                             started_at, finished_at)
SELECT -g, 'bench.old', 'default', '{}'::jsonb, 0, 0, now(), 'succeeded', 1, 5, 1, 1,
       now(), now(), now(), now()
FROM generate_series(1, :n) AS g

-- name: vacuum_history
-- Run in autocommit: a filled (or just cleared) history starts each drain in the
-- state a long-lived, vacuumed history table is in.
VACUUM (ANALYZE) ledgerq_history

-- name: checkpoint
-- After the fill's burst of WAL, so the checkpoint it triggers does not land in
-- the middle of a measured drain (needs a superuser; skipped otherwise).
CHECKPOINT
