"""The named statements of ``testing.sql``, loaded as :class:`HelperQueries`."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import TextClause

from ledgerq.ledger.sql import load


@dataclass(frozen=True)
class HelperQueries:
    """``ledgerq/testing/testing.sql``: what the test helpers read and move."""

    enqueued: TextClause
    due_kinds: TextClause
    next_due_in: TextClause
    advance: TextClause
    newest_pending: TextClause
    existing: TextClause


TQ = load(HelperQueries, "ledgerq.testing", "testing.sql")
