"""The PostgreSQL side of the storage seam: :class:`PgLedger`, the engines it
runs on, LISTEN/NOTIFY wake-ups and migrations. The only part of ``ledger``
that imports psycopg."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ledgerq.ledger.pg.harness import PgHarness
from ledgerq.ledger.pg.inspection import PgInspection
from ledgerq.ledger.pg.operations import PgOperations
from ledgerq.ledger.pg.overview import PgOverview
from ledgerq.ledger.pg.retention import PgRetention
from ledgerq.ledger.pg.scheduling import PgScheduling
from ledgerq.ledger.pg.services import PgServices

if TYPE_CHECKING:
    from ledgerq.ledger.protocol import LedgerWithHarness


class PgLedger(
    PgServices, PgInspection, PgRetention, PgOperations, PgScheduling, PgOverview, PgHarness
):
    """:class:`~ledgerq.ledger.protocol.Ledger` on PostgreSQL, over one async engine, and
    the testing protocol (:class:`~ledgerq.ledger.protocol.HarnessLedger`)."""


if TYPE_CHECKING:
    # mypy checks PgLedger against the whole seam and its testing part
    _implements: type[LedgerWithHarness] = PgLedger


__all__ = ["PgLedger"]
