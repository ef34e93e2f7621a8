"""Per-kind defaults resolved by the worker, expiry and tags (issue 26, items 1, 3, 4).

- ``ledgerq_tasks.max_attempts`` loses its ``NOT NULL`` and its default (and so
  does history's): a producer that leaves ``max_attempts`` unset stores NULL,
  as it already did for ``retry`` and ``timeout_s``. NULL means "the kind's
  default": at a task's first claim (status to ``running`` from ``attempts``
  0), the trigger ``ledgerq_tasks_kind_defaults`` (``ledgerq_kind_defaults()``)
  fills the three from ``ledgerq_kinds`` (below), ``max_attempts`` else 5, in
  the claim's own row version, so every later step (the finish, the
  reconciler's rescue, an operator's retry) reads concrete values
  (docs/design.md, "Per-kind defaults"). A trigger, not the claim's SET: the
  service role keeps no UPDATE right on what a task is (docs/security.md), and
  a BEFORE trigger's changes need none. Its WHEN lets it fire once per task,
  and only when one of the three is unset.
- ``ledgerq_kinds.max_attempts``, ``.retry``, ``.timeout_s``: a kind's
  defaults, written by each worker at its start from its registry
  (``@task(max_attempts=..., retry=..., timeout=...)``), as the rate limits
  and orderings already are.
- ``expires_at``: a task not started by then ends ``cancelled`` with
  ``expired = true`` and never runs (the claim refuses and buries it; the
  reconciler's expiry service sweeps the rest). A partial index on the hot
  table finds the pending ones.
- ``expired`` (history too): whether the task ended by expiring.
- ``tags text[]``: short labels (``tenant:7``), matched with ``@>`` through a
  GIN index on the hot table and on history (every partition inherits it).

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-27
"""

from __future__ import annotations

from ledgerq.ledger.migrations.steps import execute_all

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

_UPGRADE = [
    "ALTER TABLE ledgerq_tasks ALTER COLUMN max_attempts DROP NOT NULL",
    "ALTER TABLE ledgerq_tasks ALTER COLUMN max_attempts DROP DEFAULT",
    "ALTER TABLE ledgerq_history ALTER COLUMN max_attempts DROP NOT NULL",
    "ALTER TABLE ledgerq_history ALTER COLUMN max_attempts DROP DEFAULT",
    """ALTER TABLE ledgerq_tasks ADD COLUMN expires_at timestamptz,
                                ADD COLUMN expired boolean NOT NULL DEFAULT false,
                                ADD COLUMN tags text[]""",
    """ALTER TABLE ledgerq_history ADD COLUMN expires_at timestamptz,
                                  ADD COLUMN expired boolean NOT NULL DEFAULT false,
                                  ADD COLUMN tags text[]""",
    """ALTER TABLE ledgerq_kinds ADD COLUMN max_attempts integer,
                                ADD COLUMN retry jsonb,
                                ADD COLUMN timeout_s double precision""",
    """
    CREATE FUNCTION ledgerq_kind_defaults() RETURNS trigger
    LANGUAGE plpgsql AS $$
    DECLARE
        k record;
    BEGIN
        SELECT d.max_attempts, d.retry, d.timeout_s INTO k
        FROM ledgerq_kinds d WHERE d.kind = NEW.kind;
        NEW.max_attempts := COALESCE(NEW.max_attempts, k.max_attempts, 5);
        NEW.retry := COALESCE(NEW.retry, k.retry);
        NEW.timeout_s := COALESCE(NEW.timeout_s, k.timeout_s);
        RETURN NEW;
    END
    $$
    """,
    """
    CREATE TRIGGER ledgerq_tasks_kind_defaults
    BEFORE UPDATE OF status ON ledgerq_tasks
    FOR EACH ROW
    WHEN (NEW.status = 'running' AND OLD.attempts = 0
          AND (NEW.max_attempts IS NULL OR NEW.retry IS NULL OR NEW.timeout_s IS NULL))
    EXECUTE FUNCTION ledgerq_kind_defaults()
    """,
    """CREATE INDEX ledgerq_tasks_expiring ON ledgerq_tasks (expires_at, id)
       WHERE expires_at IS NOT NULL""",
    "CREATE INDEX ledgerq_tasks_tags ON ledgerq_tasks USING gin (tags) WHERE tags IS NOT NULL",
    """CREATE INDEX ledgerq_history_tags ON ledgerq_history USING gin (tags)
       WHERE tags IS NOT NULL""",
]

_DOWNGRADE = [
    "DROP TRIGGER ledgerq_tasks_kind_defaults ON ledgerq_tasks",
    "DROP FUNCTION ledgerq_kind_defaults()",
    "DROP INDEX ledgerq_history_tags",
    "DROP INDEX ledgerq_tasks_tags",
    "DROP INDEX ledgerq_tasks_expiring",
    """ALTER TABLE ledgerq_kinds DROP COLUMN max_attempts, DROP COLUMN retry,
                                DROP COLUMN timeout_s""",
    """ALTER TABLE ledgerq_history DROP COLUMN expires_at, DROP COLUMN expired,
                                  DROP COLUMN tags""",
    """ALTER TABLE ledgerq_tasks DROP COLUMN expires_at, DROP COLUMN expired,
                                DROP COLUMN tags""",
    "UPDATE ledgerq_tasks SET max_attempts = 5 WHERE max_attempts IS NULL",
    "UPDATE ledgerq_history SET max_attempts = 5 WHERE max_attempts IS NULL",
    "ALTER TABLE ledgerq_history ALTER COLUMN max_attempts SET DEFAULT 5",
    "ALTER TABLE ledgerq_history ALTER COLUMN max_attempts SET NOT NULL",
    "ALTER TABLE ledgerq_tasks ALTER COLUMN max_attempts SET DEFAULT 5",
    "ALTER TABLE ledgerq_tasks ALTER COLUMN max_attempts SET NOT NULL",
]


def upgrade() -> None:
    execute_all(_UPGRADE)


def downgrade() -> None:
    execute_all(_DOWNGRADE)
