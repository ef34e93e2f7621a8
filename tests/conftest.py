"""Fixtures shared by every test: a real PostgreSQL database and a real RabbitMQ.

The suite uses its own database (``ledgerq_test`` unless
``LEDGERQ_TEST_DATABASE_URL`` says otherwise), dropped and migrated once per
run, and emptied (through the storage seam) before each test. Every test gets
its own AMQP prefix, so its exchanges and queues never meet another test's;
they are deleted afterwards. ``ledger`` is the storage seam itself
(:class:`~ledgerq.ledger.pg.PgLedger`, from the composition root), for tests
that look a task up.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace

import pika
import psycopg
import pytest
from psycopg import sql
from sqlalchemy.engine import make_url

from ledgerq.broker.topology import Topology
from ledgerq.compose import open_ledger
from ledgerq.core.config import Settings
from ledgerq.core.settings_table import DEFAULT_AMQP_URL, DEFAULT_DATABASE_URL
from ledgerq.ledger.pg import PgLedger
from ledgerq.ledger.pg.engines import libpq_url
from ledgerq.ledger.pg.migrate import upgrade
from ledgerq.ledger.routing import routing_key
from tests import mariadb

# The suite's own database: LEDGERQ_TEST_DATABASE_URL, else the configured server
# with the database name "ledgerq_test" (never the configured database itself).
TEST_DATABASE_URL = os.environ.get("LEDGERQ_TEST_DATABASE_URL") or make_url(
    os.environ.get("LEDGERQ_DATABASE_URL", DEFAULT_DATABASE_URL)
).set(database="ledgerq_test").render_as_string(hide_password=False)
TEST_AMQP_URL = os.environ.get("LEDGERQ_TEST_AMQP_URL") or os.environ.get(
    "LEDGERQ_AMQP_URL", DEFAULT_AMQP_URL
)
#: Ledger queue names tests may use; their broker queues are deleted after each test.
TEST_QUEUES = ("default", "other", "nowhere")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--long", action="store_true", help="run the long fault-injection runs")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--long"):
        return
    skip = pytest.mark.skip(reason="long run: pass --long")
    for item in items:
        if "long" in item.keywords:
            item.add_marker(skip)


def recreate_database(url: str) -> None:
    name = make_url(url).database
    assert name, "the test database URL needs a database name"
    maintenance = libpq_url(make_url(url).set(database="postgres").render_as_string(False))
    with psycopg.connect(maintenance, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def drop_database(url: str) -> None:
    name = make_url(url).database
    assert name
    maintenance = libpq_url(make_url(url).set(database="postgres").render_as_string(False))
    with psycopg.connect(maintenance, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


@pytest.fixture(scope="session")
def base_settings() -> Settings:
    settings = Settings(database_url=TEST_DATABASE_URL, amqp_url=TEST_AMQP_URL)
    recreate_database(settings.database_url)
    upgrade(settings)
    return settings


@pytest.fixture(scope="session")
def mariadb_settings(base_settings: Settings) -> Settings:
    """The suite's MariaDB ledger (tests/mariadb.py: the server scripts/lib.sh starts,
    a database named after the PostgreSQL one), dropped and migrated once a session."""
    return mariadb.migrated(base_settings)


def routed_queues(settings: Settings) -> list[str]:
    """The routed broker queues (``queue@route``) the ledger's subscriptions name:
    the workers' own, which a test's prefix makes private to it."""
    with psycopg.connect(libpq_url(settings.database_url), autocommit=True) as conn:
        rows = conn.execute(
            "SELECT DISTINCT queue, route FROM ledgerq_subscriptions WHERE route IS NOT NULL"
        ).fetchall()
    return [routing_key(queue, route) for queue, route in rows]


def delete_broker_objects(settings: Settings, routed: Sequence[str] = ()) -> None:
    topology = Topology(settings.amqp_prefix)
    connection = pika.BlockingConnection(pika.URLParameters(settings.amqp_url))
    try:
        channel = connection.channel()
        for name in (*TEST_QUEUES, *routed):
            channel.queue_delete(topology.task_queue(name).name)
        channel.queue_delete(topology.dead_letter_queue.name)
        channel.exchange_delete(topology.exchange.name)
        channel.exchange_delete(topology.dead_letter_exchange.name)
    finally:
        connection.close()


@pytest.fixture
async def settings(base_settings: Settings) -> AsyncIterator[Settings]:
    """An empty ledger, no test tables, and a private AMQP prefix for one test."""
    async with open_ledger(base_settings, "ledgerq-test-setup", pool_size=1) as ledger:
        await ledger.truncate()
    # The tests' own tables (not the ledger's).
    with psycopg.connect(libpq_url(base_settings.database_url), autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS ledgerq_demo_receipts, test_effects")
    current = replace(base_settings, amqp_prefix=f"lqtest.{uuid.uuid4().hex[:10]}")
    yield current
    delete_broker_objects(current, routed_queues(current))


@pytest.fixture
async def ledger(settings: Settings) -> AsyncIterator[PgLedger]:
    """The storage seam, as the composition root opens it, for looking tasks up."""
    async with open_ledger(settings, "ledgerq-test", pool_size=2) as opened:
        yield opened
