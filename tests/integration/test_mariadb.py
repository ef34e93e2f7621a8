"""The ledger on MariaDB, end to end (issue 29): an application enqueues in its own
SQLAlchemy transaction, sync and async, and a real ``ledgerq worker --direct``
process runs what committed, exactly once, its handler's writes through
``ctx.session`` committed with the task's ``succeeded`` (in batched windows: a
handler raising in the middle of one has its write undone, the others' kept);
what rolled back never runs. No broker: the AMQP URL points at a closed port.
"""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pymysql
import pytest
from sqlalchemy import Engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

import ledgerq
from ledgerq import TaskSpec
from ledgerq.compose.storage import async_engine, sync_engine
from ledgerq.core.config import Settings
from ledgerq.ledger.mysql import MyLedger
from tests.support import ledgerq as run_ledgerq
from tests.support import spawn

ORDERS = (
    "CREATE TABLE IF NOT EXISTS mariadb_orders (id BIGINT AUTO_INCREMENT PRIMARY KEY, note TEXT)"
)
EFFECTS = """CREATE TABLE IF NOT EXISTS mariadb_effects (
    id BIGINT AUTO_INCREMENT PRIMARY KEY, task_id BIGINT NOT NULL, attempt INT NOT NULL,
    n INT NOT NULL)"""


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again once this block ends


def _query(settings: Settings, statement: str) -> list[tuple[Any, ...]]:
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


@pytest.fixture
async def mariadb(mariadb_settings: Settings) -> Settings:
    """The MariaDB ledger emptied, the test's own tables afresh, no broker."""
    ledger = MyLedger(async_engine(mariadb_settings, "ledgerq-test-setup", pool_size=1))
    try:
        await ledger.truncate()
    finally:
        await ledger.dispose()
    _query(mariadb_settings, "DROP TABLE IF EXISTS mariadb_orders, mariadb_effects")
    _query(mariadb_settings, ORDERS)
    _query(mariadb_settings, EFFECTS)
    return replace(mariadb_settings, amqp_url=f"amqp://guest:guest@127.0.0.1:{_closed_port()}/")


@pytest.fixture
def producer(mariadb: Settings) -> Iterator[Engine]:
    engine = sync_engine(mariadb, "ledgerq-test-producer", pool_size=1)
    yield engine
    engine.dispose()


def _order(session: Session, note: str) -> None:
    session.execute(text("INSERT INTO mariadb_orders (note) VALUES (:note)"), {"note": note})


