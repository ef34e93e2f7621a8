"""Dependencies between tasks: ``enqueue(..., after=[id, ...])`` (issue 27).

A task enqueued with ``after`` is **waiting**: a new live status, outside every
partial index the relay, the direct claim and the reconciler read (they all say
``WHERE status = 'pending'`` / ``'published'`` / ``'running'``), so the due-task
queries cost what they cost before when no task uses ``after``. It becomes
``pending`` (due at its ``run_at``) when every task it names has ended and all
succeeded; when one ended ``dead`` or ``cancelled`` (or was purged) it moves to
history ``cancelled``, ``last_error`` naming the dependency that stopped it,
and never runs. ``after_policy="always"`` (``always`` on its edges) releases it
whatever its dependencies' outcomes.

- ``ledgerq_dependencies (task_id, depends_on, always)``: one edge per
  dependency, kept after the release (``show`` lists a task's dependencies and
  dependents from it). ``depends_on`` is indexed for the release.
- ``ledgerq_tasks_blocked (id) WHERE status = 'waiting'``: the waiting tasks;
  empty when nobody uses ``after``, so the release trigger's first test is one
  probe of an empty index.
- ``ledgerq_after_check(ids)``: the producer's check before it writes anything:
  it takes ``FOR KEY SHARE`` on the named tasks that are live (a dependency
  cannot leave the hot table, whose DELETE needs that lock, until the
  producer's transaction ends: so its end sees the new edges), then, with a
  fresh snapshot, reports each id that is on another ledger shard (``shard``)
  or in neither table (``unknown``).
- ``ledgerq_after_add(tasks, deps, always)``: writes the edges of tasks the
  producer has just inserted, sets them ``waiting`` and judges them at once (a
  dependency may have ended already). A task naming itself: SQLSTATE ``LQD01``.
- ``ledgerq_release(ids)``: judges waiting tasks, set-based and idempotent: for
  each, in id order, it locks the row (``FOR UPDATE``, still ``waiting``), then
  with a fresh snapshot checks that none of its dependencies is live; only then
  it releases or cancels it. The row lock serialises the last dependencies
  ending at once on two workers: the one that waited re-reads after the other
  committed (the trap is write skew: each alone sees the other still live).
  Returns ``(id, outcome)`` for each task it moved.
- ``ledgerq_history_after`` (statement trigger on history inserts, the inserted
  rows as a transition table): every path that ends a task (finisher, batched
  windows, group commit, ``succeed_within``, operator cancels, the reconciler,
  and this function's own cancels: so a chain is cancelled down to its end)
  releases its dependents in the same transaction as the terminal write.
  Exactly once: the terminal write and the release commit together or not at all.

Ordering keys (view ``ledgerq_ready``, 0015): a waiting task keeps its place in
its key's line, like a pending one (later tasks of the key wait for it), and does
not hold earlier ones as a running task would: its dependencies may be among
them.

The functions run as the migrator (``SECURITY DEFINER``): the producer needs no
read of history nor update of the hot table. They run with ``enable_seqscan =
off``: every statement in them is an index probe by design (the edges of one
task, the tasks of a few ids, the edges of the rows a statement ended), and a
planner working from stale statistics (a table just truncated or grown, or
autovacuum off) otherwise picked nested sequential scans: 23 ms per terminal
write instead of tens of microseconds. A task cancelled this way lists
its history row columns as the ``bury`` fragment does (ledger/fragments.sql);
a later migration that adds a history column updates ``ledgerq_release`` too.

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-27
"""

from __future__ import annotations

import importlib

from ledgerq.ledger.migrations.steps import execute_all

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

#: The ordering rule's clause in the view ``ledgerq_ready`` (0015's, as 0018 left it
#: with the sticky hold's columns), and what it becomes.
_HOLDS_KEY = "AND (e.status <> 'pending' OR e.id < t.id))"
_HOLDS_KEY_WAITING = "AND (e.status NOT IN ('pending', 'waiting') OR e.id < t.id))"


def _ready(clause: str) -> str:
    """0018's view ``ledgerq_ready`` with ``clause`` as the ordering rule's test."""
    sticky = importlib.import_module("ledgerq.ledger.migrations.versions.0018_sticky_retry")
    text: str = sticky._READY
    assert text.count(_HOLDS_KEY) == 1, "0015's ordering clause moved"
    return text.replace(_HOLDS_KEY, clause)


