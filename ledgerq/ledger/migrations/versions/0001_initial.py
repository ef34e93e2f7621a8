"""The ledger: the hot ``ledgerq_tasks`` table, ``ledgerq_history``, and the wake-up trigger.

Revision ID: 0001
Revises:
Create Date: 2026-11-23
"""

from __future__ import annotations

from ledgerq.ledger.migrations.steps import execute_all

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_UPGRADE = [
    "CREATE SEQUENCE ledgerq_task_id_seq",
    """
    CREATE TABLE ledgerq_tasks (
    id            bigint      NOT NULL,
    kind          text        NOT NULL,
    queue         text        NOT NULL DEFAULT 'default',
    payload       jsonb       NOT NULL DEFAULT '{}'::jsonb,
    business_key  text,
    dedupe_key    text,
    priority      smallint    NOT NULL DEFAULT 0,
    shard         smallint    NOT NULL DEFAULT 0,
    run_at        timestamptz NOT NULL DEFAULT now(),
    status        text        NOT NULL,
    attempts      integer     NOT NULL DEFAULT 0,
    max_attempts  integer     NOT NULL DEFAULT 5,
    retry         jsonb,
    epoch         bigint      NOT NULL DEFAULT 0,
    lease_until   timestamptz,
    heartbeat_at  timestamptz,
    worker        text,
    checkpoint    jsonb,
    last_error    text,
    timeout_s     double precision,
    parent_id     bigint,
    created_at    timestamptz NOT NULL DEFAULT now(),
    published_at  timestamptz,
    started_at    timestamptz,
    finished_at   timestamptz,
        CONSTRAINT ledgerq_tasks_pk PRIMARY KEY (id),
        CONSTRAINT ledgerq_tasks_live_status
            CHECK (status IN ('pending', 'published', 'running')),
        CONSTRAINT ledgerq_tasks_attempts CHECK (max_attempts >= 1 AND attempts >= 0)
    ) WITH (fillfactor = 80,
            autovacuum_vacuum_scale_factor = 0.01,
            autovacuum_vacuum_threshold = 500,
            autovacuum_analyze_scale_factor = 0.02)
    """,
    "ALTER TABLE ledgerq_tasks ALTER COLUMN id SET DEFAULT nextval('ledgerq_task_id_seq')",
    "ALTER SEQUENCE ledgerq_task_id_seq OWNED BY ledgerq_tasks.id",
    # The relay's claim: due pending rows, highest priority first.
    """CREATE INDEX ledgerq_tasks_due ON ledgerq_tasks (priority DESC, run_at, id)
       WHERE status = 'pending'""",
    # The reconciler: stalled publications and expired leases.
    """CREATE INDEX ledgerq_tasks_published ON ledgerq_tasks (published_at, id)
       WHERE status = 'published'""",
    """CREATE INDEX ledgerq_tasks_leases ON ledgerq_tasks (lease_until, id)
       WHERE status = 'running'""",
    # De-duplication while live: one live task per (kind, dedupe_key).
    """CREATE UNIQUE INDEX ledgerq_tasks_dedupe ON ledgerq_tasks (kind, dedupe_key)
       WHERE dedupe_key IS NOT NULL""",
    """CREATE INDEX ledgerq_tasks_business_key ON ledgerq_tasks (business_key)
       WHERE business_key IS NOT NULL""",
    "CREATE INDEX ledgerq_tasks_parent ON ledgerq_tasks (parent_id) WHERE parent_id IS NOT NULL",
    # History has the same columns (names, types, NOT NULL) and none of the
    # hot table's defaults: a row arrives there complete.
    """
    CREATE TABLE ledgerq_history (LIKE ledgerq_tasks,
        CONSTRAINT ledgerq_history_pk PRIMARY KEY (id),
        CONSTRAINT ledgerq_history_status
            CHECK (status IN ('succeeded', 'dead', 'cancelled'))
    )
    """,
    "CREATE INDEX ledgerq_history_finished ON ledgerq_history (finished_at)",
    "CREATE INDEX ledgerq_history_status_kind ON ledgerq_history (status, kind)",
    """CREATE INDEX ledgerq_history_business_key ON ledgerq_history (business_key)
       WHERE business_key IS NOT NULL""",
    """CREATE INDEX ledgerq_history_parent ON ledgerq_history (parent_id)
       WHERE parent_id IS NOT NULL""",
    # LISTEN/NOTIFY is a wake-up, never the queue: one notification per inserting
    # statement (not per row), delivered on commit. The relay polls as well.
    """
    CREATE FUNCTION ledgerq_notify_enqueued() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        PERFORM pg_notify('ledgerq_enqueued', '');
        RETURN NULL;
    END
    $$
    """,
    """CREATE TRIGGER ledgerq_tasks_enqueued AFTER INSERT ON ledgerq_tasks
       FOR EACH STATEMENT EXECUTE FUNCTION ledgerq_notify_enqueued()""",
]

_DOWNGRADE = [
    "DROP TABLE IF EXISTS ledgerq_history",
    "DROP TABLE IF EXISTS ledgerq_tasks",
    "DROP FUNCTION IF EXISTS ledgerq_notify_enqueued()",
    "DROP SEQUENCE IF EXISTS ledgerq_task_id_seq",
]


def upgrade() -> None:
    execute_all(_UPGRADE)


def downgrade() -> None:
    execute_all(_DOWNGRADE)