def _until_finished(settings: Settings, count: int, worker: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 60
    while len(_query(settings, "SELECT id FROM ledgerq_history")) < count:
        assert worker.poll() is None, "the worker exited"
        assert time.monotonic() < deadline, "the tasks did not all finish within 60 s"
        time.sleep(0.1)


async def test_what_commits_runs_once_and_what_rolls_back_never_runs(
    mariadb: Settings, producer: Engine
) -> None:
    with Session(producer) as session, session.begin():
        _order(session, "committed")
        kept = ledgerq.enqueue(session, "my.effect", {"n": 1})
    with Session(producer) as session:
        session.begin()
        _order(session, "rolled back")
        dropped = ledgerq.enqueue(session, "my.effect", {"n": 2})
        session.rollback()
    handlers = async_engine(mariadb, "ledgerq-test-async-producer", pool_size=1)
    try:
        async with AsyncSession(handlers) as asession, asession.begin():
            akept = await ledgerq.aenqueue(asession, "my.async_effect", {"n": 3})
    finally:
        await handlers.dispose()

    worker = spawn(mariadb, "-v", "worker", "--direct", "--app", "tests.apps.mariadb_app")
    try:
        # once its first run has shown my.effect writes through ctx.session, the
        # worker runs that kind in batched windows: one handler raises in the middle
        _until_finished(mariadb, 2, worker)
        with Session(producer) as session, session.begin():
            specs = [TaskSpec("my.effect", {"n": 10 + i, "fail": i == 15}) for i in range(40)]
            batch = ledgerq.enqueue_many(session, specs)
        committed = {kept, akept, *batch}
        assert len(committed) == 42 and dropped not in committed
        bad = batch[15]
        _until_finished(mariadb, len(committed), worker)
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            output = worker.communicate(timeout=30)[0]
        except subprocess.TimeoutExpired:
            worker.kill()
            output = worker.communicate()[0]

    assert worker.returncode == 0, output
    assert "Traceback" not in output, output
    history = {
        int(i): (s, int(a))
        for i, s, a in _query(mariadb, "SELECT id, status, attempts FROM ledgerq_history")
    }
    assert history == {i: ("succeeded", 2 if i == bad else 1) for i in committed}
    effects = _query(mariadb, "SELECT task_id, attempt FROM mariadb_effects ORDER BY task_id")
    assert [(int(t), int(a)) for t, a in effects] == [
        (i, 2 if i == bad else 1) for i in sorted(committed)
    ]  # one row per task, the bad one's first write rolled back
    windowed = re.search(r"batched commit: \d+ windows, (\d+) tasks in them", output)
    assert windowed is not None and int(windowed[1]) == len(batch) + 1, output  # the retry too
    assert _query(mariadb, "SELECT id FROM ledgerq_tasks") == []
    notes = {str(n) for (n,) in _query(mariadb, "SELECT note FROM mariadb_orders")}
    assert notes == {"committed"}
    [(result,)] = _query(mariadb, f"SELECT result FROM ledgerq_history WHERE id = {kept}")
    assert json.loads(result) == {"n": 1}  # the handler's return value, with the success


def test_a_worker_killed_mid_task_has_it_rescued_and_run_once_elsewhere(
    mariadb: Settings, mariadb_settings: Settings, producer: Engine, tmp_path: Path
) -> None:
    with Session(producer) as session, session.begin():
        task_id = ledgerq.enqueue(session, "my.crash_once", {"n": 7, "dir": str(tmp_path)})
    first = spawn(mariadb, "worker", "--direct", "--app", "tests.apps.mariadb_app")
    second: subprocess.Popen[str] | None = None
    try:
        _until(lambda: (tmp_path / "started-1").exists(), "the first attempt started")
        first.kill()  # SIGKILL mid-task: no finish, no goodbye, its lease still runs
        first.communicate(timeout=10)
        second = spawn(mariadb, "worker", "--direct", "--app", "tests.apps.mariadb_app")
        passes: list[str] = []

        def rescued() -> bool:
            # `ledgerq reconcile`, one pass at a time, as a cron job runs it: the
            # killed worker is presumed dead once its silence ran out while the
            # second one beats, and its task goes back to pending for the second.
            # The reconciler publishes too (stalled, overdue): it takes the broker.
            amqp = mariadb_settings.amqp_url
            passes.append(run_ledgerq(mariadb, "reconcile", LEDGERQ_AMQP_URL=amqp).stdout)
            return bool(_query(mariadb, f"SELECT id FROM ledgerq_history WHERE id = {task_id}"))

        _until(rescued, "the task rescued and run again", timeout=90)
    finally:
        for worker in (first, second):
            if worker is not None and worker.poll() is None:
                worker.send_signal(signal.SIGTERM)
                worker.communicate(timeout=30)

    [(status, attempts, log)] = _query(
        mariadb, f"SELECT status, attempts, attempt_log FROM ledgerq_history WHERE id = {task_id}"
    )
    assert (status, attempts) == ("succeeded", 2)
    first_attempt = json.loads(log)[0]
    assert first_attempt["outcome"] == "retry" and "presumed dead" in first_attempt["error"]
    effects = _query(mariadb, "SELECT task_id, attempt, n FROM mariadb_effects")
    assert [tuple(map(int, row)) for row in effects] == [(task_id, 2, 7)]  # once, by attempt 2
    assert any("expired 1 leases (1 of dead workers" in p for p in passes), passes


def _until(ready: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        assert time.monotonic() < deadline, f"not within {timeout:.0f} s: {what}"
        time.sleep(0.2)
