"""The PostgreSQL side of the storage seam: :class:`PgLedger`, the engines it
runs on, LISTEN/NOTIFY wake-ups and migrations. The only part of ``ledger``
that imports psycopg."""

from __future__ import annotations

from ledgerq.ledger.pg.inspection import PgInspection
from ledgerq.ledger.pg.services import PgServices


class PgLedger(PgServices, PgInspection):
    """:class:`~ledgerq.ledger.protocol.Ledger` on PostgreSQL, over one async engine."""


__all__ = ["PgLedger"]
