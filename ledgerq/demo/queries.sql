-- The demo shop's own tables (not the ledger's: those are reached through the
-- storage seam), on PostgreSQL; queries_mysql.sql has the same statements for a
-- MySQL / MariaDB ledger. Loaded by ledgerq/demo/__init__.py; see ledger/sql.py
-- for the format.

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

-- name: reset
TRUNCATE ledgerq_demo_orders

-- name: reset_receipts
TRUNCATE ledgerq_demo_receipts

-- name: count_receipts
SELECT count(*), count(DISTINCT task_id) FROM ledgerq_demo_receipts
