-- queries.sql's statements for a demo shop on MySQL / MariaDB (the same names).
-- Timestamps are UTC, as the MySQL ledger's.

-- name: create_orders
CREATE TABLE IF NOT EXISTS ledgerq_demo_orders (
    id BIGINT AUTO_INCREMENT PRIMARY KEY, customer TEXT NOT NULL,
    created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6))

-- name: create_receipts
CREATE TABLE IF NOT EXISTS ledgerq_demo_receipts (
    task_id BIGINT PRIMARY KEY, order_id BIGINT NOT NULL,
    written_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6))

-- name: insert_order
-- The new order's id is the driver's lastrowid (MySQL has no RETURNING).
INSERT INTO ledgerq_demo_orders (customer) VALUES (:customer)

-- name: insert_receipt
INSERT INTO ledgerq_demo_receipts (task_id, order_id) VALUES (:task_id, :order_id)

-- name: reset
TRUNCATE ledgerq_demo_orders

-- name: reset_receipts
TRUNCATE ledgerq_demo_receipts

-- name: count_receipts
SELECT COUNT(*), COUNT(DISTINCT task_id) FROM ledgerq_demo_receipts
