"""Traces: the OpenTelemetry context a task was enqueued in.

``enqueue`` (with the ``otel`` extra and an active span) stores the W3C trace
context (``{"traceparent": ..., "tracestate": ...}``, as OpenTelemetry's
propagator writes it) in ``trace_context``; the relay's publish and the
worker's handler run as spans that continue it, reading it from the row (the
relay from ``select_due``, the worker from its claim). History keeps it, like
every column. NULL when the producer had no span, or no OpenTelemetry.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23
"""

from __future__ import annotations

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nullable, no default: no table rewrite, and existing rows simply have none.
    op.execute("ALTER TABLE ledgerq_tasks ADD COLUMN trace_context jsonb")
    op.execute("ALTER TABLE ledgerq_history ADD COLUMN trace_context jsonb")


def downgrade() -> None:
    op.execute("ALTER TABLE ledgerq_history DROP COLUMN trace_context")
    op.execute("ALTER TABLE ledgerq_tasks DROP COLUMN trace_context")
