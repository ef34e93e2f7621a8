"""Ledger shards on MySQL / MariaDB: each database records which shard of the
ledger it is, as PostgreSQL's migration 0012 does.

``ledgerq_ledger_shard`` holds at most one row, written by ``ledgerq migrate``
(never by this migration, :mod:`ledgerq.ledger.mysql.shards`): the database's
position in ``LEDGERQ_DATABASE_URL`` (``shard_index``) and how many databases
the list had (``shard_count``). Every command checks at start that the database
at position k says (k, n). ``migrate`` also starts the hot table's
``AUTO_INCREMENT`` at shard k's range (:mod:`ledgerq.ledger.split.ids`); shard
0's range is the one a ledger in one database always had, so this migration
changes nothing there.

Revision ID: m0008
Revises: m0007
Create Date: 2026-11-28
"""

from __future__ import annotations

from alembic import op

revision = "m0008"
down_revision = "m0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE IF NOT EXISTS ledgerq_ledger_shard (
            one         BOOLEAN     NOT NULL DEFAULT TRUE,
            shard_index INT         NOT NULL,
            shard_count INT         NOT NULL,
            assigned_at DATETIME(6) NOT NULL,
            PRIMARY KEY (one),
            CONSTRAINT ledgerq_ledger_shard_one CHECK (one),
            CONSTRAINT ledgerq_ledger_shard_index
                CHECK (shard_index >= 0 AND shard_index < shard_count)
        ) ENGINE = InnoDB
        """
    )


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS ledgerq_ledger_shard")
