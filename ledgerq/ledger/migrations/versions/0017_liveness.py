"""Worker liveness: a dead worker's running tasks are rescued in seconds (issue 28).

Until this revision the only sign of a dead worker was its leases running out
(60 s by default): a SIGKILLed worker's tasks waited that long, although the
worker had stopped beating within a second.

New table ``ledgerq_workers``: one row per worker process (its ``worker`` id,
unique per start), beaten every second or so by the worker from its start to
the end of its stop (``worker_alive`` in routing.sql). ``silence_s`` is the
silence after which the worker itself says it is to be presumed dead (a few
of its beats); ``beat_at`` is the last beat. A worker that stopped cleanly sets
``silence_s`` to 0 (``worker_gone``).

New function ``ledgerq_worker_dead(worker)``: whether the worker is presumed
dead. Silence alone is not proof: after a PostgreSQL restart or failover every
worker was silent, and the reconciler's first pass may run before any of them
is back. So a worker is dead only when another worker's beat reached the
database after the dead one's silence ran out: the database was taking beats
and this one sent none. A worker with no row (an older version, a tool, a
test's stand-in) is never presumed dead: its lease is its only bound, as before.
A worker that is alive but silent for longer than its ``silence_s`` (cut off
from the database, its event loop blocked) is presumed dead too; its writes are
fenced out like any rescued attempt's (docs/guarantees.md).

The table is tiny and updated often: ``fillfactor`` leaves room for HOT updates.

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-27
"""

from __future__ import annotations

from ledgerq.ledger.migrations.steps import execute_all

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

_UPGRADE = [
    """
    CREATE TABLE ledgerq_workers (
        worker     text        NOT NULL,
        started_at timestamptz NOT NULL DEFAULT now(),
        beat_at    timestamptz NOT NULL,
        silence_s  float8      NOT NULL,
        CONSTRAINT ledgerq_workers_pk PRIMARY KEY (worker)
    ) WITH (fillfactor = 50)
    """,
    """
    CREATE FUNCTION ledgerq_worker_dead(w text) RETURNS boolean
    LANGUAGE sql STABLE PARALLEL SAFE AS $$
        SELECT EXISTS (
            SELECT 1 FROM ledgerq_workers d
            WHERE d.worker = w
              AND d.beat_at + make_interval(secs => d.silence_s) < now()
              AND d.beat_at + make_interval(secs => d.silence_s)
                  < (SELECT max(o.beat_at) FROM ledgerq_workers o WHERE o.worker <> w))
    $$
    """,
]

_DOWNGRADE = [
    "DROP FUNCTION ledgerq_worker_dead(text)",
    "DROP TABLE ledgerq_workers",
]


def upgrade() -> None:
    execute_all(_UPGRADE)


def downgrade() -> None:
    execute_all(_DOWNGRADE)
