"""The MySQL / MariaDB ledger's pick index: ``ledgerq_tasks_pick`` (status, queue,
priority, attempts, run_at, id), for the relay's and the direct claim's pick
(fragments.sql ``due_lane``). The pick reads each (priority, first attempts or
retries) lane of a queue oldest first and stops after its limit: along this
index a lane of first attempts (``attempts = 0``) is one range in the order it
wants, and a lane of retries (``attempts > 0``, few as a rule) one small range
to sort. Along ``ledgerq_tasks_due`` (no attempts) the retries' lane had to read
every due row of its priority to find none, on every relay poll.

Revision ID: m0005
Revises: m0004
Create Date: 2026-11-28
"""

from __future__ import annotations

from alembic import op

revision = "m0005"
down_revision = "m0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        "CREATE INDEX ledgerq_tasks_pick "
        "ON ledgerq_tasks (status, queue, priority, attempts, run_at, id)"
    )


def downgrade() -> None:
    op.execute("DROP INDEX ledgerq_tasks_pick ON ledgerq_tasks")
