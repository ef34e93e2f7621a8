"""The Django project (tests/django_project/) on MariaDB (issue 29): Django's MySQL
backend (``SHOP_DB_ENGINE=mysql``; on PyMySQL installed as ``MySQLdb`` when
mysqlclient is not installed, as here), the ledger in the same database.

Every step is a real process on a MariaDB database of the test's own:
``manage.py ledgerq migrate`` (which creates the database; the ledger's URL comes
from ``DATABASES``) and Django's ``migrate``; then an order and its task in one
``transaction.atomic()`` (``enqueue(django.db.connection, ...)``, the raw DB-API
connection under Django's), once committed (with one more task in a nested block
that fails: its savepoint takes it back) and once rolled back. Exactly one task
row exists afterwards, the committed one, beside exactly one order. Then
``manage.py ledgerq worker --direct`` (no broker: the AMQP URL is a closed port)
runs it: the shop's handler writes the receipt through Django's ORM.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pymysql
import pytest
from sqlalchemy.engine import make_url

from tests.conftest import TEST_DATABASE_URL
from tests.integration.test_django import PROJECT, stop, wait_for
from tests.mariadb import mariadb_url, recreate


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again once this block ends


class MariaShop:
    """The Django project's ``manage.py`` on a MariaDB database of its own."""

    def __init__(self) -> None:
        url = make_url(mariadb_url(TEST_DATABASE_URL))
        self.url = url.set(database=f"{url.database}_django")
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("LEDGERQ_")},
            "DJANGO_SETTINGS_MODULE": "shop_site.settings",
            "SHOP_DB_ENGINE": "mysql",
            "SHOP_DB_NAME": str(self.url.database),
            "SHOP_DB_HOST": self.url.host or "127.0.0.1",
            "SHOP_DB_PORT": str(self.url.port or 3306),
            "SHOP_DB_USER": self.url.username or "root",
            "SHOP_DB_PASSWORD": self.url.password or "",
            "SHOP_AMQP_URL": f"amqp://guest:guest@127.0.0.1:{_closed_port()}/",
            "SHOP_AMQP_PREFIX": f"lqtest.{uuid.uuid4().hex[:10]}",
        }

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=PROJECT,
            env=self.env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    def ok(self, *args: str) -> str:
        done = self.run(*args)
        assert done.returncode == 0, f"manage.py {' '.join(args)}: {done.stdout}{done.stderr}"
        return done.stdout

    def spawn(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "manage.py", *args],
            cwd=PROJECT,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def query(self, sql: str) -> list[tuple[Any, ...]]:
        with (
            pymysql.connect(
                host=self.url.host or "127.0.0.1",
                port=self.url.port or 3306,
                user=self.url.username or "root",
                password=self.url.password or "",
                database=self.url.database,
                autocommit=True,
            ) as conn,
            conn.cursor() as cursor,
        ):
            cursor.execute(sql)
            return [tuple(row) for row in cursor.fetchall()]


@pytest.fixture
def shop() -> Iterator[MariaShop]:
    shop = MariaShop()
    recreate(shop.url.render_as_string(False))
    yield shop
    recreate(shop.url.render_as_string(False))


def test_a_django_project_on_mariadb_enqueues_in_its_atomic_block(shop: MariaShop) -> None:
    # The ledger (and the database itself) from DATABASES, then Django's own tables.
    shop.ok("ledgerq", "migrate")
    shop.ok("migrate", "--no-input")
    config = json.loads(shop.ok("ledgerq", "config", "--json"))
    assert config["database_url"]["value"].startswith("mysql+pymysql://"), config
    assert shop.query("SELECT COUNT(*) FROM ledgerq_tasks") == [(0,)]

    # Committed: the order and its task; the failed savepoint's task is taken back.
    committed = json.loads(shop.ok("place_order", "ada@example.com", "--also-in-failed-savepoint"))
    # Rolled back: neither the order nor its task.
    failed = shop.run("place_order", "bob@example.com", "--fail-after-enqueue")
    assert failed.returncode == 1 and "the business failed after enqueue" in failed.stderr
    rolled_back = json.loads(failed.stdout)

    ids = {committed["task_id"], committed["dropped_id"], rolled_back["task_id"]}
    assert len(ids) == 3, (committed, rolled_back)  # each enqueue had an id of its own
    assert shop.query("SELECT email FROM shop_order") == [("ada@example.com",)]
    rows = shop.query("SELECT id, kind, payload, status FROM ledgerq_tasks")
    assert [(i, k, json.loads(p), s) for i, k, p, s in rows] == [
        (
            committed["task_id"],
            "shop.send_receipt",
            {"order_id": committed["order_id"]},
            "pending",
        )
    ]

    # A direct worker (no broker) runs it; the handler writes through Django's ORM.
    worker = shop.spawn("ledgerq", "worker", "--direct", "--concurrency", "2")
    try:
        wait_for(
            "the committed task's handler writes its receipt",
            lambda: bool(shop.query("SELECT 1 FROM shop_receipt")),
        )
    finally:
        code, out = stop(worker)
    assert code == 0, out
    assert shop.query("SELECT order_id, task_id FROM shop_receipt") == [
        (committed["order_id"], committed["task_id"])
    ]
