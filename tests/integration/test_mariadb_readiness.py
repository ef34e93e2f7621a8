"""A service's readiness on the MySQL ledger names the server as the URL does
(issue 29): "MariaDB: ..." on a ``mariadb+pymysql://`` URL, "MySQL: ..." on a
``mysql+pymysql://`` one, never "PostgreSQL: ...". Checked through a real
:class:`~ledgerq.health.Health` watching a real MySQL ledger on the local MariaDB:
migrated (ready), an empty database (the tables are missing), a database that does
not exist (the server's error)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import pymysql
import pytest
from sqlalchemy.engine import make_url

from ledgerq.compose.monitoring import server_name, watch_readiness
from ledgerq.compose.storage import async_engine
from ledgerq.core.config import Settings
from ledgerq.health import Health
from ledgerq.ledger.mysql import MyLedger


def _admin(settings: Settings, statement: str) -> None:
    url = make_url(settings.database_url)
    with (
        pymysql.connect(
            host=url.host or "127.0.0.1",
            port=url.port or 3306,
            user=url.username or "root",
            password=url.password or "",
            autocommit=True,
        ) as conn,
        conn.cursor() as cursor,
    ):
        cursor.execute(statement)


def _on(settings: Settings, scheme: str, database: str) -> Settings:
    url = make_url(settings.database_url).set(drivername=scheme, database=database)
    return Settings(database_url=url.render_as_string(False), amqp_url=settings.amqp_url)


@asynccontextmanager
async def _watched(settings: Settings) -> AsyncIterator[Health]:
    """A Health watching the readiness of a direct worker (no broker) on ``settings``."""
    health = Health()
    ledger = MyLedger(async_engine(settings, "ledgerq-test-readiness", pool_size=1))
    try:
        watch_readiness(health, ledger, None, lambda: None, database_url=settings.database_url)
        yield health
    finally:
        await health.close()
        await ledger.dispose()


async def _settled(health: Health, done: Callable[[str], bool], timeout: float = 20.0) -> str:
    """What /readyz says once it is no longer "starting" (and ``done`` holds)."""
    deadline = time.monotonic() + timeout
    while True:
        _, problem = health.ready()
        if not problem.startswith("starting") and done(problem):
            return problem
        if time.monotonic() > deadline:
            raise AssertionError(f"readiness not settled within {timeout:.0f} s: {problem!r}")
        await asyncio.sleep(0.05)


def test_the_server_is_named_by_the_url_dialect() -> None:
    assert server_name("mariadb+pymysql://root@127.0.0.1/x") == "MariaDB"
    assert server_name("mysql+pymysql://root@127.0.0.1/x") == "MySQL"
    assert server_name("postgresql+psycopg://postgres@127.0.0.1/x") == "PostgreSQL"
    assert server_name("postgresql://a/x,postgresql://b/y") == "PostgreSQL"


async def test_a_migrated_mariadb_ledger_is_ready(mariadb_settings: Settings) -> None:
    async with _watched(mariadb_settings) as health:
        assert await _settled(health, lambda _: True) == "ready"


@pytest.mark.parametrize(
    ("scheme", "server"), [("mariadb+pymysql", "MariaDB"), ("mysql+pymysql", "MySQL")]
)
async def test_readiness_names_the_mysql_server(
    mariadb_settings: Settings, scheme: str, server: str
) -> None:
    empty = f"{make_url(mariadb_settings.database_url).database}_unmigrated"
    _admin(mariadb_settings, f"DROP DATABASE IF EXISTS `{empty}`")
    _admin(mariadb_settings, f"CREATE DATABASE `{empty}`")
    try:
        async with _watched(_on(mariadb_settings, scheme, empty)) as health:
            problem = await _settled(health, lambda _: True)
        assert problem == f"{server}: the ledger's tables are missing (run `ledgerq migrate`)"
    finally:
        _admin(mariadb_settings, f"DROP DATABASE IF EXISTS `{empty}`")
    missing = f"{make_url(mariadb_settings.database_url).database}_never_created"
    async with _watched(_on(mariadb_settings, scheme, missing)) as health:
        problem = await _settled(health, lambda _: True)
    assert problem.startswith(f"{server}: "), problem
    assert "PostgreSQL" not in problem and "Unknown database" in problem, problem
