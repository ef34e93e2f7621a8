"""Dependencies between tasks and fan-out on the MySQL / MariaDB ledger:
``enqueue(..., after=[id, ...])`` (PostgreSQL's migrations 0020 and 0022; the
plans that keep them are ledger/mysql/dependencies.py) and ``parent_id`` with
``@task(on_children_done=...)`` (0010; ledger/mysql/families.py).

- ``ledgerq_tasks`` may hold ``waiting`` tasks: enqueued with ``after``, neither
  due nor published (the pick, the claims and the reconciler read ``pending``,
  ``published`` or ``running`` only, each by an index whose first column is the
  status: a waiting row is never in their ranges).
- ``ledgerq_dependencies (task_id, depends_on, always, dependency_ended,
  ended_at)``: one edge per dependency, kept after the release (``show`` lists
  a task's dependencies and dependents from it). ``dependency_ended`` is the
  dependency's end as its dependent sees it: NULL while it is live, its status in
  history once the transaction that ended it released its dependents (MySQL has
  no trigger that may change ``ledgerq_tasks`` from a statement reading it, so
  the judge reads these stamps, under the dependent's row lock, instead of the
  dependency's row: see dependencies.py). ``ended_at``: when the dependent
  ended, NULL while it is live (retention prunes by it). ``depends_on`` is
  indexed for the release, ``ended_at`` for the prune.
- ``ledgerq_after_add(ids)``, a procedure run as its definer (the migrator; ``SQL
  SECURITY DEFINER``, as PostgreSQL's function of the same name): the producer
  has inserted its tasks and their edges; this stamps the edges from history,
  sets the tasks waiting and judges at once those none of whose dependencies is
  live: released, or cancelled (moved to history) when one ended dead or
  cancelled. The producer needs no UPDATE or DELETE on ``ledgerq_tasks`` nor any
  write to history, only ``EXECUTE`` on it (ledger/mysql/roles.sql). The rule is
  ledger/mysql/dependencies.py ``judge``'s, restated here for the producer's own
  new tasks; a later migration that adds a history column updates the procedure.

- ``ledgerq_kinds.on_children_done``: the kind of the callback a parent of this
  kind gets when its family completes (written by workers at their start).
- ``ledgerq_families (parent_id)``: one row per parent that ever had a child;
  ``completed_at`` and ``callback_id`` set once, when the parent and every child
  are terminal. PostgreSQL keeps it by triggers; here the plans that insert a
  child or end a task do (families.py), for the same reason as the release.

Revision ID: m0007
Revises: m0006
Create Date: 2026-11-28
"""

from __future__ import annotations

from alembic import op

revision = "m0007"
down_revision = "m0006"
branch_labels = None
depends_on = None


def _live_status(statuses: str) -> str:
    return (
        "ALTER TABLE ledgerq_tasks DROP CONSTRAINT ledgerq_tasks_live_status, "
        f"ADD CONSTRAINT ledgerq_tasks_live_status CHECK (status IN ({statuses}))"
    )


#: The tasks of the call, as a table: ``JOIN {_NEW} ON n.id = ...``.
_NEW = "JSON_TABLE(p_ids, '$[*]' COLUMNS (id BIGINT PATH '$')) AS n"
#: A task (row t) none of whose dependencies is live (every edge stamped).
_SETTLED = """NOT EXISTS (SELECT 1 FROM ledgerq_dependencies e
                           WHERE e.task_id = t.id AND e.dependency_ended IS NULL)"""

