"""The Celery peer's named SQL (``peer.sql``), for :mod:`.peer` and :mod:`.celery_app`."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import TextClause

from ledgerq.ledger.sql import load


@dataclass(frozen=True)
class PeerQueries:
    create_table: TextClause
    reset: TextClause
    count: TextClause
    drain_span: TextClause
    insert: TextClause


Q: PeerQueries = load(PeerQueries, "ledgerq.bench", "peer.sql")
