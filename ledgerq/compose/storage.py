"""The storage and broker parts handed to what is not a service: ``ledgerq
migrate``, the demo, the benchmark, the dashboard and the testing helper.

Only the composition root names a driver (import-linter's "Only the
composition root builds concrete ledgers and brokers"): the rest of the code
holds the storage seam's protocols (:mod:`ledgerq.ledger.protocol`) and the
broker seam's (:mod:`ledgerq.broker.base`). A tool that needs an engine, the
schema migrated or a ledger on an engine it opened asks here, so the day a
second driver lands the choice by URL is made in this one module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ledgerq.broker.aio import connect as amqp_connect
from ledgerq.ledger.pg import PgLedger
from ledgerq.ledger.pg.engines import (
    RELAY_PLANNER,
    WORKER_PLANNER,
    async_engine,
    libpq_url,
    sync_engine,
)
from ledgerq.ledger.pg.migrate import check_revision, current_revision, upgrade
from ledgerq.ledger.pg.waiters import registry as waiters_registry

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine


def ledger_on(engine: AsyncEngine) -> PgLedger:
    """The ledger on an engine the caller opened (and disposes of)."""
    return PgLedger(engine)


__all__ = [
    "RELAY_PLANNER",
    "WORKER_PLANNER",
    "amqp_connect",
    "async_engine",
    "check_revision",
    "current_revision",
    "ledger_on",
    "libpq_url",
    "sync_engine",
    "upgrade",
    "waiters_registry",
]
