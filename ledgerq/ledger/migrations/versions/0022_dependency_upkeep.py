"""Dependencies kept tidy (issue 27): edges pruned with their dependents, and the
ledger's own cancels told to result() waiters.

- ``ledgerq_dependencies.ended_at``: when the edge's dependent (``task_id``)
  ended, NULL while it is live. The release trigger
  (``ledgerq_dependencies_ended``, on the history insert that every terminal
  write makes) stamps the edges of the tasks it buries with their
  ``finished_at``, every time one ends (an operator's retry brings a task back
  and its next end stamps again). With no edge at all (nobody uses ``after``)
  the trigger stops at its first test, one probe, as before; while any edge is
  kept (up to the longest retention after the last use of ``after``), every
  terminal write runs the stamp, one primary-key probe per ended row (not
  measured yet).
- ``ledgerq_dependencies_prune(before, limit)``: retention's step (the
  reconciler's upkeep pass, ``ledgerq purge``) deletes at most ``limit`` edges
  whose dependent ended before ``before`` and is not live, oldest first, by the
  partial index ``ledgerq_dependencies_ended (ended_at) WHERE ended_at IS NOT
  NULL``. Retention passes the oldest of the three statuses' cutoffs, and only
  when every status has one (a status kept forever keeps every edge): by then
  the dependent's history row is purged too. ``SECURITY DEFINER``, like
  history's purge: the service and operator roles get ``EXECUTE`` only
  (ledger/roles.sql).
- ``ledgerq_release``: a dependent it cancels (a dependency died) keeps its
  ``tags`` and ``expires_at`` in history (0020 listed history's columns as 0018
  left them and missed 0019's ``expires_at``, ``expired`` and ``tags``: such a
  task was no longer found by its tags), and wakes result() waiters like every
  other end: one ``NOTIFY ledgerq_ended`` with the cancelled ids per call, only
  while a waiter registry announces itself (``ledgerq_waiting``, 0021; the
  ``tell_ended`` fragment's rule, 400 ids at most or an empty payload). Before,
  such a waiter was found by its registry's poll (``poll_s``, 1 s by default).

The upgrade stamps the existing edges: with the dependent's ``finished_at``
when it is in history, ``-infinity`` when it is in neither table (purged
already: the next retention pass deletes them), NULL when it is live.

Revision ID: 0022
Revises: 0021
Create Date: 2026-11-28
"""

from __future__ import annotations

import importlib

from ledgerq.ledger.migrations.steps import execute_all

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

_DEPENDENCIES = importlib.import_module("ledgerq.ledger.migrations.versions.0020_dependencies")


def _statement(prefix: str) -> str:
    """0020's upgrade statement that starts (after white space) with ``prefix``."""
    [found] = [s for s in _DEPENDENCIES._UPGRADE if s.lstrip().startswith(prefix)]
    return str(found)


def _edit(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, f"0020's ledgerq_release changed: {old!r}"
    return text.replace(old, new)


#: 0020's ``ledgerq_release``, as created there (the downgrade restores it).
_RELEASE_0020 = _statement("CREATE FUNCTION ledgerq_release(")

#: ``ledgerq_release`` telling the dependents it cancels to result() waiters. A
#: later migration that changes the function (a new history column) starts here.
RELEASE = _edit(
    _edit(
        _edit(
            _edit(
                _edit(
                    _RELEASE_0020.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1),
                    "cancel_requested_at, trace_context, ordering_key, progress)",
                    "cancel_requested_at, trace_context, ordering_key, progress,\n"
                    "                    expires_at, expired, tags)",
                ),
                "NULL, x.trace_context, x.ordering_key, x.progress\n",
                "NULL, x.trace_context, x.ordering_key, x.progress,\n"
                "                       x.expires_at, false, x.tags\n",
            ),
            "        moved integer := 0;\n",
            "        moved integer := 0;\n        told bigint[] := '{}';\n",
        ),
        "                id := d; outcome := 'cancelled';\n",
        "                told := told || d;\n                id := d; outcome := 'cancelled';\n",
    ),
    "            PERFORM pg_notify('ledgerq_enqueued', '');  -- a wake-up; the relay polls too\n"
    "        END IF;\n",
    "            PERFORM pg_notify('ledgerq_enqueued', '');  -- a wake-up; the relay polls too\n"
    "        END IF;\n"
    "        -- the ends it made, to result() waiters, as fragments.sql tell_ended does\n"
    "        IF cardinality(told) > 0\n"
    "           AND EXISTS (SELECT 1 FROM ledgerq_waiting w WHERE w.until > now()) THEN\n"
    "            PERFORM pg_notify('ledgerq_ended',\n"
    "                              CASE WHEN cardinality(told) <= 400\n"
    "                                   THEN array_to_string(told, ',') ELSE '' END);\n"
    "        END IF;\n",
)

