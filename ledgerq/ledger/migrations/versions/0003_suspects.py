"""Crash attribution: flag the tasks a dead worker left behind as suspects.

When a worker dies with several tasks in flight, the reconciler cannot tell
which one killed it. It re-queues them all without charging an attempt and sets
``suspect``; a worker runs a suspect alone, so a suspect that kills its worker
again is the culprit and is charged (see ``relay/reconciler.py``).

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23
"""

from __future__ import annotations

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A constant default: no table rewrite on PostgreSQL 11+.
    op.execute("ALTER TABLE ledgerq_tasks ADD COLUMN suspect boolean NOT NULL DEFAULT false")
    op.execute("ALTER TABLE ledgerq_history ADD COLUMN suspect boolean NOT NULL DEFAULT false")


def downgrade() -> None:
    op.execute("ALTER TABLE ledgerq_history DROP COLUMN suspect")
    op.execute("ALTER TABLE ledgerq_tasks DROP COLUMN suspect")
