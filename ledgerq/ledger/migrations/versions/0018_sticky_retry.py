"""Sticky retries: a retry prefers the worker that ran the failed attempt (issue 26, 9).

``@task(..., sticky_retry=seconds)``: once an attempt of the kind fails and is
retried, the retry goes to the worker that ran the failed attempt while that
worker is live, until ``seconds`` after the retry became due; then to any
worker. Built on the window's routing (migration 0014, docs/design.md "Sticky
retries"):

- ``ledgerq_kinds.sticky_s``: the kind's window, written by its workers at their
  start (``register_sticky``), NULL for none.
- ``ledgerq_tasks.sticky_worker`` / ``sticky_until``: written by the finish
  statement when it sends an attempt back to ``pending`` as a retry of a sticky
  kind (the attempt's worker; the retry's due time plus ``sticky_s``).
  ``ledgerq_history`` gets both too, as it keeps the hot table's columns (the
  history insert leaves them NULL: a finished task is held for nobody).
- ``ledgerq_subscriptions.sticky_route``: the worker's personal route
  (``s-`` and a digest of its id), registered by a worker that runs a sticky
  kind, whose broker queue ``<prefix>.q.<queue>@<sticky_route>`` only it consumes.
- View ``ledgerq_ready`` gains ``sticky_worker`` and ``sticky_to``: the worker a
  pending task is held for, while its ``sticky_until`` is ahead, and that worker's personal
  subscription is live (not expired, not direct, not presumed dead, migration
  0017); otherwise NULL.
- View ``ledgerq_windows`` gains ``sticky``: NULL for the shared routes; one more
  window per live personal route, ``sticky`` its worker, its capacity the
  lane's own.
- ``ledgerq_pick``: the three scans of a shared window take only rows held for
  nobody (``sticky_to IS NULL``), and are skipped for a personal window; a
  fourth scan gives each personal window the rows held for its worker, through
  the new index ``ledgerq_tasks_held`` (sticky_worker, then the by-priority
  order; only pending retries of sticky kinds are in it), so a personal window
  costs an index probe, never a pass over the due set. The direct path's
  windows name no worker, so it takes no held task until its hold lapses.

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-27
"""

from __future__ import annotations

import importlib

from ledgerq.ledger.migrations.steps import execute_all

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

_0014 = importlib.import_module("ledgerq.ledger.migrations.versions.0014_window")
_0015 = importlib.import_module("ledgerq.ledger.migrations.versions.0015_release_key")


def _replaced(text: str, old: str, new: str, count: int) -> str:
    assert text.count(old) == count, (old, text.count(old))
    return text.replace(old, new)


_HELD_FOR = """       t.attempts, t.run_at, t.sticky_worker,
       CASE WHEN t.sticky_until > now() THEN (
           SELECT s.worker FROM ledgerq_subscriptions s
           WHERE s.worker = t.sticky_worker AND s.queue = t.queue
             AND s.sticky_route IS NOT NULL AND NOT s.direct AND s.expires_at > now()
             AND NOT ledgerq_worker_dead(s.worker)) END AS sticky_to
FROM ledgerq_tasks t"""

_READY = _replaced(_0015._READY, "       t.attempts, t.run_at\nFROM ledgerq_tasks t", _HELD_FOR, 1)

_WINDOWS = """
CREATE OR REPLACE VIEW ledgerq_windows AS
SELECT s.queue, s.route, s.kinds, s.shards,
       s.capacity - (SELECT count(*) FROM ledgerq_tasks p
                     WHERE p.status = 'published' AND p.queue = s.queue
                       AND p.route = s.route)::integer AS credit,
       s.capacity, s.subscribers,
       ARRAY(SELECT DISTINCT k FROM ledgerq_subscriptions d, unnest(d.kinds) AS k
             WHERE d.direct AND d.queue = s.queue AND d.expires_at > now()) AS direct_kinds,
       s.sticky
FROM (SELECT queue, COALESCE(route, '') AS route, kinds, shards,
             sum(capacity)::integer AS capacity, count(*)::integer AS subscribers,
             NULL::text AS sticky
      FROM ledgerq_subscriptions
      WHERE expires_at > now() AND NOT direct
      GROUP BY queue, COALESCE(route, ''), kinds, shards
      UNION ALL
      SELECT queue, sticky_route, kinds, shards, capacity, 1, worker
      FROM ledgerq_subscriptions
      WHERE expires_at > now() AND NOT direct AND sticky_route IS NOT NULL) s
WHERE NOT EXISTS (SELECT 1 FROM ledgerq_subscriptions d
                  WHERE d.direct AND d.queue = s.queue AND d.expires_at > now()
                    AND d.kinds IS NULL)
"""