_UPGRADE = [
    # Ordering keys: a waiting task keeps its place in its key's line (tasks of the
    # key enqueued after it wait for it, as behind a pending one) but, unlike a
    # running one, does not hold the tasks enqueued before it: its own
    # dependencies may be among them (else: a deadlock).
    _ready(_HOLDS_KEY_WAITING),
    "ALTER TABLE ledgerq_tasks DROP CONSTRAINT ledgerq_tasks_live_status",
    """ALTER TABLE ledgerq_tasks ADD CONSTRAINT ledgerq_tasks_live_status
       CHECK (status IN ('waiting', 'pending', 'published', 'running'))""",
    """
    CREATE TABLE ledgerq_dependencies (
        task_id    bigint  NOT NULL,
        depends_on bigint  NOT NULL,
        always     boolean NOT NULL DEFAULT false,
        CONSTRAINT ledgerq_dependencies_pk PRIMARY KEY (task_id, depends_on)
    )
    """,
    "CREATE INDEX ledgerq_dependencies_on ON ledgerq_dependencies (depends_on)",
    "CREATE INDEX ledgerq_tasks_blocked ON ledgerq_tasks (id) WHERE status = 'waiting'",
    """
    CREATE FUNCTION ledgerq_after_check(p_ids bigint[])
    RETURNS TABLE (dep bigint, problem text)
    LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT SET enable_seqscan = off AS $$
    #variable_conflict use_column
    DECLARE
        mine integer := COALESCE((SELECT shard_index FROM ledgerq_ledger_shard), 0);
    BEGIN
        PERFORM 1 FROM ledgerq_tasks t WHERE t.id = ANY(p_ids) ORDER BY t.id FOR KEY SHARE;
        -- a fresh snapshot: a dependency that ended while we waited is in history now
        RETURN QUERY
        SELECT u.id, CASE WHEN (GREATEST(u.id, 0) >> 48) <> mine THEN 'shard'
                          ELSE 'unknown' END
        FROM unnest(p_ids) AS u(id)
        WHERE (GREATEST(u.id, 0) >> 48) <> mine
           OR (NOT EXISTS (SELECT 1 FROM ledgerq_tasks t WHERE t.id = u.id)
               AND NOT EXISTS (SELECT 1 FROM ledgerq_history h WHERE h.id = u.id));
    END
    $$
    """,
    """
    CREATE FUNCTION ledgerq_release(p_ids bigint[])
    RETURNS TABLE (id bigint, outcome text)
    LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT SET enable_seqscan = off AS $$
    #variable_conflict use_column
    DECLARE
        d bigint;
        run_anyway boolean;
        blocker bigint;
        blocker_status text;
        moved integer := 0;
    BEGIN
        FOR d IN SELECT DISTINCT u.id FROM unnest(p_ids) AS u(id) ORDER BY u.id LOOP
            -- Serialises the last dependencies ending at once; a fresh snapshot follows.
            PERFORM 1 FROM ledgerq_tasks t WHERE t.id = d AND t.status = 'waiting' FOR UPDATE;
            CONTINUE WHEN NOT FOUND;
            CONTINUE WHEN EXISTS (SELECT 1 FROM ledgerq_dependencies e
                                  JOIN ledgerq_tasks t ON t.id = e.depends_on
                                  WHERE e.task_id = d);
            SELECT bool_or(e.always) INTO run_anyway
            FROM ledgerq_dependencies e WHERE e.task_id = d;
            blocker := NULL;
            SELECT e.depends_on, COALESCE(h.status, 'purged') INTO blocker, blocker_status
            FROM ledgerq_dependencies e
            LEFT JOIN LATERAL (SELECT x.status FROM ledgerq_history x
                               WHERE x.id = e.depends_on LIMIT 1) h ON true
            WHERE e.task_id = d AND h.status IS DISTINCT FROM 'succeeded'
            ORDER BY e.depends_on LIMIT 1;
            IF run_anyway OR blocker IS NULL THEN
                UPDATE ledgerq_tasks t SET status = 'pending'
                WHERE t.id = d AND t.status = 'waiting';
                id := d; outcome := 'released';
            ELSE
                WITH ended AS (
                    DELETE FROM ledgerq_tasks t WHERE t.id = d AND t.status = 'waiting'
                    RETURNING t.*
                )
                INSERT INTO ledgerq_history (
                    id, kind, queue, payload, business_key, dedupe_key, priority,
                    shard, run_at, status, attempts, max_attempts, retry, epoch,
                    publishes, lease_until, heartbeat_at, worker, checkpoint,
                    last_error, timeout_s, parent_id, created_at, published_at,
                    started_at, finished_at, suspect, result, attempt_log,
                    cancel_requested_at, trace_context, ordering_key, progress)
                SELECT x.id, x.kind, x.queue, x.payload, x.business_key, NULL, x.priority,
                       x.shard, x.run_at, 'cancelled', x.attempts, x.max_attempts, x.retry,
                       x.epoch, x.publishes, NULL, x.heartbeat_at, NULL, x.checkpoint,
                       format('dependency %s ended %s', blocker, blocker_status),
                       x.timeout_s, x.parent_id, x.created_at, x.published_at,
                       x.started_at, now(), x.suspect, NULL, x.attempt_log,
                       NULL, x.trace_context, x.ordering_key, x.progress
                FROM ended x;
                id := d; outcome := 'cancelled';
            END IF;
            moved := moved + 1;
            RETURN NEXT;
        END LOOP;
        IF moved > 0 THEN
            PERFORM pg_notify('ledgerq_enqueued', '');  -- a wake-up; the relay polls too
        END IF;
    END
    $$
    """,
    """
    CREATE FUNCTION ledgerq_after_add(p_tasks bigint[], p_deps bigint[], p_always boolean[])
    RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT SET enable_seqscan = off AS $$
    DECLARE
        selfish bigint;
    BEGIN
        SELECT u.t INTO selfish FROM unnest(p_tasks, p_deps) AS u(t, d) WHERE u.t = u.d LIMIT 1;
        IF selfish IS NOT NULL THEN
            RAISE EXCEPTION 'task % names itself in after', selfish USING ERRCODE = 'LQD01';
        END IF;
        INSERT INTO ledgerq_dependencies (task_id, depends_on, always)
        SELECT u.t, u.d, u.a FROM unnest(p_tasks, p_deps, p_always) AS u(t, d, a)
        ON CONFLICT DO NOTHING;
        UPDATE ledgerq_tasks t SET status = 'waiting'
        WHERE t.id IN (SELECT DISTINCT u.t FROM unnest(p_tasks) AS u(t))
          AND t.status = 'pending' AND t.epoch = 0;
        RETURN (SELECT count(*) FROM ledgerq_release(
            ARRAY(SELECT DISTINCT u.t FROM unnest(p_tasks) AS u(t))));
    END
    $$
    """,
    """
    CREATE FUNCTION ledgerq_dependencies_ended() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT SET enable_seqscan = off AS $$
    BEGIN
        IF NOT EXISTS (SELECT 1 FROM ledgerq_tasks WHERE status = 'waiting') THEN
            RETURN NULL;  -- nobody waits: ordinary finishes stop here (one index probe)
        END IF;
        PERFORM ledgerq_release(ARRAY(
            SELECT DISTINCT e.task_id FROM ended x
            JOIN ledgerq_dependencies e ON e.depends_on = x.id));
        RETURN NULL;
    END
    $$
    """,
    """CREATE TRIGGER ledgerq_history_after AFTER INSERT ON ledgerq_history
       REFERENCING NEW TABLE AS ended
       FOR EACH STATEMENT EXECUTE FUNCTION ledgerq_dependencies_ended()""",
]

_DOWNGRADE = [
    "DROP TRIGGER ledgerq_history_after ON ledgerq_history",
    "DROP FUNCTION ledgerq_dependencies_ended()",
    "DROP FUNCTION ledgerq_after_add(bigint[], bigint[], boolean[])",
    "DROP FUNCTION ledgerq_release(bigint[])",
    "DROP FUNCTION ledgerq_after_check(bigint[])",
    "DROP INDEX ledgerq_tasks_blocked",
    "DROP TABLE ledgerq_dependencies",
    # A waiting task cannot stay: it becomes pending (runs without its dependencies).
    "UPDATE ledgerq_tasks SET status = 'pending' WHERE status = 'waiting'",
    "ALTER TABLE ledgerq_tasks DROP CONSTRAINT ledgerq_tasks_live_status",
    """ALTER TABLE ledgerq_tasks ADD CONSTRAINT ledgerq_tasks_live_status
       CHECK (status IN ('pending', 'published', 'running'))""",
    _ready(_HOLDS_KEY),
]


def upgrade() -> None:
    execute_all(_UPGRADE)


def downgrade() -> None:
    execute_all(_DOWNGRADE)
