"""Count publications since the last claim, so the reconciler's stall window can grow.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23
"""

from __future__ import annotations

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A constant default: no table rewrite on PostgreSQL 11+.
    op.execute("ALTER TABLE ledgerq_tasks ADD COLUMN publishes integer NOT NULL DEFAULT 0")
    op.execute("ALTER TABLE ledgerq_history ADD COLUMN publishes integer NOT NULL DEFAULT 0")


def downgrade() -> None:
    op.execute("ALTER TABLE ledgerq_history DROP COLUMN publishes")
    op.execute("ALTER TABLE ledgerq_tasks DROP COLUMN publishes")
