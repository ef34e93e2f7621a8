"""The MySQL / MariaDB audit trail keeps each task's outcome whole: m0002 made
``ledgerq_audit_tasks.outcome`` a ``VARCHAR(32)``, which cut the operator's skip
reasons (``moved on meanwhile (finished, started or changed by someone else)``,
``running: only a task that has not started can be rescheduled``: up to about 80
characters, ledger/actions.py) to their first 32. PostgreSQL's column is
``text``; here ``VARCHAR(255)``, which holds every reason ledgerq writes.

The downgrade cuts longer outcomes back to 32 characters first (what m0002's
column holds).

Revision ID: m0003
Revises: m0002
Create Date: 2026-11-28
"""

from __future__ import annotations

from alembic import op

revision = "m0003"
down_revision = "m0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE ledgerq_audit_tasks MODIFY outcome VARCHAR(255) NOT NULL")


def downgrade() -> None:
    op.execute("UPDATE ledgerq_audit_tasks SET outcome = LEFT(outcome, 32)")
    op.execute("ALTER TABLE ledgerq_audit_tasks MODIFY outcome VARCHAR(32) NOT NULL")