_ENDED_0020 = _statement("CREATE FUNCTION ledgerq_dependencies_ended(")

_ENDED = """
    CREATE OR REPLACE FUNCTION ledgerq_dependencies_ended() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT SET enable_seqscan = off AS $$
    BEGIN
        IF NOT EXISTS (SELECT 1 FROM ledgerq_dependencies) THEN
            RETURN NULL;  -- nobody uses after: ordinary finishes stop here (one probe)
        END IF;
        -- the ended tasks' own edges (as dependents), stamped for retention
        UPDATE ledgerq_dependencies e SET ended_at = x.finished_at
        FROM ended x WHERE e.task_id = x.id;
        IF NOT EXISTS (SELECT 1 FROM ledgerq_tasks WHERE status = 'waiting') THEN
            RETURN NULL;  -- nobody waits
        END IF;
        PERFORM ledgerq_release(ARRAY(
            SELECT DISTINCT e.task_id FROM ended x
            JOIN ledgerq_dependencies e ON e.depends_on = x.id));
        RETURN NULL;
    END
    $$
"""

_UPGRADE = [
    "ALTER TABLE ledgerq_dependencies ADD COLUMN ended_at timestamptz",
    """UPDATE ledgerq_dependencies e SET ended_at = h.finished_at
       FROM ledgerq_history h WHERE h.id = e.task_id""",
    """UPDATE ledgerq_dependencies e SET ended_at = '-infinity'
       WHERE e.ended_at IS NULL
         AND NOT EXISTS (SELECT 1 FROM ledgerq_tasks t WHERE t.id = e.task_id)""",
    """CREATE INDEX ledgerq_dependencies_ended ON ledgerq_dependencies (ended_at)
       WHERE ended_at IS NOT NULL""",
    _ENDED,
    RELEASE,
    """
    CREATE FUNCTION ledgerq_dependencies_prune(p_before timestamptz, p_limit integer)
    RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT SET enable_seqscan = off AS $$
    DECLARE
        n bigint;
    BEGIN
        WITH doomed AS (
            SELECT e.task_id, e.depends_on FROM ledgerq_dependencies e
            WHERE e.ended_at < p_before
              AND NOT EXISTS (SELECT 1 FROM ledgerq_tasks t WHERE t.id = e.task_id)
            ORDER BY e.ended_at
            LIMIT p_limit
        ), gone AS (
            -- ended_at again: an end stamped meanwhile (a retried task's) is rechecked
            DELETE FROM ledgerq_dependencies e USING doomed d
            WHERE e.task_id = d.task_id AND e.depends_on = d.depends_on
              AND e.ended_at < p_before
            RETURNING 1
        )
        SELECT count(*) INTO n FROM gone;
        RETURN n;
    END
    $$
    """,
    # Only the roles granted EXECUTE (ledger/roles.sql) may run it.
    "REVOKE EXECUTE ON FUNCTION ledgerq_dependencies_prune(timestamptz, integer) FROM PUBLIC",
]

_DOWNGRADE = [
    "DROP FUNCTION ledgerq_dependencies_prune(timestamptz, integer)",
    _RELEASE_0020.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1),
    _ENDED_0020.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1),
    "DROP INDEX ledgerq_dependencies_ended",
    "ALTER TABLE ledgerq_dependencies DROP COLUMN ended_at",
]


def upgrade() -> None:
    execute_all(_UPGRADE)


def downgrade() -> None:
    execute_all(_DOWNGRADE)
