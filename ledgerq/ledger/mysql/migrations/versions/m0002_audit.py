"""The MySQL / MariaDB ledger's audit trail: ``ledgerq_audit`` (one row per
operator action or system action, never a dry run) and ``ledgerq_audit_tasks``
(which tasks each touched, and how), PostgreSQL's tables of migration 0005 in
MySQL's types. Written in the transaction of the change it describes
(ledger/mysql/audit.py), so it never records a change that did not commit.

Revision ID: m0002
Revises: m0001
Create Date: 2026-11-28
"""

from __future__ import annotations

from alembic import op

revision = "m0002"
down_revision = "m0001"
branch_labels = None
depends_on = None


def _statements(collation: str) -> list[str]:
    table = f"ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = {collation}"
    return [
        f"""
        CREATE TABLE IF NOT EXISTS ledgerq_audit (
            id          BIGINT       NOT NULL AUTO_INCREMENT,
            at          DATETIME(6)  NOT NULL,
            actor       VARCHAR(255) NOT NULL,
            action      VARCHAR(64)  NOT NULL,
            selection   JSON         NOT NULL,
            options     JSON         NOT NULL,
            reason      TEXT         NULL,
            matched     INT          NOT NULL DEFAULT 0,
            changed     INT          NOT NULL DEFAULT 0,
            skipped     INT          NOT NULL DEFAULT 0,
            finished_at DATETIME(6)  NULL,
            PRIMARY KEY (id),
            KEY ledgerq_audit_at (at)
        ) {table}
        """,
        f"""
        CREATE TABLE IF NOT EXISTS ledgerq_audit_tasks (
            audit_id BIGINT      NOT NULL,
            task_id  BIGINT      NOT NULL,
            outcome  VARCHAR(32) NOT NULL,
            PRIMARY KEY (audit_id, task_id),
            KEY ledgerq_audit_tasks_task (task_id),
            CONSTRAINT ledgerq_audit_tasks_audit
                FOREIGN KEY (audit_id) REFERENCES ledgerq_audit (id) ON DELETE CASCADE
        ) {table}
        """,
    ]


def upgrade() -> None:
    mariadb = bool(getattr(op.get_bind().dialect, "is_mariadb", False))
    for statement in _statements("utf8mb4_nopad_bin" if mariadb else "utf8mb4_0900_bin"):
        op.execute(statement)


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS ledgerq_audit_tasks")
    op.execute("DROP TABLE IF EXISTS ledgerq_audit")
