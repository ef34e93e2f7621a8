"""``ledgerq_pick`` keeps one plan per session from its first call (issue 24).

PL/pgSQL prepares ``ledgerq_pick``'s query once per session and, by PostgreSQL's
default (``plan_cache_mode = auto``), plans it afresh for each of its first five
calls before it compares a generic plan with them. This query is large (three
scans per window, a de-duplication, three window functions, a token-bucket
update): planning it costs 10-12 ms, running it about 1.5-2.5 ms for 50 tasks
out of 20,000 (``psql``, twelve calls in one session, measured on the
development machine). Every new connection of a relay or a worker paid about
55 ms of server CPU before its claims got cheap, and a pool that hands out its
connections in turn paid it once per connection.

Its plan does not depend on the arguments: ``enable_sort = off`` makes every
scan follow its index's order, and the windows come in as one ``jsonb``
argument whose contents the planner cannot see either way. So the function now
takes the generic plan from its first call (``plan_cache_mode =
force_generic_plan``, set on the function like ``jit`` and ``enable_sort`` in
0014, so it applies whoever calls).

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-27
"""

from __future__ import annotations

from ledgerq.ledger.migrations.steps import execute_all

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

_PICK = "ledgerq_pick(jsonb, integer, float8, float8)"


def upgrade() -> None:
    execute_all([f"ALTER FUNCTION {_PICK} SET plan_cache_mode = force_generic_plan"])


def downgrade() -> None:
    execute_all([f"ALTER FUNCTION {_PICK} RESET plan_cache_mode"])
