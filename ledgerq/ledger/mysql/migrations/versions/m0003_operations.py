"""The MySQL / MariaDB ledger's operator side (ledger/mysql/operations.py,
operations_pauses.py):

- ``ledgerq_audit_tasks.outcome`` keeps each task's outcome whole: m0002 made it
  a ``VARCHAR(32)``, which cut the operator's skip reasons (``moved on meanwhile
  (finished, started or changed by someone else)``, ``running: only a task that
  has not started can be rescheduled``: up to about 80 characters,
  ledger/actions.py) to their first 32. PostgreSQL's column is ``text``; here
  ``VARCHAR(255)``, which holds every reason ledgerq writes.
- ``ledgerq_pauses``: the operator's pauses of a queue or a kind (PostgreSQL's
  table of migration 0006, in MySQL's types): one row per pause in force.
  (When this revision was written nothing read it and ``pause`` refused; the
  pick rule reads it since m0006's time: ledger/mysql/fragments.sql ``ready``.)

The downgrade cuts longer outcomes back to 32 characters first (what m0002's
column holds) and drops the pauses.

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
    mariadb = bool(getattr(op.get_bind().dialect, "is_mariadb", False))
    collation = "utf8mb4_nopad_bin" if mariadb else "utf8mb4_0900_bin"
    op.execute("ALTER TABLE ledgerq_audit_tasks MODIFY outcome VARCHAR(255) NOT NULL")
    op.execute(
        f"""
        CREATE TABLE IF NOT EXISTS ledgerq_pauses (
            scope     VARCHAR(16)  NOT NULL,
            name      VARCHAR(200) NOT NULL,
            paused_at DATETIME(6)  NOT NULL,
            actor     VARCHAR(255) NOT NULL,
            reason    TEXT         NULL,
            PRIMARY KEY (scope, name),
            CONSTRAINT ledgerq_pauses_scope CHECK (scope IN ('queue', 'kind'))
        ) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = {collation}
        """
    )


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS ledgerq_pauses")
    op.execute("UPDATE ledgerq_audit_tasks SET outcome = LEFT(outcome, 32)")
    op.execute("ALTER TABLE ledgerq_audit_tasks MODIFY outcome VARCHAR(32) NOT NULL")
