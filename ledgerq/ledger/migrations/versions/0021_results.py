"""result() waiters: who is waiting, so that ending statements notify only then (issue 27).

New table ``ledgerq_waiting``: one row per process's result() registry that
has waiters (``registry``: host, pid and registry), with ``until``, the time
the row stands for (the registry renews it while it has waiters, and deletes
it when it has none for a while; a crashed process's row simply runs out). The
statements that end tasks (``finish``, ``cancel_queued``: fragment
``tell_ended``) send ``NOTIFY ledgerq_ended`` only while some row stands:
PostgreSQL serialises the commits of every transaction that notifies (the
notify queue's lock is held to the end of the commit), which the worker's
finishes must not pay when nobody waits.

UNLOGGED: a handful of rows rewritten every few seconds need no WAL, and after
a crash the table is empty, which is right (the registries announce again).

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-27
"""

from __future__ import annotations

from ledgerq.ledger.migrations.steps import execute_all

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

_UPGRADE = [
    """
    CREATE UNLOGGED TABLE ledgerq_waiting (
        registry text        NOT NULL,
        until    timestamptz NOT NULL,
        CONSTRAINT ledgerq_waiting_pk PRIMARY KEY (registry)
    )
    """,
]

_DOWNGRADE = [
    "DROP TABLE ledgerq_waiting",
]


def upgrade() -> None:
    execute_all(_UPGRADE)


def downgrade() -> None:
    execute_all(_DOWNGRADE)
