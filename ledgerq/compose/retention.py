"""Retention's ledger, composed: what ``ledgerq purge`` (:func:`ledgerq.admin.purge`)
acts on, for either server. On PostgreSQL the ledger of the one database
(:func:`~ledgerq.compose.ledgers.open_ledger`); on MySQL / MariaDB the MySQL
ledger (its retention: ledger/mysql/retention.py), its schema checked first,
the MySQL modules imported only then (a PostgreSQL process never loads them).
On a split ledger, either server, one line (``one_shard``): not supported yet."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from ledgerq.compose.ledgers import mysql_ledgers, one_shard, open_ledger
from ledgerq.core.config import Settings
from ledgerq.ledger.protocol import RetentionLedger


@asynccontextmanager
async def open_retention_ledger(
    settings: Settings, application_name: str = "ledgerq", pool_size: int = 1
) -> AsyncIterator[RetentionLedger]:
    """The ledger retention removes finished tasks from, for ``settings``' URL."""
    if not settings.on_mysql:
        async with open_ledger(settings, application_name, pool_size=pool_size) as ledger:
            yield ledger
        return
    from ledgerq.ledger.mysql.migrate import check_schema as my_check_schema  # a MySQL URL only

    database = one_shard(settings, None, f"`{application_name}`")  # as open_ledger's
    my_check_schema(database)
    [mine] = mysql_ledgers(database, application_name, pool_size)
    try:
        yield mine
    finally:
        await mine.dispose()
