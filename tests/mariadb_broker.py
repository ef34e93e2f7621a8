"""What the tests of the broker path on MariaDB share
(tests/integration/test_mariadb_broker.py, tests/faults/test_mariadb_broker_down.py):
the ledger emptied with the test's own tables afresh, plain reads of it, the
test's ``ledgerq`` processes, and waiting on a condition."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pymysql
from sqlalchemy.engine import make_url

from ledgerq.compose.storage import async_engine
from ledgerq.core.config import Settings
from ledgerq.core.routes import routing_key
from ledgerq.ledger.mysql import MyLedger
from tests.support import ledgerq_env

APP = "tests.apps.mariadb_app"
ORDERS = (
    "CREATE TABLE IF NOT EXISTS mariadb_orders (id BIGINT AUTO_INCREMENT PRIMARY KEY, note TEXT)"
)
EFFECTS = """CREATE TABLE IF NOT EXISTS mariadb_effects (
    id BIGINT AUTO_INCREMENT PRIMARY KEY, task_id BIGINT NOT NULL, attempt INT NOT NULL,
    n INT NOT NULL)"""


def query(settings: Settings, statement: str) -> list[tuple[Any, ...]]:
    url = make_url(settings.database_url)
    with (
        pymysql.connect(
            host=url.host or "127.0.0.1",
            port=url.port or 3306,
            user=url.username or "root",
            password=url.password or "",
            database=url.database,
            autocommit=True,
        ) as conn,
        conn.cursor() as cursor,
    ):
        cursor.execute(statement)
        return list(cursor.fetchall())


def routed(settings: Settings) -> list[str]:
    """The routed and personal (sticky) broker queues the workers' subscriptions name
    (private to the test)."""
    rows = query(
        settings,
        "SELECT queue, route FROM ledgerq_subscriptions WHERE route IS NOT NULL"
        " UNION SELECT queue, sticky_route FROM ledgerq_subscriptions"
        " WHERE sticky_route IS NOT NULL",
    )
    return [routing_key(str(queue), str(route)) for queue, route in rows]


async def fresh(settings: Settings) -> Settings:
    """The MariaDB ledger emptied, the test's own tables afresh; the settings with a
    private AMQP prefix (delete its broker objects afterwards)."""
    ledger = MyLedger(async_engine(settings, "ledgerq-test-setup", pool_size=1))
    try:
        await ledger.truncate()
    finally:
        await ledger.dispose()
    query(settings, "DROP TABLE IF EXISTS mariadb_orders, mariadb_effects")
    query(settings, ORDERS)
    query(settings, EFFECTS)
    return replace(settings, amqp_prefix=f"lqtest.{uuid.uuid4().hex[:10]}")


class Processes:
    """The test's ``ledgerq`` processes, stopped (SIGTERM, then SIGKILL) at its end."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.started: list[subprocess.Popen[str]] = []

    def spawn(self, *args: str, **env: str) -> subprocess.Popen[str]:
        process = subprocess.Popen(
            [sys.executable, "-m", "ledgerq", *args],
            env=ledgerq_env(self.settings, **env),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.started.append(process)
        return process

    def stop(self, process: subprocess.Popen[str]) -> str:
        """SIGTERM ``process`` and return its output (SIGKILL if it does not exit)."""
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        try:
            return process.communicate(timeout=30)[0] or ""
        except subprocess.TimeoutExpired:
            process.kill()
            return process.communicate()[0] or ""

    def stop_all(self) -> None:
        for process in self.started:
            if process.returncode is None:
                self.stop(process)


def until(ready: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        assert time.monotonic() < deadline, f"not within {timeout:.0f} s: {what}"
        time.sleep(0.2)


def finished(settings: Settings) -> dict[int, tuple[str, int]]:
    """Every finished task: its status and attempts."""
    rows = query(settings, "SELECT id, status, attempts FROM ledgerq_history")
    return {int(i): (str(s), int(a)) for i, s, a in rows}


def effects(settings: Settings) -> list[tuple[int, int]]:
    """The handlers' ``ctx.session`` writes: (task id, attempt), by task id."""
    rows = query(settings, "SELECT task_id, attempt FROM mariadb_effects ORDER BY task_id")
    return [(int(t), int(a)) for t, a in rows]
