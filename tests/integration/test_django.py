"""A real Django project (tests/django_project/) running ledgerq through ``manage.py``.

The project has ledgerq in ``INSTALLED_APPS``, its settings in ``settings.LEDGERQ``
and a ``shop`` app with a model and a ``tasks.py``. Every step is a real process
on a database of the test's own: ``manage.py ledgerq migrate`` (which creates that
database) and Django's ``migrate``; an order and its task in one
``transaction.atomic()`` (``enqueue(django.db.connection, ...)``), once committed
and once rolled back; then ``manage.py ledgerq relay`` and ``manage.py ledgerq
worker`` (no ``--app``: the shop's tasks.py is discovered). The committed task's
handler writes the receipt, and the rolled-back task never exists.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy.engine import make_url

from ledgerq.core.config import Settings
from ledgerq.ledger.pg.engines import libpq_url
from tests.conftest import (
    TEST_AMQP_URL,
    TEST_DATABASE_URL,
    delete_broker_objects,
    drop_database,
    routed_queues,
)

PROJECT = Path(__file__).resolve().parents[1] / "django_project"


class Shop:
    """The Django project's ``manage.py``, on its own database and AMQP prefix."""

    def __init__(self) -> None:
        url = make_url(TEST_DATABASE_URL)
        self.url = url.set(database=f"{url.database}_django").render_as_string(False)
        self.prefix = f"lqtest.{uuid.uuid4().hex[:10]}"
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("LEDGERQ_")},
            "DJANGO_SETTINGS_MODULE": "shop_site.settings",
            "SHOP_DB_NAME": str(url.database) + "_django",
            "SHOP_DB_HOST": url.host or "",
            "SHOP_DB_PORT": str(url.port or ""),
            "SHOP_DB_USER": url.username or "",
            "SHOP_DB_PASSWORD": url.password or "",
            "SHOP_AMQP_URL": TEST_AMQP_URL,
            "SHOP_AMQP_PREFIX": self.prefix,
        }
        self.settings = Settings(
            database_url=self.url, amqp_url=TEST_AMQP_URL, amqp_prefix=self.prefix
        )

    def command(self, *args: str) -> list[str]:
        return [sys.executable, "manage.py", *args]

    def run(self, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.command(*args),
            cwd=PROJECT,
            env={**self.env, **extra},
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
            self.command(*args),
            cwd=PROJECT,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def query(self, sql: str) -> list[tuple[Any, ...]]:
        with psycopg.connect(libpq_url(self.url), autocommit=True) as conn:
            return conn.execute(sql).fetchall()


@pytest.fixture
def shop() -> Iterator[Shop]:
    shop = Shop()
    drop_database(shop.url)
    yield shop
    with contextlib.suppress(psycopg.Error):  # (never migrated: nothing was declared)
        delete_broker_objects(shop.settings, routed_queues(shop.settings))
    drop_database(shop.url)


def wait_for(what: str, check: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:.0f} s: {what}")
        time.sleep(0.2)


def stop(proc: subprocess.Popen[str]) -> tuple[int, str]:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        out, _ = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
    return proc.returncode, out


def test_a_django_project_runs_ledgerq_through_manage_py(shop: Shop) -> None:
    # ledgerq's schema (and the database itself), then Django's own migrations.
    shop.ok("ledgerq", "migrate")
    shop.ok("migrate", "--no-input")
    assert "No changes detected" in shop.ok("makemigrations", "--check", "--dry-run")
    applied = {app for (app,) in shop.query("SELECT DISTINCT app FROM django_migrations")}
    assert applied == {"shop"}  # ledgerq's tables are not Django's to migrate
    assert shop.query("SELECT to_regclass('ledgerq_tasks') IS NOT NULL") == [(True,)]

    # The settings: the ledger's URL from DATABASES, the rest from settings.LEDGERQ.
    config = json.loads(shop.ok("ledgerq", "config", "--json"))
    assert config["database_url"]["value"] == shop.url
    assert config["amqp_prefix"]["value"] == shop.prefix

    # An order and its task commit together, a failed savepoint takes its task back,
    # and a failed block takes back both.
    committed = json.loads(shop.ok("place_order", "ada@example.com", "--also-in-failed-savepoint"))
    failed = shop.run("place_order", "bob@example.com", "--fail-after-enqueue")
    assert failed.returncode == 1 and "the business failed after enqueue" in failed.stderr
    rolled_back = json.loads(failed.stdout)
    assert shop.query("SELECT email FROM shop_order") == [("ada@example.com",)]

    relay = shop.spawn("ledgerq", "relay", "--poll-interval", "0.2")
    worker = shop.spawn("ledgerq", "worker", "--concurrency", "2")
    try:
        wait_for(
            "the committed task's handler writes its receipt",
            lambda: bool(shop.query("SELECT 1 FROM shop_receipt")),
        )
        # result() with Django's connection waits for the end (the bind enqueue took)
        ended = json.loads(shop.ok("wait_result", str(committed["task_id"])))
        assert ended["status"] == "succeeded", ended
    finally:
        (relay_code, relay_out), (worker_code, worker_out) = stop(relay), stop(worker)
    assert (relay_code, worker_code) == (0, 0), f"relay:\n{relay_out}\nworker:\n{worker_out}"
    assert shop.query("SELECT order_id, task_id FROM shop_receipt") == [
        (committed["order_id"], committed["task_id"])
    ]
    shown = json.loads(shop.ok("ledgerq", "show", str(committed["task_id"]), "--json"))
    assert shown["status"] == "succeeded", shown
    for never in (committed["dropped_id"], rolled_back["task_id"]):
        missing = shop.run("ledgerq", "show", str(never))
        assert missing.returncode == 1, missing.stdout + missing.stderr
    stats = json.loads(shop.ok("ledgerq", "stats", "--json"))
    assert stats["total"] == 1, stats


def test_a_bad_ledgerq_setting_is_one_line_naming_its_key_and_exit_78(shop: Shop) -> None:
    unknown = shop.run("ledgerq", "stats", SHOP_LEDGERQ_EXTRA='{"AMQP_URLS": "amqp://x"}')
    assert unknown.returncode == 78
    assert unknown.stderr.startswith("ledgerq: settings.LEDGERQ['AMQP_URLS'] is not a ledgerq ")
    bad = shop.run("ledgerq", "stats", SHOP_LEDGERQ_EXTRA='{"QUEUE_TYPE": "fast"}')
    assert (bad.returncode, bad.stderr.count("\n")) == (78, 1), bad.stderr
    assert bad.stderr.startswith("ledgerq: settings.LEDGERQ['QUEUE_TYPE'] "), bad.stderr
    check = shop.run("check", SHOP_LEDGERQ_EXTRA='{"QUEUE_TYPE": "fast"}')
    assert check.returncode == 1 and "(ledgerq.E001) settings.LEDGERQ['QUEUE_TYPE']" in check.stderr
    # Nothing connected: the database was never created.
    assert shop.run("ledgerq", "stats").returncode == 78  # "run `ledgerq migrate`"
