"""Ledgers opened on their own, for what is not a service: the demo, the benchmark,
the dashboard, the operator's commands and the tests; and the pieces every
service's ledger shares (the one-database rule, the schema watch, the autovacuum
warning, the broker topology of a deployment).

:func:`open_ledger` opens one database of the ledger; with ledger shards a tool
that works on one database names it, or gets a one-line :class:`ConfigError`.
:func:`open_operator_ledger` opens every shard behind one
:class:`ShardedLedger`, so an operator finds and acts on any task wherever its
id put it."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Protocol, TypeVar

from ledgerq.broker.topology import Topology
from ledgerq.core.config import Settings
from ledgerq.core.errors import ConfigError, NotBuiltOnMySQLError
from ledgerq.ledger.pg import PgLedger
from ledgerq.ledger.pg.engines import async_engine
from ledgerq.ledger.pg.migrate import check_schema
from ledgerq.ledger.protocol import DashboardLedger
from ledgerq.ledger.split.ledger import OperatorLedger, ShardedLedger, ShardLedger
from ledgerq.runtime import SchemaWatch, watched

if TYPE_CHECKING:
    from ledgerq.ledger.mysql import MyLedger

log = logging.getLogger("ledgerq")
L = TypeVar("L")


def postgresql_only(settings: Settings, what: str) -> None:
    """Refuse ``what`` on a MySQL / MariaDB ledger, where it is not built yet
    (docs/guarantees.md, "On MySQL and MariaDB"): one line, exit 78."""
    if settings.on_mysql:
        raise NotBuiltOnMySQLError(
            f"{what}: not built on the MySQL ledger yet (what is: docs/guarantees.md, "
            "'On MySQL and MariaDB')"
        )


def one_shard(settings: Settings, shard: int | None, what: str) -> Settings:
    """The settings of ledger shard ``shard``; with None, of the only database, or a
    one-line :class:`ConfigError` naming ``what`` when the ledger is split."""
    if shard is None:
        if settings.ledger_shard_count > 1:
            raise ConfigError(
                f"{what} works on one ledger database, and LEDGERQ_DATABASE_URL lists "
                f"{settings.ledger_shard_count} (ledger shards): not supported yet with a "
                "split ledger (docs/howto.md, 'Split the ledger across databases')"
            )
        shard = 0
    return settings.ledger_shard(shard)


@asynccontextmanager
async def open_ledger(
    settings: Settings,
    application_name: str = "ledgerq",
    pool_size: int = 2,
    *,
    check: bool = True,
    shard: int | None = None,
    planner: tuple[str, ...] = (),
) -> AsyncIterator[PgLedger]:
    """The ledger of one database on its own (demo, benchmark, dashboard, tests):
    ledger shard ``shard``, or the only one. With ``check=False`` the schema is not
    checked first (tools that look at a broken ledger on purpose); ``planner``: a
    service's planner settings (ledger/pg/engines.py), for a tool that runs its
    statements."""
    postgresql_only(settings, f"`{application_name}`")
    database = one_shard(settings, shard, f"`{application_name}`")
    if check:
        check_schema(settings)
    ledger = PgLedger(
        async_engine(database, application_name, pool_size=pool_size, planner=planner)
    )
    try:
        yield ledger
    finally:
        await ledger.dispose()


@asynccontextmanager
async def open_dashboard_ledger(
    settings: Settings, application_name: str = "ledgerq-dashboard", pool_size: int = 6
) -> AsyncIterator[DashboardLedger]:
    """What the dashboard and its ledger gauges read and act through: one database's
    ledger (:func:`open_ledger`), or on a MySQL / MariaDB URL its one database
    (:class:`~ledgerq.ledger.mysql.MyLedger`), its schema checked first."""
    if not settings.on_mysql:
        async with open_ledger(settings, application_name, pool_size) as ledger:
            yield ledger
        return
    async with _open_mysql_dashboard_ledger(settings, application_name, pool_size) as mine:
        yield mine


@asynccontextmanager
async def open_operator_ledger(
    settings: Settings, application_name: str = "ledgerq", pool_size: int = 1
) -> AsyncIterator[OperatorLedger]:
    """What the operator's commands (``tasks``, ``stats``, ``show``, ``pause``, ``kinds``)
    act on: the ledger, every shard of it when it is split (:class:`ShardedLedger`),
    on either server (on MySQL / MariaDB: :func:`mysql_ledgers`)."""
    if settings.on_mysql:
        from ledgerq.ledger.mysql.migrate import check_schema as my_check_schema

        my_check_schema(settings)
        shards: list[ShardLedger] = list(mysql_ledgers(settings, application_name, pool_size))
    else:
        check_schema(settings)
        shards = [
            PgLedger(async_engine(database, application_name, pool_size=pool_size))
            for database in settings.ledger_shards()
        ]
    ledger: OperatorLedger = shards[0] if len(shards) == 1 else ShardedLedger(shards)
    try:
        yield ledger
    finally:
        await ledger.dispose()


def mysql_ledgers(settings: Settings, application_name: str, pool_size: int) -> list[MyLedger]:
    """One :class:`~ledgerq.ledger.mysql.MyLedger` per ledger shard of a MySQL / MariaDB
    URL list, in shard order (the MySQL modules imported only here: a PostgreSQL
    process never loads them). What is not built there (docs/guarantees.md, "On
    MySQL and MariaDB") raises :class:`NotBuiltOnMySQLError` when asked, before
    it touches anything."""
    from ledgerq.ledger.mysql import MyLedger  # a MySQL URL only
    from ledgerq.ledger.mysql import engines as my_engines

    return [
        MyLedger(my_engines.async_engine(database, application_name, pool_size=pool_size))
        for database in settings.ledger_shards()
    ]


@asynccontextmanager
async def _open_mysql_dashboard_ledger(
    settings: Settings, application_name: str, pool_size: int
) -> AsyncIterator[MyLedger]:
    """The dashboard's ledger on MySQL / MariaDB: its one database
    (:mod:`ledgerq.ledger.mysql.overview`), its schema checked first."""
    from ledgerq.ledger.mysql.migrate import check_schema as my_check_schema

    database = one_shard(settings, None, f"`{application_name}`")
    my_check_schema(database)
    [mine] = mysql_ledgers(database, application_name, pool_size)
    try:
        yield mine
    finally:
        await mine.dispose()


class VacuumCheck(Protocol):
    async def autovacuum_off(self) -> list[str]: ...


async def warn_if_no_autovacuum(ledger: VacuumCheck) -> None:
    """Every service says, once it has started (so a start that fails prints only
    its one line), when autovacuum will not clean the hot table:
    without it each claim and finish leaves a dead tuple, and the table bloats
    (docs/performance.md § The hot table under churn)."""
    for reason in await ledger.autovacuum_off():
        log.warning(
            "%s: the hot table will bloat under churn; turn autovacuum on "
            "(see docs/performance.md, 'The hot table under churn')",
            reason,
        )


def schema_watched(ledger: L, watch: SchemaWatch | None) -> L:
    """A service's ledger that reports a lost schema to ``watch`` (None: as it is)."""
    return ledger if watch is None else watched(ledger, watch)


def topology(settings: Settings) -> Topology:
    """The broker objects and messages of this deployment (its prefix, its queue type)."""
    return Topology(settings.amqp_prefix, settings.queue_type)
