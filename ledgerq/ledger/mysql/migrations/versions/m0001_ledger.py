"""The MySQL / MariaDB ledger, first part: what producers and a ``--direct``
worker need.

- ``ledgerq_tasks``, the hot table: PostgreSQL's columns (migrations 0001 to
  0021) in MySQL's types: ``DATETIME(6)`` in UTC for every timestamp, ``JSON``
  (on MariaDB a LONGTEXT checked with JSON_VALID) for payloads, policies,
  results, the attempt log and tags. ``AUTO_INCREMENT`` ids (MySQL has no
  sequence a statement can draw from before it inserts). ``duplicates`` counted
  the enqueues that met the task as their duplicate, written by the first
  enqueue's upsert; the enqueue now catches the duplicate key of a plain
  insert instead (ledger/mysql/inserts.py), and the column is no longer written.
- The de-duplication key: a plain UNIQUE (kind, dedupe_key). MySQL has no
  partial index, and needs none here: a unique index admits any number of
  NULLs, and ``dedupe_key`` is NULL for every task without ``unique=True`` and
  for every finished one (history keeps none).
- ``ledgerq_tasks_due`` (status, queue, priority, run_at, id): the direct claim's
  candidates, pending rows of a queue by priority, without reading the rest.
- ``ledgerq_history``: the terminal rows, the same columns. Partitioned by
  status and day in m0004 (retention).
- ``ledgerq_unique_keys``: the permanent keys of ``once=True`` (kind, business
  key) and the task that took each.
- ``ledgerq_kinds``: the per-kind defaults the workers register and the claim
  reads for what a producer left unset.
- ``ledgerq_subscriptions`` and ``ledgerq_workers``: what each worker serves,
  and its liveness beats.

Text columns are compared byte for byte and without pad-space (PostgreSQL's
``text`` semantics: ``'Order-1'`` and ``'order-1 '`` are other keys than
``'order-1'``): MariaDB's ``utf8mb4_nopad_bin``, MySQL's ``utf8mb4_0900_bin``.

Revision ID: m0001
Revises:
Create Date: 2026-11-28
"""

from __future__ import annotations

from alembic import op

revision = "m0001"
down_revision = None
branch_labels = None
depends_on = None

#: The columns a task has, live or finished (history adds nothing; the hot
#: table's id is AUTO_INCREMENT, history's is the task's).
_COLUMNS = """
    kind                VARCHAR(200) NOT NULL,
    queue               VARCHAR(200) NOT NULL DEFAULT 'default',
    payload             JSON         NOT NULL,
    business_key        VARCHAR(512) NULL,
    dedupe_key          VARCHAR(512) NULL,
    priority            SMALLINT     NOT NULL DEFAULT 0,
    shard               SMALLINT     NOT NULL DEFAULT 0,
    run_at              DATETIME(6)  NOT NULL,
    status              VARCHAR(16)  NOT NULL,
    attempts            INT          NOT NULL DEFAULT 0,
    max_attempts        INT          NULL,
    retry               JSON         NULL,
    epoch               BIGINT       NOT NULL DEFAULT 0,
    lease_until         DATETIME(6)  NULL,
    heartbeat_at        DATETIME(6)  NULL,
    worker              VARCHAR(255) NULL,
    checkpoint          JSON         NULL,
    last_error          TEXT         NULL,
    timeout_s           DOUBLE       NULL,
    parent_id           BIGINT       NULL,
    created_at          DATETIME(6)  NOT NULL,
    published_at        DATETIME(6)  NULL,
    started_at          DATETIME(6)  NULL,
    finished_at         DATETIME(6)  NULL,
    publishes           INT          NOT NULL DEFAULT 0,
    suspect             BOOLEAN      NOT NULL DEFAULT FALSE,
    result              JSON         NULL,
    attempt_log         JSON         NULL,
    cancel_requested_at DATETIME(6)  NULL,
    trace_context       JSON         NULL,
    ordering_key        VARCHAR(512) NULL,
    progress            JSON         NULL,
    route               VARCHAR(255) NULL,
    sticky_worker       VARCHAR(255) NULL,
    sticky_until        DATETIME(6)  NULL,
    expires_at          DATETIME(6)  NULL,
    expired             BOOLEAN      NOT NULL DEFAULT FALSE,
    tags                JSON         NULL,
"""


