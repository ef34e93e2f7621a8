"""The dashboard's rollup on the MySQL / MariaDB ledger (PostgreSQL's migration
0008): finished tasks counted per minute and per hour, and their latencies as
fixed log-scale histograms, so the overview never scans history.

- ``ledgerq_rollup_counts (grain, at, queue, kind, status, error, n)``: how many
  tasks finished per UTC minute or hour (``grain``) of ``finished_at``, per
  queue, kind, status and -- for dead tasks -- the last line of their last
  error, cut to 200 characters ('' for the others).
- ``ledgerq_rollup_latency (grain, at, queue, kind, hop, bucket, n)``: how many
  of them took that long on that hop (due_publish, publish_start, start_end,
  total), in the buckets of ``ledgerq/ledger/rollup.py``.
- ``ledgerq_rollup_state``: one row, ``rolled_upto``: every task that finished
  before it has been counted, none after it (NULL: the rollup never ran).

PostgreSQL's three SQL functions (the bucket, the hops, the error line) are
fragments of ``ledger/mysql/overview_fragments.sql`` here, spliced into the
statements that use them. The text columns compare as bytes (the collation
m0010 uses), as PostgreSQL's text does: two errors that differ in case or
trailing spaces are two rows. Written by the reconciler's pass
(``ledger/mysql/rollup.py``).

Revision ID: m0012
Revises: m0011
Create Date: 2026-11-28
"""

from __future__ import annotations

from alembic import op

revision = "m0012"
down_revision = "m0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    mariadb = bool(getattr(op.get_bind().dialect, "is_mariadb", False))
    collation = "utf8mb4_nopad_bin" if mariadb else "utf8mb4_0900_bin"
    table = f"ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = {collation}"
    op.execute(
        f"""
        CREATE TABLE IF NOT EXISTS ledgerq_rollup_counts (
            grain  VARCHAR(8)   NOT NULL,
            at     DATETIME(6)  NOT NULL,
            queue  VARCHAR(200) NOT NULL,
            kind   VARCHAR(200) NOT NULL,
            status VARCHAR(16)  NOT NULL,
            error  VARCHAR(200) NOT NULL DEFAULT '',
            n      BIGINT       NOT NULL,
            PRIMARY KEY (grain, at, queue, kind, status, error),
            CONSTRAINT ledgerq_rollup_counts_grain CHECK (grain IN ('minute', 'hour'))
        ) {table}
        """
    )
    op.execute(
        f"""
        CREATE TABLE IF NOT EXISTS ledgerq_rollup_latency (
            grain  VARCHAR(8)   NOT NULL,
            at     DATETIME(6)  NOT NULL,
            queue  VARCHAR(200) NOT NULL,
            kind   VARCHAR(200) NOT NULL,
            hop    VARCHAR(16)  NOT NULL,
            bucket SMALLINT     NOT NULL,
            n      BIGINT       NOT NULL,
            PRIMARY KEY (grain, at, queue, kind, hop, bucket),
            CONSTRAINT ledgerq_rollup_latency_grain CHECK (grain IN ('minute', 'hour'))
        ) {table}
        """
    )
    op.execute(
        f"""
        CREATE TABLE IF NOT EXISTS ledgerq_rollup_state (
            id          SMALLINT    NOT NULL DEFAULT 1,
            rolled_upto DATETIME(6) NULL,
            PRIMARY KEY (id),
            CONSTRAINT ledgerq_rollup_state_one CHECK (id = 1)
        ) {table}
        """
    )
    op.execute("INSERT IGNORE INTO ledgerq_rollup_state (id, rolled_upto) VALUES (1, NULL)")


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS ledgerq_rollup_state")
    op.execute("DROP TABLE IF EXISTS ledgerq_rollup_latency")
    op.execute("DROP TABLE IF EXISTS ledgerq_rollup_counts")
