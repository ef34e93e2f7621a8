"""The window: the ledger holds the queue, the broker holds a window (issue 24).

Before this revision the relay published every due task at once, so the
backlog sat in RabbitMQ, out of reach of aging, fairness, priorities and
operators. Now each broker route gets only what its live consumers can start
soon, and the one rule that picks due tasks is written here, once, for the
relay and the direct path alike.

- ``ledgerq_subscriptions.capacity``: how many delivered-but-unstarted tasks a
  subscriber can hold (its lane's prefetch); a route's window is the sum over
  its live subscribers. ``direct``: the subscriber claims from the ledger
  itself (``ledgerq worker --direct``); a queue with a live direct subscriber
  is never published by a relay.
- ``ledgerq_tasks.route`` (and history's, which keeps the hot table's columns
  in the same order): the route a ``published`` row went to (``''``: the
  queue's own broker queue). Outstanding work per route is counted from it,
  and a row published to a route that no live subscriber serves any more goes
  back to ``pending`` (the reconciler's ``unpublish_unserved``).
- ``ledgerq_tasks_published_route (queue, route) WHERE status = 'published'``:
  the count of a route's outstanding rows.
- View ``ledgerq_ready``: the pending rows that may go now as far as the task
  itself is concerned: not paused (queue or kind), and, for an ordered task,
  no live task of its key ahead of it and no blocking dead one behind it.
- View ``ledgerq_windows``: one row per live broker route (queue, route, kinds,
  shards) and its credit: the live subscribers' capacity minus its published
  rows, how many subscribers share it (the relay cuts envelopes per
  subscriber), and the kinds of its queue that a live direct subscriber
  claims itself (``direct_kinds``): the relay publishes none of those, so a
  queue can be served by ``--direct`` workers for some kinds and through
  RabbitMQ for the others, and a kind both serve goes the direct way.
- Function ``ledgerq_covers(kinds, shards, excluded, kind, shard)``: whether a
  window (its kinds and shards, NULL: all; less the kinds a direct worker of
  its queue claims) covers a task. A single expression, so PostgreSQL inlines
  it where ``ledgerq_pick`` calls it.
- Function ``ledgerq_pick(windows, limit, aging_s, min_wait_s)``: the due tasks
  to start next, per window at most its credit and at most ``limit`` in all:
  first the aged tasks (due ``aging_s`` or longer, oldest first, reported at
  priority 9), then by priority, a retried task behind the never-run tasks of
  its priority; a rate-limited kind only within its token bucket, which it
  charges. The rows are locked (``FOR UPDATE SKIP LOCKED``) for the caller's
  transaction. ``select_due`` (the relay), ``select_overdue`` (the reconciler
  standing in for a relay) and ``claim_due`` (the direct path) call it.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-27
"""

from __future__ import annotations

from ledgerq.ledger.migrations.steps import execute_all

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

#: The columns ledgerq_pick returns (the relay's DueTask and the direct claim's fence).
_PICKED = """
    id bigint, kind text, queue text, priority integer, epoch bigint, suspect boolean,
    trace_context jsonb, route text, subscribers integer
"""

_READY = """
CREATE VIEW ledgerq_ready AS
SELECT t.id, t.kind, t.queue, t.shard, t.priority, t.epoch, t.suspect, t.trace_context,
       t.attempts, t.run_at
FROM ledgerq_tasks t
WHERE t.status = 'pending'
  AND t.queue <> ALL(ARRAY(SELECT name FROM ledgerq_pauses WHERE scope = 'queue'))
  AND t.kind <> ALL(ARRAY(SELECT name FROM ledgerq_pauses WHERE scope = 'kind'))
  AND (t.ordering_key IS NULL OR (NOT EXISTS (
      SELECT 1 FROM ledgerq_tasks e
      WHERE e.ordering_key = t.ordering_key AND e.id <> t.id
        AND (e.status <> 'pending' OR e.id < t.id))
    AND NOT (cardinality(ARRAY(SELECT kind FROM ledgerq_kinds WHERE ordering = 'block')) > 0
      AND EXISTS (
        SELECT 1 FROM ledgerq_history h
        WHERE h.ordering_key = t.ordering_key AND h.status = 'dead' AND h.id < t.id
          AND h.kind = ANY(ARRAY(SELECT kind FROM ledgerq_kinds WHERE ordering = 'block'))))))
"""