_COVERS = "          AND ledgerq_covers(w.kinds, w.shards, w.direct_kinds, t.kind, t.shard)\n"
_SETTINGS = "SET jit = off SET enable_sort = off"
#: Each of 0014's three scans takes a shared window's rows held for nobody; the
#: one-time filter on ``w.sticky`` skips the scan for a personal window.
_SHARED = _COVERS + "          AND w.sticky IS NULL AND t.sticky_to IS NULL\n"
#: The fourth scan: a personal window's held rows, through ``ledgerq_tasks_held``
#: (an index on the worker, in the by-priority order), never the whole due set.
_HELD = """), held AS (
    SELECT w.queue AS w_queue, w.route AS w_route, w.credit, w.subscribers, c.*, 1 AS part
    FROM w CROSS JOIN LATERAL (
        SELECT t.id, t.kind, t.priority, t.epoch, t.suspect, t.trace_context, t.attempts,
               t.run_at
        FROM ledgerq_ready t
        WHERE w.sticky IS NOT NULL AND t.sticky_worker = w.sticky AND t.sticky_to = w.sticky
          AND t.queue = w.queue
          AND ledgerq_covers(w.kinds, w.shards, w.direct_kinds, t.kind, t.shard)
          AND t.run_at <= now() - make_interval(secs => p_min_wait_s)
        ORDER BY t.priority DESC, t.attempts > 0, t.run_at, t.id
        LIMIT LEAST(w.credit, p_limit)
        FOR UPDATE SKIP LOCKED) c
), candidates AS (
    SELECT * FROM aged UNION ALL SELECT * FROM fresh UNION ALL SELECT * FROM metered
    UNION ALL SELECT * FROM held
"""
_CANDIDATES = """), candidates AS (
    SELECT * FROM aged UNION ALL SELECT * FROM fresh UNION ALL SELECT * FROM metered
"""


def _pick(sticky: bool) -> str:
    """0014's function as ``CREATE OR REPLACE``, with the plan setting of 0016, and
    (``sticky``) the hold: the shared windows' scans take only rows held for
    nobody, and a fourth scan gives each personal window its worker's held rows.
    A held row's rate limit, pauses and ordering key apply as to any (the same
    view, the same ranking and buckets)."""
    text = _replaced(_0014._PICK, "CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1)
    text = _replaced(text, _SETTINGS, _SETTINGS + " SET plan_cache_mode = force_generic_plan", 1)
    if not sticky:
        return text
    text = _replaced(
        text, "subscribers integer, direct_kinds text[])", "subscribers integer, "
        "direct_kinds text[], sticky text)", 1
    )  # fmt: skip
    text = _replaced(text, _COVERS, _SHARED, 3)
    return _replaced(text, _CANDIDATES, _HELD, 1)


_UPGRADE = [
    "ALTER TABLE ledgerq_kinds ADD COLUMN sticky_s float8",
    "ALTER TABLE ledgerq_tasks ADD COLUMN sticky_worker text",
    "ALTER TABLE ledgerq_tasks ADD COLUMN sticky_until timestamptz",
    "ALTER TABLE ledgerq_history ADD COLUMN sticky_worker text",
    "ALTER TABLE ledgerq_history ADD COLUMN sticky_until timestamptz",
    "ALTER TABLE ledgerq_subscriptions ADD COLUMN sticky_route text",
    # The held rows of a worker, in the by-priority order of ledgerq_tasks_due:
    # only retries of sticky kinds are in it, while pending.
    """CREATE INDEX ledgerq_tasks_held
       ON ledgerq_tasks (sticky_worker, priority DESC, (attempts > 0), run_at, id)
       WHERE status = 'pending' AND sticky_worker IS NOT NULL""",
    _READY,
    _WINDOWS,
    _pick(sticky=True),
]

_DOWNGRADE = [
    _pick(sticky=False),
    "DROP VIEW ledgerq_windows",
    _0014._WINDOWS,
    "DROP VIEW ledgerq_ready",
    "DROP INDEX ledgerq_tasks_held",
    _0015._READY.replace("CREATE OR REPLACE VIEW", "CREATE VIEW", 1),
    "ALTER TABLE ledgerq_subscriptions DROP COLUMN sticky_route",
    "ALTER TABLE ledgerq_history DROP COLUMN sticky_until",
    "ALTER TABLE ledgerq_history DROP COLUMN sticky_worker",
    "ALTER TABLE ledgerq_tasks DROP COLUMN sticky_until",
    "ALTER TABLE ledgerq_tasks DROP COLUMN sticky_worker",
    "ALTER TABLE ledgerq_kinds DROP COLUMN sticky_s",
]


def upgrade() -> None:
    execute_all(_UPGRADE)


def downgrade() -> None:
    execute_all(_DOWNGRADE)
