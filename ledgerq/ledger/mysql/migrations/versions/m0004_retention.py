"""Retention on the MySQL / MariaDB ledger: ``ledgerq_history`` partitioned by
terminal status and UTC day of ``finished_at`` where the server allows it.

PostgreSQL partitions history in two levels (status, then day) with a default
partition at each. MySQL's partitioning has one level that can be dropped by
range (its subpartitions are only by hash), so the two levels are one here:
``PARTITION BY RANGE COLUMNS(status, finished_at)``, whose bounds are compared
as tuples. Each status owns a run of partitions, in bound order:

- ``p_<status>_old``, below ``(<status>, <day of this migration>)``: what history
  held before (PostgreSQL's default partition: deleted in batches);
- ``p_<status>_<YYYYMMDD>``, below ``(<status>, <that day + 1>)``: one day,
  created ahead of time by retention (ledger/mysql/retention.py), dropped whole
  once it has expired;
- ``p_<status>_new``, below ``(<status>, MAXVALUE)``: anything after the last
  day partition (a pass that did not run for days: deleted in batches, or taken
  by the next day created).

InnoDB requires every unique key of a partitioned table to hold the
partitioning columns and allows it no foreign key (history has none): the
primary key becomes ``(id, status, finished_at)`` (``finished_at`` NOT NULL:
``bury`` always sets it; a NULL left by an older row is filled from the task's
other times first). A lookup by ``id`` (``whereabouts``, ``show``) still reads
the primary key's prefix, in every partition (no pruning on ``id`` alone); the
uniqueness of ``id`` alone is no longer the database's: a task reaches history
once, under its fence, from the hot table it leaves in the same transaction.

Where the server has no partitioning (a MariaDB built or started without the
``partition`` plugin) the table stays as it was and gets an index on
``(status, finished_at)`` instead: retention then deletes in batches only.
The upgrade copies the table (on a large history, stop the workers for it).

Revision ID: m0004
Revises: m0003
Create Date: 2026-11-28
"""

from __future__ import annotations

from datetime import date

from alembic import op
from sqlalchemy import text

revision = "m0004"
down_revision = "m0003"
branch_labels = None
depends_on = None

#: Terminal statuses, in the order their partitions run (byte order: the tuples' order).
STATUSES = ("cancelled", "dead", "succeeded")


def _partitioning_available() -> bool:
    """MySQL 8 partitions InnoDB natively; MariaDB through its ``partition`` plugin."""
    bind = op.get_bind()
    if not getattr(bind.dialect, "is_mariadb", False):
        return True
    active = bind.execute(
        text(
            "SELECT COUNT(*) FROM information_schema.plugins "
            "WHERE plugin_name = 'partition' AND plugin_status = 'ACTIVE'"
        )
    ).scalar()
    return bool(active)


def _partitions(today: date) -> str:
    """The first partitions: per status, the old rows and everything from today on."""
    parts = []
    for status in STATUSES:
        parts.append(f"PARTITION p_{status}_old VALUES LESS THAN ('{status}', '{today}')")
        parts.append(f"PARTITION p_{status}_new VALUES LESS THAN ('{status}', MAXVALUE)")
    return ",\n    ".join(parts)


def _count(query: str) -> int:
    return int(op.get_bind().execute(text(query)).scalar() or 0)


def _partitioned() -> bool:
    return bool(
        _count(
            "SELECT COUNT(*) FROM information_schema.partitions WHERE table_schema = DATABASE() "
            "AND table_name = 'ledgerq_history' AND partition_name IS NOT NULL"
        )
    )


def upgrade() -> None:
    # Each step is skipped when an interrupted run already made it (DDL commits
    # on its own): running the migration again finishes it.
    op.execute(
        "UPDATE ledgerq_history SET finished_at = COALESCE(started_at, published_at, created_at) "
        "WHERE finished_at IS NULL"
    )
    if _partitioned():
        return
    if not _partitioning_available():
        indexed = _count(
            "SELECT COUNT(*) FROM information_schema.statistics WHERE table_schema = DATABASE() "
            "AND table_name = 'ledgerq_history' AND index_name = 'ledgerq_history_status_finished'"
        )
        op.execute(
            "ALTER TABLE ledgerq_history MODIFY finished_at DATETIME(6) NOT NULL"
            + ("" if indexed else ", ADD KEY ledgerq_history_status_finished (status, finished_at)")
        )
        return
    today = op.get_bind().execute(text("SELECT UTC_DATE()")).scalar()
    assert isinstance(today, date)
    op.execute(
        f"""
        ALTER TABLE ledgerq_history
            MODIFY finished_at DATETIME(6) NOT NULL,
            DROP PRIMARY KEY,
            ADD PRIMARY KEY (id, status, finished_at)
        PARTITION BY RANGE COLUMNS (status, finished_at) (
            {_partitions(today)}
        )
        """
    )


def downgrade() -> None:
    if _partitioned():
        op.execute("ALTER TABLE ledgerq_history REMOVE PARTITIONING")
        op.execute(
            "ALTER TABLE ledgerq_history DROP PRIMARY KEY, ADD PRIMARY KEY (id), "
            "MODIFY finished_at DATETIME(6) NULL"
        )
    else:
        op.execute(
            "ALTER TABLE ledgerq_history DROP KEY ledgerq_history_status_finished, "
            "MODIFY finished_at DATETIME(6) NULL"
        )