_WINDOWS = """
CREATE VIEW ledgerq_windows AS
SELECT s.queue, s.route, s.kinds, s.shards,
       s.capacity - (SELECT count(*) FROM ledgerq_tasks p
                     WHERE p.status = 'published' AND p.queue = s.queue
                       AND p.route = s.route)::integer AS credit,
       s.capacity, s.subscribers,
       ARRAY(SELECT DISTINCT k FROM ledgerq_subscriptions d, unnest(d.kinds) AS k
             WHERE d.direct AND d.queue = s.queue AND d.expires_at > now()) AS direct_kinds
FROM (SELECT queue, COALESCE(route, '') AS route, kinds, shards,
             sum(capacity)::integer AS capacity, count(*)::integer AS subscribers
      FROM ledgerq_subscriptions
      WHERE expires_at > now() AND NOT direct
      GROUP BY queue, COALESCE(route, ''), kinds, shards) s
WHERE NOT EXISTS (SELECT 1 FROM ledgerq_subscriptions d
                  WHERE d.direct AND d.queue = s.queue AND d.expires_at > now()
                    AND d.kinds IS NULL)
"""

# PL/pgSQL, not SQL: a session plans the statement once and keeps the plan (a
# SQL function's body is planned on every call: 7-18 ms against 0.9 ms a call
# for 20 tasks out of 20,000, measured on the development machine). jit and
# sorts off, whoever calls: the relay's planner settings (ledger/pg/engines.py),
# for every caller. One window's candidates come from three index-friendly scans (aged: oldest
# first; fresh: by priority; metered: per token bucket), each at most the
# window's credit; ranked then keeps the window's credit, the buckets' tokens
# and the overall limit. A row two windows cover is taken once, by the window
# with the most room (so a window with little room never takes work from one
# with more, and a subscriber that does not consume cannot hold more than its
# own room of what others could run). Candidates not kept stay locked until the caller's transaction
# ends: another relay skips them for that long, and nothing else changes.
_PICK = (
    """
CREATE FUNCTION ledgerq_pick(p_windows jsonb, p_limit integer, p_aging_s float8,
                             p_min_wait_s float8 DEFAULT 0)
RETURNS TABLE ("""
    + _PICKED
    + """)
LANGUAGE plpgsql VOLATILE SET jit = off SET enable_sort = off AS $$
#variable_conflict use_column
BEGIN
RETURN QUERY
WITH w AS (
    SELECT w.* FROM jsonb_to_recordset(p_windows)
        AS w(queue text, route text, kinds text[], shards integer[], credit integer,
             subscribers integer, direct_kinds text[])
    WHERE w.credit > 0
), buckets AS (
    SELECT kind, clock_timestamp() AS at,
           LEAST(burst, tokens + rate_per_s * GREATEST(
               EXTRACT(EPOCH FROM clock_timestamp() - refilled_at), 0)) AS avail
    FROM ledgerq_kinds
    WHERE rate_per_s IS NOT NULL
    ORDER BY kind
    FOR UPDATE SKIP LOCKED
), aged AS (
    SELECT w.queue AS w_queue, w.route AS w_route, w.credit, w.subscribers, c.*, 0 AS part
    FROM w CROSS JOIN LATERAL (
        SELECT t.id, t.kind, t.priority, t.epoch, t.suspect, t.trace_context, t.attempts,
               t.run_at
        FROM ledgerq_ready t
        WHERE t.queue = w.queue
          AND ledgerq_covers(w.kinds, w.shards, w.direct_kinds, t.kind, t.shard)
          AND t.run_at <= now() - make_interval(secs => GREATEST(p_aging_s, p_min_wait_s))
          AND t.kind <> ALL(ARRAY(SELECT kind FROM ledgerq_kinds WHERE rate_per_s IS NOT NULL))
        ORDER BY t.run_at, t.id
        LIMIT LEAST(w.credit, p_limit)
        FOR UPDATE SKIP LOCKED) c
), fresh AS (
    SELECT w.queue AS w_queue, w.route AS w_route, w.credit, w.subscribers, c.*, 1 AS part
    FROM w CROSS JOIN LATERAL (
        SELECT t.id, t.kind, t.priority, t.epoch, t.suspect, t.trace_context, t.attempts,
               t.run_at
        FROM ledgerq_ready t
        WHERE t.queue = w.queue
          AND ledgerq_covers(w.kinds, w.shards, w.direct_kinds, t.kind, t.shard)
          AND t.run_at <= now() - make_interval(secs => p_min_wait_s)
          AND t.id <> ALL(ARRAY(SELECT id FROM aged))
          AND t.kind <> ALL(ARRAY(SELECT kind FROM ledgerq_kinds WHERE rate_per_s IS NOT NULL))
        ORDER BY t.priority DESC, t.attempts > 0, t.run_at, t.id
        LIMIT LEAST(w.credit, p_limit)
        FOR UPDATE SKIP LOCKED) c
), metered AS (
    SELECT w.queue AS w_queue, w.route AS w_route, w.credit, w.subscribers, c.*, 1 AS part
    FROM w CROSS JOIN buckets b CROSS JOIN LATERAL (
        SELECT t.id, t.kind, t.priority, t.epoch, t.suspect, t.trace_context, t.attempts,
               t.run_at
        FROM ledgerq_ready t
        WHERE t.queue = w.queue AND t.kind = b.kind
          AND ledgerq_covers(w.kinds, w.shards, w.direct_kinds, t.kind, t.shard)
          AND t.run_at <= now() - make_interval(secs => p_min_wait_s)
        ORDER BY t.priority DESC, t.attempts > 0, t.run_at, t.id
        LIMIT CAST(floor(LEAST(b.avail, w.credit, p_limit)) AS bigint)
        FOR UPDATE SKIP LOCKED) c
), candidates AS (
    SELECT * FROM aged UNION ALL SELECT * FROM fresh UNION ALL SELECT * FROM metered
), once AS (
    SELECT DISTINCT ON (id) * FROM candidates ORDER BY id, credit DESC, w_queue, w_route
), ranked AS (
    SELECT o.*, b.avail,
           row_number() OVER (PARTITION BY o.w_queue, o.w_route
                              ORDER BY o.part, o.rank DESC, o.retried, o.run_at, o.id)
               AS in_window,
           row_number() OVER (PARTITION BY o.kind
                              ORDER BY o.part, o.rank DESC, o.retried, o.run_at, o.id)
               AS in_kind
    FROM (SELECT once.*, CASE WHEN part = 0 THEN 10 ELSE priority END AS rank,
                 part = 1 AND attempts > 0 AS retried
          FROM once) o
    LEFT JOIN buckets b ON b.kind = o.kind
), kept AS (
    SELECT r.*, row_number() OVER (ORDER BY r.part, r.rank DESC, r.retried, r.run_at, r.id)
               AS overall
    FROM ranked r
    WHERE r.in_window <= r.credit AND (r.avail IS NULL OR r.in_kind <= floor(r.avail))
), picked AS (
    SELECT * FROM kept WHERE overall <= p_limit
), taken AS (
    UPDATE ledgerq_kinds k
    SET tokens = b.avail - (SELECT count(*) FROM picked p WHERE p.kind = b.kind),
        refilled_at = b.at
    FROM buckets b
    WHERE k.kind = b.kind AND EXISTS (SELECT 1 FROM picked p WHERE p.kind = b.kind)
    RETURNING k.kind
)
SELECT id, kind, w_queue, CAST(CASE WHEN part = 0 THEN 9 ELSE priority END AS integer), epoch,
       suspect, trace_context, w_route, COALESCE(subscribers, 1)
FROM picked
ORDER BY overall;
END
$$
"""
)

