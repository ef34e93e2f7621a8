"""Fan-out with completion: families, the callback kind, and the triggers that close them.

A *family* is a parent task and the tasks whose ``parent_id`` names it (its
children; a child may be a parent in turn, each family is judged alone).

- ``ledgerq_kinds.on_children_done``: the kind of the callback task a parent of
  this kind gets when its family completes (``@task(on_children_done=...)``,
  written by workers at start like the kind's other settings).
- ``ledgerq_families (parent_id)``: one small row per parent that ever had a
  child. ``callback_id`` and ``completed_at`` are set once, when the family
  completes: the parent and every child terminal.

Two triggers keep it, so every path that inserts a child or ends a task (the
producer, ``ctx.spawn``, the finisher, batched windows, group commit, operator
cancels, the reconciler) is covered without each statement knowing:

- ``ledgerq_tasks_child`` (row, ``WHEN (NEW.parent_id IS NOT NULL)``: other
  inserts pay the test alone): the parent must exist, live or in history, and its
  family must not have completed, else SQLSTATE ``LQF01`` / ``LQF02`` (the
  producer raises :class:`~ledgerq.core.errors.UnknownParentError` /
  ``FamilyCompletedError``); then the family row is created if missing. A row
  with ``epoch > 0`` is a task an operator's retry brought back from history,
  not a new child: it passes unchecked (its family's callback, if it already
  ran, does not run again) (``ON CONFLICT DO NOTHING``: no lock taken
  on an existing row, so spawning never waits for children that are ending).
- ``ledgerq_history_family`` (statement, on history inserts, with the inserted
  rows as a transition table): for the families touched (a child ended, or a
  parent with a family ended) it locks each open family row in parent-id order,
  then, with a fresh snapshot, checks the parent is no longer live and no child
  is; the one transaction that sees that inserts the callback and marks the family
  completed. The row lock serialises the last children ending at once on
  different workers: the one that waited re-reads after the other committed. A
  statement whose rows touch no open family exits after one index probe.

Both functions run as the migrator (``SECURITY DEFINER``, like the retention
functions of 0004): the producer and service roles need no grant on
``ledgerq_families``, nor the producer any read of history.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-23
"""

from __future__ import annotations

from ledgerq.ledger.migrations.steps import execute_all

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

_UPGRADE = [
    "ALTER TABLE ledgerq_kinds ADD COLUMN on_children_done text",
    """
    CREATE TABLE ledgerq_families (
        parent_id    bigint      NOT NULL,
        created_at   timestamptz NOT NULL DEFAULT now(),
        completed_at timestamptz,
        callback_id  bigint,
        CONSTRAINT ledgerq_families_pk PRIMARY KEY (parent_id)
    )
    """,
    """CREATE INDEX ledgerq_families_open ON ledgerq_families (parent_id)
       WHERE completed_at IS NULL""",
    """
    CREATE FUNCTION ledgerq_child_inserted() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
    BEGIN
        IF NEW.epoch > 0 THEN
            -- Back from history (an operator's retry: the epoch was bumped), not a
            -- new child: it stays in its family, completed or not, and is never
            -- refused (its parent may have been purged meanwhile).
            RETURN NULL;
        END IF;
        IF NOT EXISTS (SELECT 1 FROM ledgerq_tasks WHERE id = NEW.parent_id)
           AND NOT EXISTS (SELECT 1 FROM ledgerq_history WHERE id = NEW.parent_id) THEN
            RAISE EXCEPTION 'unknown parent task %', NEW.parent_id
                USING ERRCODE = 'LQF01';
        END IF;
        IF EXISTS (SELECT 1 FROM ledgerq_families
                   WHERE parent_id = NEW.parent_id AND completed_at IS NOT NULL) THEN
            RAISE EXCEPTION 'the family of task % has completed', NEW.parent_id
                USING ERRCODE = 'LQF02';
        END IF;
        INSERT INTO ledgerq_families (parent_id) VALUES (NEW.parent_id)
        ON CONFLICT (parent_id) DO NOTHING;
        RETURN NULL;
    END
    $$
    """,
    """CREATE TRIGGER ledgerq_tasks_child AFTER INSERT ON ledgerq_tasks
       FOR EACH ROW WHEN (NEW.parent_id IS NOT NULL)
       EXECUTE FUNCTION ledgerq_child_inserted()""",
    """
    CREATE FUNCTION ledgerq_family_ended() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
    DECLARE
        fam bigint;
        parent record;
        callback text;
        new_id bigint;
    BEGIN
        IF NOT EXISTS (SELECT 1 FROM ledgerq_families WHERE completed_at IS NULL) THEN
            RETURN NULL;  -- no family open: ordinary finishes stop here
        END IF;
        FOR fam IN
            SELECT f.parent_id FROM ledgerq_families f
            WHERE f.completed_at IS NULL
              AND f.parent_id IN (SELECT e.parent_id FROM ended e WHERE e.parent_id IS NOT NULL
                                  UNION SELECT e.id FROM ended e)
            ORDER BY f.parent_id
        LOOP
            -- Serialises the family's last enders; a fresh snapshot follows.
            PERFORM 1 FROM ledgerq_families
            WHERE parent_id = fam AND completed_at IS NULL FOR UPDATE;
            CONTINUE WHEN NOT FOUND;
            CONTINUE WHEN EXISTS (SELECT 1 FROM ledgerq_tasks WHERE id = fam)
                       OR EXISTS (SELECT 1 FROM ledgerq_tasks WHERE parent_id = fam);
            SELECT h.kind, h.queue, h.priority, h.shard INTO parent
            FROM ledgerq_history h WHERE h.id = fam;
            callback := NULL;
            IF FOUND THEN
                SELECT k.on_children_done INTO callback FROM ledgerq_kinds k
                WHERE k.kind = parent.kind;
            END IF;
            new_id := NULL;
            IF callback IS NOT NULL THEN
                INSERT INTO ledgerq_tasks (kind, queue, payload, priority, shard, status)
                SELECT callback, parent.queue,
                       jsonb_build_object(
                           'parent_id', fam,
                           'succeeded', count(*) FILTER (WHERE h.status = 'succeeded'),
                           'dead', count(*) FILTER (WHERE h.status = 'dead'),
                           'cancelled', count(*) FILTER (WHERE h.status = 'cancelled')),
                       parent.priority, parent.shard, 'pending'
                FROM ledgerq_history h WHERE h.parent_id = fam
                RETURNING id INTO new_id;
            END IF;
            UPDATE ledgerq_families SET completed_at = now(), callback_id = new_id
            WHERE parent_id = fam;
        END LOOP;
        RETURN NULL;
    END
    $$
    """,
    """CREATE TRIGGER ledgerq_history_family AFTER INSERT ON ledgerq_history
       REFERENCING NEW TABLE AS ended
       FOR EACH STATEMENT EXECUTE FUNCTION ledgerq_family_ended()""",
]

_DOWNGRADE = [
    "DROP TRIGGER ledgerq_history_family ON ledgerq_history",
    "DROP FUNCTION ledgerq_family_ended()",
    "DROP TRIGGER ledgerq_tasks_child ON ledgerq_tasks",
    "DROP FUNCTION ledgerq_child_inserted()",
    "DROP TABLE ledgerq_families",
    "ALTER TABLE ledgerq_kinds DROP COLUMN on_children_done",
]


def upgrade() -> None:
    execute_all(_UPGRADE)


def downgrade() -> None:
    execute_all(_DOWNGRADE)
