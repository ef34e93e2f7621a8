"""Ledger shards for tests: N databases on the test server, next to the suite's own.

Their names are the test database's plus ``_s1``, ``_s2``, ... (the fault
suite's ``_f1``, ...); each is dropped,
created and migrated (as ``ledgerq migrate`` does, with the whole list) once
per test session, and emptied through the storage seam before each test. The
MariaDB ones (:func:`create_my_shards`, :func:`empty_my`) sit beside the
suite's MariaDB database (``<name>_my_s1``, ...), on its server.
"""

from __future__ import annotations

from dataclasses import replace

from sqlalchemy.engine import make_url

from ledgerq.compose import open_ledger
from ledgerq.compose.storage import async_engine
from ledgerq.core.config import Settings
from ledgerq.ledger.mysql import MyLedger
from ledgerq.ledger.mysql.migrate import upgrade as my_upgrade
from ledgerq.ledger.pg.migrate import upgrade
from tests import mariadb
from tests.conftest import recreate_database


def shard_urls(base: Settings, count: int, tag: str = "s") -> list[str]:
    url = make_url(base.database_url)
    return [
        url.set(database=f"{url.database}_{tag}{k + 1}").render_as_string(hide_password=False)
        for k in range(count)
    ]


def create_shards(base: Settings, count: int, tag: str = "s") -> Settings:
    """``base`` over ``count`` fresh, migrated shard databases (``<test db>_<tag>1``...)."""
    urls = shard_urls(base, count, tag)
    for url in urls:
        recreate_database(url)
    sharded = replace(base, database_url=",".join(urls))
    upgrade(sharded)
    return sharded


async def empty(settings: Settings) -> None:
    for shard in range(settings.ledger_shard_count):
        async with open_ledger(settings, "ledgerq-test-setup", pool_size=1, shard=shard) as ledger:
            await ledger.truncate()


def create_my_shards(my_base: Settings, count: int, tag: str = "s") -> Settings:
    """``my_base`` (the suite's MariaDB ledger) over ``count`` fresh shard databases on
    its server (``<its db>_<tag>1``...), migrated as ``ledgerq migrate`` does."""
    urls = shard_urls(my_base, count, tag)
    for url in urls:
        mariadb.recreate(url)
    sharded = replace(my_base, database_url=",".join(urls))
    my_upgrade(sharded)
    return sharded


async def empty_my(settings: Settings) -> None:
    """Every MariaDB shard emptied through the storage seam (DELETE: the ids keep
    their shard's range)."""
    for shard in settings.ledger_shards():
        ledger = MyLedger(async_engine(shard, "ledgerq-test-setup", pool_size=1))
        try:
            await ledger.truncate()
        finally:
            await ledger.dispose()


def drop_my(settings: Settings) -> None:
    for url in settings.database_urls:
        mariadb.recreate(url)  # drops it (`ledgerq migrate` would create it again)
