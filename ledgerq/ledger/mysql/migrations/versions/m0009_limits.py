"""The MySQL / MariaDB ledger's token buckets: rate limits per kind, as
PostgreSQL's ``ledgerq_kinds`` holds them (migration 0007).

- ``rate_per_s`` and ``burst`` (both NULL: no limit; else a positive rate and a
  burst of at least one task): what ``ledgerq kinds limit`` and a worker's
  ``@task(rate_limit=...)`` write.
- ``tokens`` and ``refilled_at``: the bucket, as of its last debit; what it
  holds now is ``LEAST(burst, tokens + rate_per_s * seconds since refilled_at)``
  (ledger/mysql/metering.sql ``lock_buckets``). The pick locks the bucket, takes
  at most its whole tokens and writes the rest back in the same transaction as
  the rows it admits (ledger/mysql/metering.py).

Revision ID: m0009
Revises: m0008
Create Date: 2026-11-28
"""

from __future__ import annotations

from alembic import op

revision = "m0009"
down_revision = "m0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        "ALTER TABLE ledgerq_kinds "
        "ADD COLUMN rate_per_s DOUBLE NULL, "
        "ADD COLUMN burst DOUBLE NULL, "
        "ADD COLUMN tokens DOUBLE NOT NULL DEFAULT 0, "
        "ADD COLUMN refilled_at DATETIME(6) NOT NULL DEFAULT '1970-01-01 00:00:00', "
        "ADD CONSTRAINT ledgerq_kinds_rate CHECK ("
        "(rate_per_s IS NULL AND burst IS NULL) OR (rate_per_s > 0 AND burst >= 1))"
    )


def downgrade() -> None:
    op.execute(
        "ALTER TABLE ledgerq_kinds "
        "DROP CONSTRAINT ledgerq_kinds_rate, "
        "DROP COLUMN refilled_at, DROP COLUMN tokens, DROP COLUMN burst, DROP COLUMN rate_per_s"
    )
