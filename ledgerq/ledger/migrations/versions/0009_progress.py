"""Progress: how far a running task has got, as its handler last reported it.

``ctx.report_progress(done, total=None, message=None)`` keeps the figures in the
worker's memory; the next heartbeat writes them (``{"done": ..., "total": ...,
"message": ..., "at": ...}``) with the lease it extends, so reporting costs no
statement of its own however often a handler calls it. History keeps the last
report, like every column; a retried task starts without one. NULL when the
handler never reported.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-23
"""

from __future__ import annotations

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nullable, no default: no table rewrite.
    op.execute("ALTER TABLE ledgerq_tasks ADD COLUMN progress jsonb")
    op.execute("ALTER TABLE ledgerq_history ADD COLUMN progress jsonb")


def downgrade() -> None:
    op.execute("ALTER TABLE ledgerq_history DROP COLUMN progress")
    op.execute("ALTER TABLE ledgerq_tasks DROP COLUMN progress")
