"""``result()`` and ``aresult()`` on the MariaDB ledger (issue 29): a real ``ledgerq
worker --direct`` runs the tasks, and the caller waits on every kind of bind
(a Session, an AsyncSession, an Engine, a URL, a raw PyMySQL connection) for
how each ended: its value, or its error once dead. An unknown id fails at once,
a task that does not end in time raises TimeoutError."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace

import pymysql
import pytest
from sqlalchemy import Engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

import ledgerq
from ledgerq.compose.storage import async_engine, sync_engine
from ledgerq.core.config import Settings
from ledgerq.core.errors import TaskNotFoundError
from ledgerq.ledger.mysql import MyLedger
from tests.support import spawn

EFFECTS = """CREATE TABLE IF NOT EXISTS mariadb_effects (
    id BIGINT AUTO_INCREMENT PRIMARY KEY, task_id BIGINT NOT NULL, attempt INT NOT NULL,
    n INT NOT NULL)"""


@pytest.fixture
async def mariadb(mariadb_settings: Settings) -> AsyncIterator[Settings]:
    ledger = MyLedger(async_engine(mariadb_settings, "ledgerq-test-results", pool_size=1))
    await ledger.truncate()
    await ledger.dispose()
    # no broker: a direct worker takes no AMQP connection
    yield replace(mariadb_settings, amqp_url="amqp://guest:guest@127.0.0.1:1/")


@pytest.fixture
def producer(mariadb: Settings) -> Iterator[Engine]:
    engine = sync_engine(mariadb, "ledgerq-test-results-producer", pool_size=1)
    with engine.begin() as conn:
        conn.execute(text(EFFECTS))
    yield engine
    engine.dispose()


@pytest.fixture
def worker(mariadb: Settings, producer: Engine) -> Iterator[subprocess.Popen[str]]:
    process = spawn(mariadb, "worker", "--direct", "--app", "tests.apps.mariadb_app")
    yield process
    process.send_signal(signal.SIGTERM)
    try:
        output = process.communicate(timeout=30)[0]
    except subprocess.TimeoutExpired:
        process.kill()
        output = process.communicate()[0]
    assert process.returncode == 0, output


def _pymysql(settings: Settings) -> pymysql.connections.Connection[pymysql.cursors.Cursor]:
    url = make_url(settings.database_url)
    return pymysql.connect(
        host=url.host or "127.0.0.1",
        port=url.port or 3306,
        user=url.username or "root",
        password=url.password or "",
        database=url.database,
    )


async def test_every_bind_waits_for_the_value_or_the_error(
    mariadb: Settings, producer: Engine, worker: subprocess.Popen[str]
) -> None:
    with Session(producer) as session, session.begin():
        ok = ledgerq.enqueue(session, "my.effect", {"n": 7})
        bad = ledgerq.enqueue(session, "my.fail", {"n": 8})

    with Session(producer) as session:
        ended = ledgerq.result(session, ok, timeout=30)
    assert (ended.status, ended.value, ended.error, ended.attempts) == (
        "succeeded",
        {"n": 7},
        None,
        1,
    )
    assert ended.finished_at is not None and ended.finished_at.tzinfo is not None

    failed = ledgerq.result(producer, bad, timeout=30)
    assert failed.status == "dead" and not failed.succeeded
    assert failed.error is not None and "refused 8" in failed.error

    assert ledgerq.result(mariadb.database_url, ok, timeout=0).value == {"n": 7}
    raw = _pymysql(mariadb)
    try:
        assert ledgerq.result(raw, bad, timeout=0).status == "dead"
    finally:
        raw.close()

    handlers = async_engine(mariadb, "ledgerq-test-results-async", pool_size=1)
    try:
        async with AsyncSession(handlers) as asession:
            async with asession.begin():
                later = await ledgerq.aenqueue(asession, "my.effect", {"n": 9})
            awaited = await ledgerq.aresult(asession, later, timeout=30)
        assert (awaited.status, awaited.value) == ("succeeded", {"n": 9})
    finally:
        await handlers.dispose()


async def test_an_unknown_id_fails_at_once_and_a_task_not_ended_in_time_times_out(
    mariadb: Settings, producer: Engine
) -> None:
    with Session(producer) as session, session.begin():
        waiting = ledgerq.enqueue(session, "my.effect", {"n": 1}, delay=3600)
    started = time.monotonic()
    with pytest.raises(TaskNotFoundError, match="not in the ledger"):
        ledgerq.result(producer, waiting + 1000, timeout=30)
    with pytest.raises(TaskNotFoundError, match="not in the ledger"):
        await ledgerq.aresult(mariadb.database_url, waiting + 1000, timeout=30)
    assert time.monotonic() - started < 10  # at once, not after the timeouts

    with pytest.raises(TimeoutError, match=f"task {waiting} did not end within 0.3 s"):
        ledgerq.result(producer, waiting, timeout=0.3, poll_s=0.05)
    with pytest.raises(TimeoutError, match=f"task {waiting} did not end within 0.3 s"):
        await ledgerq.aresult(producer, waiting, timeout=0.3, poll_s=0.05)
