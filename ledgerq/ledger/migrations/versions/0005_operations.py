"""Operating the ledger: handler results, per-attempt records, cancel requests, an
audit trail, and the indexes that serve ``ledgerq tasks list`` on a large history.

On both ``ledgerq_tasks`` and ``ledgerq_history`` (history keeps the hot table's
columns, in the same order):

- ``result jsonb``: what the handler returned (JSON), stored with the terminal status;
- ``attempt_log jsonb``: one object per ended attempt (attempt, worker, started_at,
  ended_at, error, outcome), appended by the ``finish`` statement. An embedded
  array, not an attempts table: retention deletes a task's attempts with it, and
  ``show`` needs no join (docs/design.md, "Per-attempt records in the row");
- ``cancel_requested_at timestamptz``: an operator asked a running task to stop;
  the worker's heartbeat reads it back (``ctx.cancel_requested``).

``ledgerq_audit`` holds one row per operator action (not dry runs);
``ledgerq_audit_tasks`` says which tasks each action touched and how (``changed``,
or the reason it skipped them), so ``ledgerq show`` lists a task's audit trail.

History indexes (docs/reference.md, "Which index serves which filter"): the list
reads each status newest first, so ``(status, id)`` serves ``--status`` and the
ordering, ``(status, kind, id)`` ``--kind`` (and replaces ``(status, kind)``, its
prefix, for ``stats``), ``(status, queue, id)`` ``--queue``, ``(created_at)``
``--since``/``--until``, ``(status, id) WHERE last_error IS NOT NULL`` ``--error``
(only failed tasks enter it); ``--key`` uses the business-key index of 0001. The hot
table gets none: it is small, and every index there slows every claim.

New columns have no default (NULL): no table rewrite.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23
"""

from __future__ import annotations

from ledgerq.ledger.migrations.steps import execute_all

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

_UPGRADE = [
    "ALTER TABLE ledgerq_tasks ADD COLUMN result jsonb, ADD COLUMN attempt_log jsonb, "
    "ADD COLUMN cancel_requested_at timestamptz",
    "ALTER TABLE ledgerq_history ADD COLUMN result jsonb, ADD COLUMN attempt_log jsonb, "
    "ADD COLUMN cancel_requested_at timestamptz",
    "CREATE SEQUENCE ledgerq_audit_id_seq",
    """
    CREATE TABLE ledgerq_audit (
        id        bigint      NOT NULL DEFAULT nextval('ledgerq_audit_id_seq'),
        at        timestamptz NOT NULL DEFAULT now(),
        actor     text        NOT NULL,
        action    text        NOT NULL,
        selection jsonb       NOT NULL,
        options   jsonb       NOT NULL DEFAULT '{}'::jsonb,
        reason    text,
        matched   integer     NOT NULL DEFAULT 0,
        changed   integer     NOT NULL DEFAULT 0,
        skipped   integer     NOT NULL DEFAULT 0,
        finished_at timestamptz,
        CONSTRAINT ledgerq_audit_pk PRIMARY KEY (id)
    )
    """,
    "ALTER SEQUENCE ledgerq_audit_id_seq OWNED BY ledgerq_audit.id",
    """
    CREATE TABLE ledgerq_audit_tasks (
        audit_id bigint NOT NULL REFERENCES ledgerq_audit (id) ON DELETE CASCADE,
        task_id  bigint NOT NULL,
        outcome  text   NOT NULL,
        CONSTRAINT ledgerq_audit_tasks_pk PRIMARY KEY (audit_id, task_id)
    )
    """,
    "CREATE INDEX ledgerq_audit_tasks_task ON ledgerq_audit_tasks (task_id)",
    "CREATE INDEX ledgerq_history_status_id ON ledgerq_history (status, id)",
    "CREATE INDEX ledgerq_history_status_kind_id ON ledgerq_history (status, kind, id)",
    "DROP INDEX ledgerq_history_status_kind",
    "CREATE INDEX ledgerq_history_status_queue_id ON ledgerq_history (status, queue, id)",
    "CREATE INDEX ledgerq_history_created ON ledgerq_history (created_at)",
    """CREATE INDEX ledgerq_history_errors ON ledgerq_history (status, id)
       WHERE last_error IS NOT NULL""",
]

_DOWNGRADE = [
    "DROP INDEX ledgerq_history_errors",
    "DROP INDEX ledgerq_history_created",
    "DROP INDEX ledgerq_history_status_queue_id",
    "CREATE INDEX ledgerq_history_status_kind ON ledgerq_history (status, kind)",
    "DROP INDEX ledgerq_history_status_kind_id",
    "DROP INDEX ledgerq_history_status_id",
    "DROP TABLE ledgerq_audit_tasks",
    "DROP TABLE ledgerq_audit",
    "ALTER TABLE ledgerq_history DROP COLUMN cancel_requested_at, DROP COLUMN attempt_log, "
    "DROP COLUMN result",
    "ALTER TABLE ledgerq_tasks DROP COLUMN cancel_requested_at, DROP COLUMN attempt_log, "
    "DROP COLUMN result",
]


def upgrade() -> None:
    execute_all(_UPGRADE)


def downgrade() -> None:
    execute_all(_DOWNGRADE)
