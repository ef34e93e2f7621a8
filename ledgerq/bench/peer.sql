-- The Celery peer's table (ledgerq bench --peer celery). Loaded by
-- ledgerq/bench/peer.py; see ledger/sql.py for the format.

-- name: create_table
CREATE TABLE IF NOT EXISTS ledgerq_bench_celery (
    id bigserial PRIMARY KEY, n bigint NOT NULL,
    written_at timestamptz NOT NULL DEFAULT clock_timestamp())

-- name: reset
TRUNCATE ledgerq_bench_celery

-- name: count
SELECT count(*) FROM ledgerq_bench_celery

-- name: drain_span
-- From the first task's write to the last one's, in seconds.
SELECT count(*), EXTRACT(EPOCH FROM max(written_at) - min(written_at))
FROM ledgerq_bench_celery

-- name: insert
-- Run by the Celery task through psycopg itself (psycopg's placeholder style).
INSERT INTO ledgerq_bench_celery (n) VALUES (%(n)s)
