"""Routing: which worker serves which queue, kinds and shards (issue 14).

New table ``ledgerq_subscriptions``: one row per (worker, queue) a live worker
consumes. ``kinds`` and ``shards`` (NULL: all) say what part of the queue it
serves; ``route`` names the broker queue it reads (NULL: the queue's own broker
queue, ``<prefix>.q.<queue>``; else ``<prefix>.q.<queue>@<route>``, shared by
every worker with the same kinds and shards). A worker refreshes
``expires_at`` on its heartbeat and sets it to now when it stops; a row whose
``expires_at`` has passed serves nothing, but keeps its queue *routed*: the
relay publishes a routed queue's tasks only where a live subscription covers
them, so an unserved kind or shard waits in the ledger (as backlog) instead
of in a broker queue nobody reads. A queue with no row at all (never
subscribed) is published to its own broker queue, as before this revision.

New function ``ledgerq_route(queue, kind, shard)``: the route of a live
subscription covering the task ('' for the queue's own broker queue), a
restricted one first; NULL when nothing live covers it. ``select_due``,
``select_overdue`` and ``select_stalled`` call it only for rows of queues
that have a live restricted subscription, or no live whole-queue one.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-23
"""

from __future__ import annotations

from ledgerq.ledger.migrations.steps import execute_all

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

_UPGRADE = [
    """
    CREATE TABLE ledgerq_subscriptions (
        worker     text        NOT NULL,
        queue      text        NOT NULL,
        kinds      text[],
        shards     integer[],
        route      text,
        started_at timestamptz NOT NULL DEFAULT now(),
        expires_at timestamptz NOT NULL,
        CONSTRAINT ledgerq_subscriptions_pk PRIMARY KEY (worker, queue)
    )
    """,
    """
    CREATE FUNCTION ledgerq_route(q text, k text, s integer) RETURNS text
    LANGUAGE sql STABLE PARALLEL SAFE AS $$
        SELECT COALESCE(route, '') FROM ledgerq_subscriptions
        WHERE queue = q AND expires_at > now()
          AND (kinds IS NULL OR k = ANY(kinds)) AND (shards IS NULL OR s = ANY(shards))
        ORDER BY route IS NULL, route
        LIMIT 1
    $$
    """,
]

_DOWNGRADE = [
    "DROP FUNCTION ledgerq_route(text, text, integer)",
    "DROP TABLE ledgerq_subscriptions",
]


def upgrade() -> None:
    execute_all(_UPGRADE)


def downgrade() -> None:
    execute_all(_DOWNGRADE)