_COVERS = """
CREATE FUNCTION ledgerq_covers(kinds text[], shards integer[], excluded text[],
                               k text, s integer) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT (kinds IS NULL OR k = ANY(kinds)) AND (shards IS NULL OR s = ANY(shards))
       AND (excluded IS NULL OR k <> ALL(excluded))
$$
"""

_UPGRADE = [
    "ALTER TABLE ledgerq_subscriptions ADD COLUMN capacity integer NOT NULL DEFAULT 0",
    "ALTER TABLE ledgerq_subscriptions ADD COLUMN direct boolean NOT NULL DEFAULT false",
    "ALTER TABLE ledgerq_tasks ADD COLUMN route text",
    "ALTER TABLE ledgerq_history ADD COLUMN route text",
    """CREATE INDEX ledgerq_tasks_published_route ON ledgerq_tasks (queue, route)
       WHERE status = 'published'""",
    _READY,
    _WINDOWS,
    _COVERS,
    _PICK,
]

_DOWNGRADE = [
    "DROP FUNCTION ledgerq_pick(jsonb, integer, float8, float8)",
    "DROP FUNCTION ledgerq_covers(text[], integer[], text[], text, integer)",
    "DROP VIEW ledgerq_windows",
    "DROP VIEW ledgerq_ready",
    "DROP INDEX ledgerq_tasks_published_route",
    "ALTER TABLE ledgerq_history DROP COLUMN route",
    "ALTER TABLE ledgerq_tasks DROP COLUMN route",
    "ALTER TABLE ledgerq_subscriptions DROP COLUMN direct",
    "ALTER TABLE ledgerq_subscriptions DROP COLUMN capacity",
]


def upgrade() -> None:
    execute_all(_UPGRADE)


def downgrade() -> None:
    execute_all(_DOWNGRADE)
