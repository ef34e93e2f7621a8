"""Releasing an ordering key held by dead tasks (issue 28): ``ledgerq tasks release-key``.

A dead task of a kind registered with ``ordering="block"`` holds the later
tasks of its ordering key (view ``ledgerq_ready``, migration 0014) until an
operator acts. Retrying it runs it again; giving up on it used to take a retry
and a cancel, which races the relay (the retry publishes it at once) and leaves
the task's death rewritten as a cancellation. Now the operator releases the key:

- ``ledgerq_key_releases (task_id, epoch, ordering_key, audit_id, released_at)``:
  one row per death an operator released, fenced by the dead row's epoch. The
  dead task stays in history as it ended (``dead``, its error, its attempts);
  only its hold on the key is lifted. A released task that is retried later
  and dies again does so under a new epoch, so it holds its key again.
  ``audit_id`` is the operator action's audit record (``ledgerq_audit``).
- View ``ledgerq_ready``: as in 0014, except that a released death no longer
  blocks (``NOT EXISTS`` on ``ledgerq_key_releases`` by its primary key, probed
  only for a keyed pending task behind a dead task of a blocking kind).
  ``ledgerq_pick`` reads the view by name, so it follows.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-27
"""

from __future__ import annotations

import importlib

from ledgerq.ledger.migrations.steps import execute_all

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

#: The released deaths' clause, inside the view's probe of the key's dead tasks.
RELEASED = """
          AND NOT EXISTS (SELECT 1 FROM ledgerq_key_releases r
                          WHERE r.task_id = h.id AND r.epoch = h.epoch)"""

_READY = (
    """
CREATE OR REPLACE VIEW ledgerq_ready AS
SELECT t.id, t.kind, t.queue, t.shard, t.priority, t.epoch, t.suspect, t.trace_context,
       t.attempts, t.run_at
FROM ledgerq_tasks t
WHERE t.status = 'pending'
  AND t.queue <> ALL(ARRAY(SELECT name FROM ledgerq_pauses WHERE scope = 'queue'))
  AND t.kind <> ALL(ARRAY(SELECT name FROM ledgerq_pauses WHERE scope = 'kind'))
  AND (t.ordering_key IS NULL OR (NOT EXISTS (
      SELECT 1 FROM ledgerq_tasks e
      WHERE e.ordering_key = t.ordering_key AND e.id <> t.id
        AND (e.status <> 'pending' OR e.id < t.id))
    AND NOT (cardinality(ARRAY(SELECT kind FROM ledgerq_kinds WHERE ordering = 'block')) > 0
      AND EXISTS (
        SELECT 1 FROM ledgerq_history h
        WHERE h.ordering_key = t.ordering_key AND h.status = 'dead' AND h.id < t.id
          AND h.kind = ANY(ARRAY(SELECT kind FROM ledgerq_kinds WHERE ordering = 'block'))"""
    + RELEASED
    + """))))
"""
)


def previous_ready() -> str:
    """0014's view, as ``CREATE OR REPLACE`` (the downgrade puts it back)."""
    window = importlib.import_module("ledgerq.ledger.migrations.versions.0014_window")
    text: str = window._READY
    return text.replace("CREATE VIEW", "CREATE OR REPLACE VIEW", 1)


_UPGRADE = [
    """
    CREATE TABLE ledgerq_key_releases (
        task_id      bigint      NOT NULL,
        epoch        bigint      NOT NULL,
        ordering_key text        NOT NULL,
        audit_id     bigint      REFERENCES ledgerq_audit (id) ON DELETE SET NULL,
        released_at  timestamptz NOT NULL DEFAULT now(),
        CONSTRAINT ledgerq_key_releases_pk PRIMARY KEY (task_id, epoch)
    )
    """,
    _READY,
]


def upgrade() -> None:
    execute_all(_UPGRADE)


def downgrade() -> None:
    execute_all([previous_ready(), "DROP TABLE ledgerq_key_releases"])
