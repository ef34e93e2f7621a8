"""The storage and broker parts handed to what is not a service: ``ledgerq
migrate``, the demo, the benchmark, the dashboard and the testing helper.

Only the composition root names a driver (import-linter's "Only the
composition root builds concrete ledgers and brokers"): the rest of the code
holds the storage seam's protocols (:mod:`ledgerq.ledger.protocol`) and the
broker seam's (:mod:`ledgerq.broker.base`). A tool that needs an engine, the
schema migrated or a ledger on an engine it opened asks here, and the URL picks
the implementation here: PostgreSQL (:mod:`ledgerq.ledger.pg`) or MySQL /
MariaDB (:mod:`ledgerq.ledger.mysql`, ``Settings.on_mysql``). The MySQL
modules are imported inside the branches that need them, so a PostgreSQL
process never loads the MySQL drivers (tests/unit/test_mysql_settings.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ledgerq.broker.aio import connect as amqp_connect
from ledgerq.core.config import Settings
from ledgerq.ledger.pg import PgLedger
from ledgerq.ledger.pg import engines as pg_engines
from ledgerq.ledger.pg import migrate as pg_migrate
from ledgerq.ledger.pg.engines import RELAY_PLANNER, WORKER_PLANNER, libpq_url
from ledgerq.ledger.pg.waiters import registry as waiters_registry

if TYPE_CHECKING:
    from sqlalchemy import Engine
    from sqlalchemy.ext.asyncio import AsyncEngine

    from ledgerq.ledger.mysql import MyLedger

MYSQL_DIALECTS = frozenset({"mysql", "mariadb"})


def own_ledger_on(engine: AsyncEngine) -> PgLedger | MyLedger:
    """The ledger on an engine the caller opened (and disposes of), on either
    server: the demo's, the benchmark's and the testing helper's."""
    if engine.dialect.name in MYSQL_DIALECTS:
        from ledgerq.ledger.mysql import MyLedger  # a MySQL engine only

        return MyLedger(engine)
    return PgLedger(engine)


def waiter_counts(settings: Settings) -> tuple[int, int]:
    """The reads and notifications this process's ``result()`` waiters on the
    ledger of ``settings`` have taken so far (``ledgerq bench --results``). On
    PostgreSQL, its waiters' registry's (made with ``poll_s`` 1 s if it is new);
    on MySQL, where each waiter polls alone and nothing notifies, every waiter's
    reads and no notification."""
    if settings.on_mysql:
        from ledgerq.ledger.mysql.results import READS  # a MySQL URL only

        return READS.n, 0
    registry = waiters_registry(libpq_url(settings.database_url), 1.0)
    return registry.reads, registry.notifications


def sync_engine(settings: Settings, application_name: str, pool_size: int = 5) -> Engine:
    """A sync engine on the ledger, set up as ledgerq's own connections are."""
    if settings.on_mysql:
        from ledgerq.ledger.mysql import engines as my_engines  # a MySQL URL only

        return my_engines.sync_engine(settings, application_name, pool_size)
    return pg_engines.sync_engine(settings, application_name, pool_size)


def async_engine(
    settings: Settings,
    application_name: str,
    pool_size: int = 5,
    *,
    planner: tuple[str, ...] = (),
) -> AsyncEngine:
    """An async engine on the ledger (``planner``: PostgreSQL's planner settings)."""
    if settings.on_mysql:
        from ledgerq.ledger.mysql import engines as my_engines  # a MySQL URL only

        return my_engines.async_engine(settings, application_name, pool_size)
    return pg_engines.async_engine(settings, application_name, pool_size, planner=planner)


def check_revision(revision: str, settings: Settings | None = None) -> None:
    """Raise ValueError unless ``revision`` names a migration of the ledger's history
    (the MySQL one for a MySQL URL)."""
    if settings is not None and settings.on_mysql:
        from ledgerq.ledger.mysql import migrate as my_migrate  # a MySQL URL only

        my_migrate.check_revision(revision)
    else:
        pg_migrate.check_revision(revision)


def upgrade(settings: Settings, revision: str = "head") -> None:
    """``ledgerq migrate``: create the database if missing, migrate it to ``revision``."""
    if settings.on_mysql:
        from ledgerq.ledger.mysql import migrate as my_migrate  # a MySQL URL only

        my_migrate.upgrade(settings, revision)
    else:
        pg_migrate.upgrade(settings, revision)


def current_revision(settings: Settings) -> str | None:
    if settings.on_mysql:
        from ledgerq.ledger.mysql import migrate as my_migrate  # a MySQL URL only

        return my_migrate.current_revision(settings)
    return pg_migrate.current_revision(settings)


def check_schema(settings: Settings) -> str:
    """Every command's start check: the server reachable (and, on MySQL, recent
    enough), the schema at this ledgerq's head."""
    if settings.on_mysql:
        from ledgerq.ledger.mysql import migrate as my_migrate  # a MySQL URL only

        return my_migrate.check_schema(settings)
    return pg_migrate.check_schema(settings)


__all__ = [
    "RELAY_PLANNER",
    "WORKER_PLANNER",
    "amqp_connect",
    "async_engine",
    "check_revision",
    "check_schema",
    "current_revision",
    "libpq_url",
    "sync_engine",
    "upgrade",
    "waiter_counts",
]
