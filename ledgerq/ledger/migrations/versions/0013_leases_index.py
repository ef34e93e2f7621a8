"""The lease index covers the rows that have a lease, keyed on ``lease_until``
alone (issue 13).

``ledgerq_tasks_leases`` was ``(lease_until, id) WHERE status = 'running'``.
Every fenced write to a running row (``finish``, ``heartbeat``,
``lock_running``, ``save_checkpoint``, operator cancels) looks the row up by id
with ``status = 'running'``, which the partial index's predicate matches; with
``id`` among its keys the planner could use it for ``id = m.id`` too, as a
condition on its second column, which means reading the whole index for each
id. It chose that whenever the hot table's statistics were stale (after a bulk
enqueue, a TRUNCATE, or with autovacuum off), and each batched window's lock
then cost about 6 ms, 130 us of PostgreSQL's CPU per task. Even keyed on
``lease_until`` alone, a partial index on ``status = 'running'`` let the
planner, believing the running rows a handful, read all of them for each
statement. Now the index is on ``lease_until`` where it is set (only running
rows have one): ``lease_until < now()``, the reconciler's expired leases,
implies that predicate, and ``status = 'running'`` does not, so a lookup by id
has the primary key only. ``select_expired`` pages by id within the expired
rows; it sorts them (few) instead of reading them in index order.

The upgrade rebuilds the index in its own transaction, holding writes to
``ledgerq_tasks`` for as long as that takes. The table holds live tasks only
(history is elsewhere), so this is usually a moment; with a deep backlog, run
``ledgerq migrate`` when producers are quiet.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-24
"""

from __future__ import annotations

from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("DROP INDEX ledgerq_tasks_leases")
    op.execute(
        "CREATE INDEX ledgerq_tasks_leases ON ledgerq_tasks (lease_until) "
        "WHERE lease_until IS NOT NULL"
    )


def downgrade() -> None:
    op.execute("DROP INDEX ledgerq_tasks_leases")
    op.execute(
        "CREATE INDEX ledgerq_tasks_leases ON ledgerq_tasks (lease_until, id) "
        "WHERE status = 'running'"
    )
