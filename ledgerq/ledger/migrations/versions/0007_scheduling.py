"""Scheduling: priorities with aging, retries behind fresh work, pauses, rate
limits per kind, ordering keys, periodic tasks (issue 14).

On ``ledgerq_tasks`` and ``ledgerq_history`` (history keeps the hot table's
columns, in the same order):

- ``ordering_key text``: tasks sharing one run one at a time, in commit order
  (the relay's ``select_due`` publishes a keyed task only when no other live
  task of its key is ahead of it). NULL: unordered.

Indexes on the hot table, all partial, so a row outside their predicate costs
nothing:

- ``ledgerq_tasks_due`` is rebuilt as ``(priority DESC, (attempts > 0), run_at,
  id) WHERE status = 'pending'``: the relay's order, where a retried task goes
  behind the never-run tasks of its priority;
- ``ledgerq_tasks_waiting (run_at, id) WHERE status = 'pending'``: the aged
  tasks (due longer than ``LEDGERQ_PRIORITY_AGING_S``), oldest first;
- ``ledgerq_tasks_ordering (ordering_key, id) WHERE ordering_key IS NOT NULL``:
  the "is a task of my key ahead of me" probe. Every live row is non-terminal
  (terminal rows move to history), so no status predicate is needed.

On history, ``ledgerq_history_ordering (ordering_key, id) WHERE ordering_key IS
NOT NULL AND status = 'dead'``: the probe for a dead task of a kind registered
with ``ordering="block"``, which holds its key.

New tables (both tiny: one row per kind or queue an operator or a worker named):

- ``ledgerq_pauses (scope, name)``: a paused queue (``scope = 'queue'``) or kind
  (``'kind'``); the relay and the reconciler publish nothing of it. A row, so a
  pause survives restarts; ``ledgerq_audit`` records who paused and resumed.
- ``ledgerq_kinds (kind)``: what the relay must know about a kind without
  importing its handler: its rate limit (``rate_per_s``, ``burst``) and the token
  bucket itself (``tokens``, ``refilled_at``), shared by every relay, and what
  a dead task does to its ordering key (``ordering``: ``release`` or
  ``block``). Workers write their ``@task`` kinds' settings at start.

Periodic tasks need no table: each period's task is enqueued with ``once=True``
under the key ``periodic:<period start>`` in ``ledgerq_unique_keys`` (0005).

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-23
"""

from __future__ import annotations

from ledgerq.ledger.migrations.steps import execute_all

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

_UPGRADE = [
    "ALTER TABLE ledgerq_tasks ADD COLUMN ordering_key text",
    "ALTER TABLE ledgerq_history ADD COLUMN ordering_key text",
    "DROP INDEX ledgerq_tasks_due",
    """CREATE INDEX ledgerq_tasks_due ON ledgerq_tasks (priority DESC, (attempts > 0), run_at, id)
       WHERE status = 'pending'""",
    """CREATE INDEX ledgerq_tasks_waiting ON ledgerq_tasks (run_at, id)
       WHERE status = 'pending'""",
    """CREATE INDEX ledgerq_tasks_ordering ON ledgerq_tasks (ordering_key, id)
       WHERE ordering_key IS NOT NULL""",
    """CREATE INDEX ledgerq_history_ordering ON ledgerq_history (ordering_key, id)
       WHERE ordering_key IS NOT NULL AND status = 'dead'""",
    """
    CREATE TABLE ledgerq_pauses (
        scope     text        NOT NULL,
        name      text        NOT NULL,
        paused_at timestamptz NOT NULL DEFAULT now(),
        actor     text        NOT NULL,
        reason    text,
        CONSTRAINT ledgerq_pauses_pk PRIMARY KEY (scope, name),
        CONSTRAINT ledgerq_pauses_scope CHECK (scope IN ('queue', 'kind'))
    )
    """,
    """
    CREATE TABLE ledgerq_kinds (
        kind        text             NOT NULL,
        rate_per_s  double precision,
        burst       double precision,
        tokens      double precision NOT NULL DEFAULT 0,
        refilled_at timestamptz      NOT NULL DEFAULT now(),
        updated_at  timestamptz      NOT NULL DEFAULT now(),
        ordering    text             NOT NULL DEFAULT 'release',
        CONSTRAINT ledgerq_kinds_pk PRIMARY KEY (kind),
        CONSTRAINT ledgerq_kinds_ordering CHECK (ordering IN ('release', 'block')),
        CONSTRAINT ledgerq_kinds_rate CHECK (
            (rate_per_s IS NULL AND burst IS NULL) OR (rate_per_s > 0 AND burst >= 1))
    )
    """,
]

_DOWNGRADE = [
    "DROP TABLE ledgerq_kinds",
    "DROP TABLE ledgerq_pauses",
    "DROP INDEX ledgerq_history_ordering",
    "DROP INDEX ledgerq_tasks_ordering",
    "DROP INDEX ledgerq_tasks_waiting",
    "DROP INDEX ledgerq_tasks_due",
    """CREATE INDEX ledgerq_tasks_due ON ledgerq_tasks (priority DESC, run_at, id)
       WHERE status = 'pending'""",
    "ALTER TABLE ledgerq_history DROP COLUMN ordering_key",
    "ALTER TABLE ledgerq_tasks DROP COLUMN ordering_key",
]


def upgrade() -> None:
    execute_all(_UPGRADE)


def downgrade() -> None:
    execute_all(_DOWNGRADE)
