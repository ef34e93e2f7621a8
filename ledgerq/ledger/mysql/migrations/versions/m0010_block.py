"""The MySQL / MariaDB ledger's ordering that blocks, and its release (PostgreSQL's
migrations 0007 and 0015):

- ``ledgerq_kinds.ordering``: what a dead task of the kind does to its ordering
  key, written by a worker's ``@task(ordering=...)`` at its start: ``'release'``
  (the default) lets the key's later tasks go; ``'block'`` holds them until an
  operator retries the task or releases the key.
- ``ledgerq_key_releases (task_id, epoch, ordering_key, audit_id,
  released_at)``: one row per death an operator released (``ledgerq tasks
  release-key``), fenced by the dead row's epoch: a task retried and dead again
  holds its key again.
- ``ledgerq_history_ordering (ordering_key, status, id)``: "is a dead task of
  my key behind me", probed by the pick (fragments.sql ``ready``) only for a
  keyed task while some kind blocks, from the index alone (one probe per
  partition of dead rows).

Revision ID: m0010
Revises: m0009
Create Date: 2026-11-28
"""

from __future__ import annotations

from alembic import op

revision = "m0010"
down_revision = "m0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    mariadb = bool(getattr(op.get_bind().dialect, "is_mariadb", False))
    collation = "utf8mb4_nopad_bin" if mariadb else "utf8mb4_0900_bin"
    op.execute(
        "ALTER TABLE ledgerq_kinds "
        "ADD COLUMN ordering VARCHAR(16) NOT NULL DEFAULT 'release', "
        "ADD CONSTRAINT ledgerq_kinds_ordering CHECK (ordering IN ('release', 'block'))"
    )
    op.execute(
        "ALTER TABLE ledgerq_history ADD INDEX ledgerq_history_ordering (ordering_key, status, id)"
    )
    op.execute(
        f"""
        CREATE TABLE IF NOT EXISTS ledgerq_key_releases (
            task_id      BIGINT       NOT NULL,
            epoch        BIGINT       NOT NULL,
            ordering_key VARCHAR(512) NOT NULL,
            audit_id     BIGINT       NULL,
            released_at  DATETIME(6)  NOT NULL,
            PRIMARY KEY (task_id, epoch)
        ) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = {collation}
        """
    )


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS ledgerq_key_releases")
    op.execute("ALTER TABLE ledgerq_history DROP INDEX ledgerq_history_ordering")
    op.execute(
        "ALTER TABLE ledgerq_kinds DROP CONSTRAINT ledgerq_kinds_ordering, DROP COLUMN ordering"
    )
