"""The MySQL / MariaDB ledger's sticky retries (PostgreSQL's migration 0018):

- ``ledgerq_kinds.sticky_s``: the kind's ``@task(sticky_retry=...)`` window in
  seconds, written by its workers at their start (``register_sticky``), NULL
  for none.
- ``ledgerq_tasks_held (sticky_worker, status, queue)``: a personal window's
  held rows (fragments.sql ``held_pick``) by one index probe, never a pass over
  the queue's due set; only retries of sticky kinds have a ``sticky_worker``.

What m0001 has already: ``ledgerq_tasks.sticky_worker`` / ``sticky_until`` (and
history's, which the bury leaves NULL: a finished task is held for nobody) and
``ledgerq_subscriptions.sticky_route`` (the worker's personal route).

Revision ID: m0011
Revises: m0010
Create Date: 2026-11-28
"""

from __future__ import annotations

from alembic import op

revision = "m0011"
down_revision = "m0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE ledgerq_kinds ADD COLUMN sticky_s DOUBLE NULL")
    op.execute(
        "ALTER TABLE ledgerq_tasks ADD INDEX ledgerq_tasks_held (sticky_worker, status, queue)"
    )


def downgrade() -> None:
    op.execute("ALTER TABLE ledgerq_tasks DROP INDEX ledgerq_tasks_held")
    op.execute("ALTER TABLE ledgerq_kinds DROP COLUMN sticky_s")