AFTER_ADD = f"""
CREATE {{definer}}PROCEDURE ledgerq_after_add(IN p_ids JSON)
    MODIFIES SQL DATA
    SQL SECURITY DEFINER
BEGIN
    IF EXISTS (SELECT 1 FROM ledgerq_dependencies e JOIN {_NEW} ON n.id = e.task_id
               WHERE e.depends_on = e.task_id) THEN
        SIGNAL SQLSTATE 'LQD01' SET MESSAGE_TEXT = 'a task names itself in after';
    END IF;
    UPDATE ledgerq_dependencies e
    JOIN {_NEW} ON n.id = e.task_id
    LEFT JOIN ledgerq_history h ON h.id = e.depends_on
    SET e.dependency_ended = h.status;
    UPDATE ledgerq_tasks t JOIN {_NEW} ON n.id = t.id
    SET t.status = 'waiting'
    WHERE t.status = 'pending' AND t.epoch = 0
      AND EXISTS (SELECT 1 FROM ledgerq_dependencies e WHERE e.task_id = t.id);
    UPDATE ledgerq_tasks t JOIN {_NEW} ON n.id = t.id
    SET t.status = 'pending'
    WHERE t.status = 'waiting' AND {_SETTLED}
      AND (EXISTS (SELECT 1 FROM ledgerq_dependencies e WHERE e.task_id = t.id AND e.always)
           OR NOT EXISTS (SELECT 1 FROM ledgerq_dependencies e
                          WHERE e.task_id = t.id AND e.dependency_ended <> 'succeeded'));
    INSERT INTO ledgerq_history (
        id, kind, queue, payload, business_key, dedupe_key, priority, shard, run_at, status,
        attempts, max_attempts, retry, epoch, lease_until, heartbeat_at, worker, checkpoint,
        last_error, timeout_s, parent_id, created_at, published_at, started_at, finished_at,
        publishes, suspect, result, attempt_log, cancel_requested_at, trace_context,
        ordering_key, progress, route, sticky_worker, sticky_until, expires_at, expired, tags)
    SELECT t.id, t.kind, t.queue, t.payload, t.business_key, NULL, t.priority, t.shard,
           t.run_at, 'cancelled', t.attempts, t.max_attempts, t.retry, t.epoch, NULL,
           t.heartbeat_at, NULL, t.checkpoint,
           (SELECT CONCAT('dependency ', e.depends_on, ' ended ', e.dependency_ended)
            FROM ledgerq_dependencies e
            WHERE e.task_id = t.id AND e.dependency_ended <> 'succeeded'
            ORDER BY e.depends_on LIMIT 1),
           t.timeout_s, t.parent_id, t.created_at, t.published_at, t.started_at,
           UTC_TIMESTAMP(6), t.publishes, t.suspect, NULL, t.attempt_log, NULL,
           t.trace_context, t.ordering_key, t.progress, t.route, t.sticky_worker,
           t.sticky_until, t.expires_at, FALSE, t.tags
    FROM ledgerq_tasks t JOIN {_NEW} ON n.id = t.id
    WHERE t.status = 'waiting' AND {_SETTLED};
    DELETE t FROM ledgerq_tasks t JOIN {_NEW} ON n.id = t.id
    WHERE t.status = 'waiting' AND {_SETTLED};
    UPDATE ledgerq_dependencies e
    JOIN {_NEW} ON n.id = e.task_id
    JOIN ledgerq_history h ON h.id = e.task_id
    SET e.ended_at = h.finished_at;
END
"""


def _definer(mariadb: bool) -> str:
    """Whose rights the procedure runs with: the migrating account's. A migrator
    whose rights are its role's (ledger/mysql/roles.sql) makes that role the
    definer on MariaDB, which does not apply a definer user's default role."""
    if not mariadb:
        return ""
    role = op.get_bind().exec_driver_sql("SELECT CURRENT_ROLE()").scalar()
    return "" if role is None else "DEFINER = CURRENT_ROLE "


def upgrade() -> None:
    mariadb = bool(getattr(op.get_bind().dialect, "is_mariadb", False))
    collation = "utf8mb4_nopad_bin" if mariadb else "utf8mb4_0900_bin"
    op.execute(_live_status("'waiting', 'pending', 'published', 'running'"))
    op.execute(
        f"""
        CREATE TABLE IF NOT EXISTS ledgerq_dependencies (
            task_id          BIGINT      NOT NULL,
            depends_on       BIGINT      NOT NULL,
            always           BOOLEAN     NOT NULL DEFAULT FALSE,
            dependency_ended VARCHAR(16) NULL,
            ended_at         DATETIME(6) NULL,
            PRIMARY KEY (task_id, depends_on),
            KEY ledgerq_dependencies_on (depends_on),
            KEY ledgerq_dependencies_ended (ended_at)
        ) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = {collation}
        """
    )
    op.execute("DROP PROCEDURE IF EXISTS ledgerq_after_add")
    op.execute(AFTER_ADD.format(definer=_definer(mariadb)))
    op.execute("ALTER TABLE ledgerq_kinds ADD COLUMN on_children_done VARCHAR(200) NULL")
    op.execute(
        f"""
        CREATE TABLE IF NOT EXISTS ledgerq_families (
            parent_id    BIGINT      NOT NULL,
            created_at   DATETIME(6) NOT NULL,
            completed_at DATETIME(6) NULL,
            callback_id  BIGINT      NULL,
            PRIMARY KEY (parent_id)
        ) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = {collation}
        """
    )


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS ledgerq_families")
    op.execute("ALTER TABLE ledgerq_kinds DROP COLUMN on_children_done")
    op.execute("DROP PROCEDURE IF EXISTS ledgerq_after_add")
    op.execute("DROP TABLE IF EXISTS ledgerq_dependencies")
    # A waiting task cannot stay: it becomes pending (runs without its dependencies).
    op.execute("UPDATE ledgerq_tasks SET status = 'pending' WHERE status = 'waiting'")
    op.execute(_live_status("'pending', 'published', 'running'"))
