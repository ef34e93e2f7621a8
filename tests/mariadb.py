"""The tests' MariaDB (or MySQL) ledger: the server scripts/lib.sh starts (or any at
``LEDGERQ_TEST_MARIADB_URL``), and a database of the suite's own on it, named after
the PostgreSQL test database (``<name>_my``), dropped and migrated once per run."""

from __future__ import annotations

import os

import pymysql
from sqlalchemy.engine import make_url

from ledgerq.core.config import Settings
from ledgerq.ledger.mysql.migrate import upgrade

DEFAULT_SERVER = "mariadb+pymysql://root@127.0.0.1:3306"


def mariadb_url(postgres_url: str) -> str:
    """The suite's MariaDB database URL beside the PostgreSQL one ``postgres_url``."""
    given = os.environ.get("LEDGERQ_TEST_MARIADB_URL")
    if given:
        return given
    name = make_url(postgres_url).database or "ledgerq_test"
    return f"{DEFAULT_SERVER}/{name}_my"


def recreate(url: str) -> None:
    """Drop the database of ``url`` if it exists (``ledgerq migrate`` creates it)."""
    parts = make_url(url)
    assert parts.database, "the MariaDB test URL needs a database name"
    with (
        pymysql.connect(
            host=parts.host or "127.0.0.1",
            port=parts.port or 3306,
            user=parts.username or "root",
            password=parts.password or "",
            autocommit=True,
        ) as conn,
        conn.cursor() as cursor,
    ):
        cursor.execute(f"DROP DATABASE IF EXISTS `{parts.database}`")


def migrated(base: Settings) -> Settings:
    """Settings of the suite's MariaDB ledger (beside ``base``'s PostgreSQL one),
    its database dropped and migrated afresh."""
    settings = Settings(database_url=mariadb_url(base.database_url), amqp_url=base.amqp_url)
    recreate(settings.database_url)
    upgrade(settings)
    return settings
