"""Database connections killed under a drain, on the MariaDB ledger (issue 29).

Two real ``ledgerq worker --direct`` processes drain 300 tasks whose handlers
write one row each through ``ctx.session``. Four times during the drain (each
when the finished count passes a mark, so the kills land mid-drain whatever the
machine's speed) every connection the workers hold to the ledger's database is
killed (``KILL CONNECTION``): claims, finishes, heartbeats and handler
transactions die at any point of their work. The workers must ride it out
(a lost connection is transient: retried with back-off, never an exit), with a
reconciler running beside them as in any deployment (a claim that committed
while its answer was lost leaves tasks running that no worker knows: their
5 s lease runs out and the reconciler takes them back), and in the end every
task is ``succeeded`` exactly once, its row written exactly once: a
transaction killed before its COMMIT left nothing, and the fences made the
retried attempt the only one that counted."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pymysql
import pytest
from sqlalchemy import Engine
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

import ledgerq
from ledgerq import TaskSpec
from ledgerq.compose.storage import async_engine, sync_engine
from ledgerq.core.config import Settings
from ledgerq.ledger.mysql import MyLedger
from tests.support import spawn

TASKS = 300
LEASE_S = 5
MARKS = (40, 100, 160, 220)
EFFECTS = """CREATE TABLE IF NOT EXISTS mariadb_effects (
    id BIGINT AUTO_INCREMENT PRIMARY KEY, task_id BIGINT NOT NULL, attempt INT NOT NULL,
    n INT NOT NULL)"""


def _connect(settings: Settings) -> pymysql.connections.Connection[pymysql.cursors.Cursor]:
    url = make_url(settings.database_url)
    return pymysql.connect(
        host=url.host or "127.0.0.1",
        port=url.port or 3306,
        user=url.username or "root",
        password=url.password or "",
        database=url.database,
        autocommit=True,
    )


def _query(settings: Settings, statement: str) -> list[tuple[Any, ...]]:
    with _connect(settings) as conn, conn.cursor() as cursor:
        cursor.execute(statement)
        return list(cursor.fetchall())


@pytest.fixture
async def mariadb(mariadb_settings: Settings) -> AsyncIterator[Settings]:
    ledger = MyLedger(async_engine(mariadb_settings, "ledgerq-test-kills", pool_size=1))
    await ledger.truncate()
    await ledger.dispose()
    _query(mariadb_settings, "DROP TABLE IF EXISTS mariadb_effects")
    _query(mariadb_settings, EFFECTS)
    yield mariadb_settings  # the fault suite's broker: the reconciler connects to it


@pytest.fixture
def producer(mariadb: Settings) -> Iterator[Engine]:
    engine = sync_engine(mariadb, "ledgerq-test-kills-producer", pool_size=1)
    yield engine
    engine.dispose()


def _kill_the_workers_connections(settings: Settings) -> int:
    """KILL every connection to the ledger's database but this one; how many."""
    database = make_url(settings.database_url).database
    with _connect(settings) as conn, conn.cursor() as cursor:
        cursor.execute(
            "SELECT id FROM information_schema.processlist WHERE db = %s AND id <> CONNECTION_ID()",
            (database,),
        )
        ids = [int(row[0]) for row in cursor.fetchall()]
        for connection_id in ids:
            with contextlib.suppress(pymysql.err.OperationalError):  # it ended meanwhile
                cursor.execute(f"KILL CONNECTION {connection_id}")
        return len(ids)


def _stop(worker: subprocess.Popen[str]) -> str:
    worker.send_signal(signal.SIGTERM)
    try:
        return worker.communicate(timeout=20)[0]
    except subprocess.TimeoutExpired:
        worker.kill()
        return worker.communicate()[0]


async def test_killed_connections_lose_nothing_and_double_nothing(
    mariadb: Settings, producer: Engine
) -> None:
    with Session(producer) as session, session.begin():
        ids = ledgerq.enqueue_many(
            session, [TaskSpec("my.effect", {"n": i}, max_attempts=20) for i in range(TASKS)]
        )
    workers = [
        spawn(mariadb, "worker", "--direct", "--app", "tests.apps.mariadb_app",
              "--concurrency", "8", "--lease", str(LEASE_S))
        for _ in range(2)
    ]  # fmt: skip
    # A claim whose COMMIT reached the server but whose answer was lost with its
    # connection leaves tasks running that no worker knows: their lease runs
    # out and the reconciler, as in any deployment, takes them back.
    reconciler = spawn(mariadb, "reconcile", "--every", "1")
    killed: list[int] = []
    try:
        deadline = time.monotonic() + 240
        while True:
            exited = [w for w in workers if w.poll() is not None]
            assert not exited, f"a worker exited: {exited[0].communicate()[0][-6000:]}"
            assert time.monotonic() < deadline, f"not drained: {killed=}"
            ended = int(_query(mariadb, "SELECT COUNT(*) FROM ledgerq_history")[0][0])
            if ended >= TASKS:
                break
            if len(killed) < len(MARKS) and ended >= MARKS[len(killed)]:
                killed.append(_kill_the_workers_connections(mariadb))
            await asyncio.sleep(0.05)
    finally:
        outputs = [_stop(w) for w in [*workers, reconciler]]
    for worker, output in zip([*workers, reconciler], outputs, strict=True):
        assert worker.returncode == 0, output
        assert "Traceback" not in output, output[output.find("Traceback") - 2000 :][:6000]

    assert len(killed) == len(MARKS) and all(n > 0 for n in killed), killed
    statuses = _query(mariadb, "SELECT status, COUNT(*) FROM ledgerq_history GROUP BY status")
    assert dict(statuses) == {"succeeded": TASKS}
    assert _query(mariadb, "SELECT COUNT(*) FROM ledgerq_tasks")[0][0] == 0
    effects = _query(mariadb, "SELECT task_id, COUNT(*) FROM mariadb_effects GROUP BY task_id")
    assert {int(t): int(n) for t, n in effects} == dict.fromkeys(ids, 1)