def _statements(collation: str) -> list[str]:
    table = f"ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = {collation}"
    return [
        f"""
        CREATE TABLE IF NOT EXISTS ledgerq_tasks (
            id BIGINT NOT NULL AUTO_INCREMENT,
            {_COLUMNS}
            duplicates INT NOT NULL DEFAULT 0,
            PRIMARY KEY (id),
            UNIQUE KEY ledgerq_tasks_dedupe (kind, dedupe_key),
            KEY ledgerq_tasks_due (status, queue, priority, run_at, id),
            KEY ledgerq_tasks_leases (status, lease_until),
            KEY ledgerq_tasks_business_key (business_key),
            KEY ledgerq_tasks_parent (parent_id),
            CONSTRAINT ledgerq_tasks_live_status
                CHECK (status IN ('pending', 'published', 'running')),
            CONSTRAINT ledgerq_tasks_attempts
                CHECK (attempts >= 0 AND (max_attempts IS NULL OR max_attempts >= 1))
        ) {table}
        """,
        f"""
        CREATE TABLE IF NOT EXISTS ledgerq_history (
            id BIGINT NOT NULL,
            {_COLUMNS}
            PRIMARY KEY (id),
            KEY ledgerq_history_status_id (status, id),
            KEY ledgerq_history_finished (finished_at),
            KEY ledgerq_history_business_key (business_key),
            KEY ledgerq_history_parent (parent_id),
            CONSTRAINT ledgerq_history_status
                CHECK (status IN ('succeeded', 'dead', 'cancelled'))
        ) {table}
        """,
        f"""
        CREATE TABLE IF NOT EXISTS ledgerq_unique_keys (
            kind         VARCHAR(200) NOT NULL,
            business_key VARCHAR(512) NOT NULL,
            task_id      BIGINT       NULL,
            duplicates   INT          NOT NULL DEFAULT 0,
            created_at   DATETIME(6)  NOT NULL,
            PRIMARY KEY (kind, business_key)
        ) {table}
        """,
        f"""
        CREATE TABLE IF NOT EXISTS ledgerq_kinds (
            kind         VARCHAR(200) NOT NULL,
            max_attempts INT          NULL,
            retry        JSON         NULL,
            timeout_s    DOUBLE       NULL,
            updated_at   DATETIME(6)  NOT NULL,
            PRIMARY KEY (kind)
        ) {table}
        """,
        f"""
        CREATE TABLE IF NOT EXISTS ledgerq_subscriptions (
            worker       VARCHAR(255) NOT NULL,
            queue        VARCHAR(200) NOT NULL,
            kinds        JSON         NULL,
            shards       JSON         NULL,
            route        VARCHAR(255) NULL,
            started_at   DATETIME(6)  NOT NULL,
            expires_at   DATETIME(6)  NOT NULL,
            capacity     INT          NOT NULL DEFAULT 0,
            direct       BOOLEAN      NOT NULL DEFAULT FALSE,
            sticky_route VARCHAR(255) NULL,
            PRIMARY KEY (worker, queue)
        ) {table}
        """,
        f"""
        CREATE TABLE IF NOT EXISTS ledgerq_workers (
            worker     VARCHAR(255) NOT NULL,
            started_at DATETIME(6)  NOT NULL,
            beat_at    DATETIME(6)  NOT NULL,
            silence_s  DOUBLE       NOT NULL,
            PRIMARY KEY (worker)
        ) {table}
        """,
    ]


_DOWNGRADE = [
    "DROP TABLE IF EXISTS ledgerq_workers",
    "DROP TABLE IF EXISTS ledgerq_subscriptions",
    "DROP TABLE IF EXISTS ledgerq_kinds",
    "DROP TABLE IF EXISTS ledgerq_unique_keys",
    "DROP TABLE IF EXISTS ledgerq_history",
    "DROP TABLE IF EXISTS ledgerq_tasks",
]


def upgrade() -> None:
    mariadb = bool(getattr(op.get_bind().dialect, "is_mariadb", False))
    for statement in _statements("utf8mb4_nopad_bin" if mariadb else "utf8mb4_0900_bin"):
        op.execute(statement)


def downgrade() -> None:
    for statement in _DOWNGRADE:
        op.execute(statement)
