"""The MySQL / MariaDB ledger's probes for ordering keys and expiry (the pick's
fragment ``ready``, ledger/mysql/fragments.sql; the expiry's ``expiring``,
ledger/mysql/expiry.sql):

- ``ledgerq_tasks_ordering`` (ordering_key, status, id): "is a live task of my
  key ahead of me", probed twice per keyed row the pick reads (one of the key
  with a smaller id; one of the key published or running), each from the
  index alone, never the rows (PostgreSQL's partial index of migration 0007 is
  on (ordering_key, id) and reads each row of the key for its status: with
  1,000 keys of 20 tasks, that made a 500-task pick ~0.65 s here). MySQL has
  no partial index: an unkeyed row has a NULL entry, never probed.
- ``ledgerq_tasks_expiry`` (expires_at, id): the expiry service's page, oldest
  expiry first (PostgreSQL's partial index on expires_at); rows with no expiry
  sit under NULL, never read.

Revision ID: m0006
Revises: m0005
Create Date: 2026-11-28
"""

from __future__ import annotations

from alembic import op

revision = "m0006"
down_revision = "m0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        "ALTER TABLE ledgerq_tasks "
        "ADD INDEX ledgerq_tasks_ordering (ordering_key, status, id), "
        "ADD INDEX ledgerq_tasks_expiry (expires_at, id)"
    )


def downgrade() -> None:
    op.execute(
        "ALTER TABLE ledgerq_tasks "
        "DROP INDEX ledgerq_tasks_ordering, DROP INDEX ledgerq_tasks_expiry"
    )
