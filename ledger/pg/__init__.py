"""The PostgreSQL side of the storage seam: :class:`PgLedger`, the engines it
runs on, LISTEN/NOTIFY wake-ups and migrations. The only part of ``ledger``
that imports psycopg."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ledgerq.ledger.pg.inspection import PgInspection
from ledgerq.ledger.pg.operations import PgOperations
from ledgerq.ledger.pg.overview import PgOverview
from ledgerq.ledger.pg.retention import PgRetention
from ledgerq.ledger.pg.scheduling import PgScheduling
from ledgerq.ledger.pg.services import PgServices

if TYPE_CHECKING:
    from ledgerq.ledger.protocol import Ledger


class PgLedger(PgServices, PgInspection, PgRetention, PgOperations, PgScheduling, PgOverview):
    """:class:`~ledgerq.ledger.protocol.Ledger` on PostgreSQL, over one async engine."""


if TYPE_CHECKING:
    _implements: type[Ledger] = PgLedger  # mypy checks PgLedger against the whole seam


__all__ = ["PgLedger"]
