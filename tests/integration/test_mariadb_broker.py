"""The broker path on MariaDB, end to end (issue 29): producers enqueue in their own
SQLAlchemy transactions, a real ``ledgerq relay`` publishes what committed to
RabbitMQ, real ``ledgerq worker`` processes (no ``--direct``) claim the
deliveries and run them, and ``ledgerq reconcile`` is the safety net:

- what commits runs exactly once, its handler's write through ``ctx.session``
  committed with the task's ``succeeded``; what rolls back never runs (six
  producers at once, two relays at once);
- a worker SIGKILLed mid-task: its task is rescued (its worker presumed dead),
  published again and run once by the other worker;
- a relay SIGKILLed after committing a batch published and before sending it:
  restarted, and with the reconciler re-publishing the stalled rows, nothing is
  lost and nothing runs twice.

Each test has an AMQP prefix of its own (its exchanges and queues are private
to it), deleted afterwards.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pymysql
import pytest
from sqlalchemy import Engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

import ledgerq
from ledgerq import TaskSpec
from ledgerq.compose.storage import async_engine, sync_engine
from ledgerq.core.config import Settings
from ledgerq.core.routes import routing_key
from ledgerq.ledger.mysql import MyLedger
from tests.conftest import delete_broker_objects
from tests.support import ledgerq as run_ledgerq
from tests.support import ledgerq_env

APP = "tests.apps.mariadb_app"
ORDERS = (
    "CREATE TABLE IF NOT EXISTS mariadb_orders (id BIGINT AUTO_INCREMENT PRIMARY KEY, note TEXT)"
)
EFFECTS = """CREATE TABLE IF NOT EXISTS mariadb_effects (
    id BIGINT AUTO_INCREMENT PRIMARY KEY, task_id BIGINT NOT NULL, attempt INT NOT NULL,
    n INT NOT NULL)"""


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


def _routed(settings: Settings) -> list[str]:
    """The routed broker queues the workers' subscriptions name (private to the test)."""
    rows = _query(
        settings, "SELECT DISTINCT queue, route FROM ledgerq_subscriptions WHERE route IS NOT NULL"
    )
    return [routing_key(str(queue), str(route)) for queue, route in rows]


@pytest.fixture
async def mariadb(mariadb_settings: Settings) -> Any:
    """The MariaDB ledger emptied, the test's own tables afresh, a private AMQP prefix."""
    ledger = MyLedger(async_engine(mariadb_settings, "ledgerq-test-setup", pool_size=1))
    try:
        await ledger.truncate()
    finally:
        await ledger.dispose()
    _query(mariadb_settings, "DROP TABLE IF EXISTS mariadb_orders, mariadb_effects")
    _query(mariadb_settings, ORDERS)
    _query(mariadb_settings, EFFECTS)
    current = replace(mariadb_settings, amqp_prefix=f"lqtest.{uuid.uuid4().hex[:10]}")
    yield current
    delete_broker_objects(current, _routed(current))


@pytest.fixture
def producer(mariadb: Settings) -> Iterator[Engine]:
    engine = sync_engine(mariadb, "ledgerq-test-producer", pool_size=8)
    yield engine
    engine.dispose()


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


@pytest.fixture
def processes(mariadb: Settings) -> Iterator[Processes]:
    started = Processes(mariadb)
    try:
        yield started
    finally:
        started.stop_all()


def _until(ready: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        assert time.monotonic() < deadline, f"not within {timeout:.0f} s: {what}"
        time.sleep(0.2)


def _finished(settings: Settings) -> dict[int, tuple[str, int]]:
    rows = _query(settings, "SELECT id, status, attempts FROM ledgerq_history")
    return {int(i): (str(s), int(a)) for i, s, a in rows}


def _effects(settings: Settings) -> list[tuple[int, int]]:
    rows = _query(settings, "SELECT task_id, attempt FROM mariadb_effects ORDER BY task_id")
    return [(int(t), int(a)) for t, a in rows]


def _produce(producer: Engine, rounds: int, tag: int) -> tuple[set[int], set[int]]:
    """One producer: ``rounds`` business transactions, each an order row and two
    tasks; every fifth rolls back. The ids committed, and the ids rolled back."""
    committed: set[int] = set()
    dropped: set[int] = set()
    for k in range(rounds):
        rollback = k % 5 == 4
        with Session(producer) as session:
            session.begin()
            session.execute(
                text("INSERT INTO mariadb_orders (note) VALUES (:note)"),
                {"note": f"{tag}-{k}-{'dropped' if rollback else 'kept'}"},
            )
            ids = {ledgerq.enqueue(session, "my.effect", {"n": tag * 1000 + k})}
            ids |= set(ledgerq.enqueue_many(session, [TaskSpec("my.effect", {"n": -k})]))
            if rollback:
                session.rollback()
                dropped |= ids
            else:
                session.commit()
                committed |= ids
    return committed, dropped


def test_producers_transactions_decide_what_runs_through_rabbitmq_exactly_once(
    mariadb: Settings, producer: Engine, processes: Processes
) -> None:
    # Two relays at once: they pick from the same windows and never publish a row twice.
    relays = [processes.spawn("relay") for _ in range(2)]
    workers = [processes.spawn("worker", "--app", APP, "--concurrency", "4") for _ in range(2)]
    outcomes: list[tuple[set[int], set[int]]] = []

    def run(tag: int) -> None:
        outcomes.append(_produce(producer, 25, tag))

    threads = [threading.Thread(target=run, args=(tag,)) for tag in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    committed = set().union(*(c for c, _ in outcomes))
    dropped = set().union(*(d for _, d in outcomes))
    assert len(committed) == 6 * 20 * 2 and len(dropped) == 6 * 5 * 2

    _until(lambda: len(_finished(mariadb)) >= len(committed), "every committed task finished")
    for process in (*relays, *workers):
        assert process.poll() is None, processes.stop(process)
        output = processes.stop(process)
        assert process.returncode == 0, output
        assert "Traceback" not in output, output

    assert _finished(mariadb) == {i: ("succeeded", 1) for i in committed}
    assert _effects(mariadb) == [(i, 1) for i in sorted(committed)]  # once each, by attempt 1
    assert not dropped & {i for i, _ in _effects(mariadb)}
    assert _query(mariadb, "SELECT id FROM ledgerq_tasks") == []
    notes = [str(n) for (n,) in _query(mariadb, "SELECT note FROM mariadb_orders")]
    assert len(notes) == 6 * 20 and all(n.endswith("kept") for n in notes)
    # Each went through RabbitMQ: the relay published it (a worker without --direct
    # claims only what a delivery names while the broker is up).
    assert _query(mariadb, "SELECT id FROM ledgerq_history WHERE published_at IS NULL") == []


def test_a_worker_killed_mid_task_has_it_rescued_and_run_once_by_another(
    mariadb: Settings, producer: Engine, processes: Processes, tmp_path: Path
) -> None:
    with Session(producer) as session, session.begin():
        task_id = ledgerq.enqueue(session, "my.crash_once", {"n": 7, "dir": str(tmp_path)})
    processes.spawn("relay")
    first = processes.spawn("worker", "--app", APP)
    _until(lambda: (tmp_path / "started-1").exists(), "the first attempt started")
    first.kill()  # SIGKILL mid-task: no finish, no goodbye, its lease still runs
    first.communicate(timeout=10)
    processes.spawn("worker", "--app", APP)
    passes: list[str] = []

    def rescued() -> bool:
        # `ledgerq reconcile`, one pass at a time, as a cron job runs it: the killed
        # worker is presumed dead once its silence ran out while the second one
        # beats; its task goes back to pending, and the relay publishes it again.
        passes.append(run_ledgerq(mariadb, "reconcile").stdout)
        return task_id in _finished(mariadb)

    _until(rescued, "the task rescued and run again", timeout=120)

    [(status, attempts, log)] = _query(
        mariadb, f"SELECT status, attempts, attempt_log FROM ledgerq_history WHERE id = {task_id}"
    )
    assert (status, attempts) == ("succeeded", 2)
    first_attempt = json.loads(log)[0]
    assert first_attempt["outcome"] == "retry" and "presumed dead" in first_attempt["error"]
    effects = _query(mariadb, "SELECT task_id, attempt, n FROM mariadb_effects")
    assert [tuple(map(int, row)) for row in effects] == [(task_id, 2, 7)]  # once, by attempt 2
    assert any("expired 1 leases (1 of dead workers" in p for p in passes), passes


def test_a_relay_killed_between_its_commit_and_its_publish_loses_and_doubles_nothing(
    mariadb: Settings, producer: Engine, processes: Processes
) -> None:
    with Session(producer) as session, session.begin():
        first = ledgerq.enqueue_many(session, [TaskSpec("my.effect", {"n": i}) for i in range(30)])
    workers = [processes.spawn("worker", "--app", APP) for _ in range(2)]
    _until(
        lambda: len(_query(mariadb, "SELECT worker FROM ledgerq_subscriptions")) == 2,
        "both workers subscribed (a relay publishes only to live routes)",
    )
    # The relay SIGKILLs itself right after committing its first batch published,
    # before any message of it went out: those rows are published with no message.
    crashing = processes.spawn("relay", "--batch-size", "10", LEDGERQ_CRASH_AT="relay.after_commit")
    crashing.communicate(timeout=60)
    assert crashing.returncode == -signal.SIGKILL
    published = _query(mariadb, "SELECT id FROM ledgerq_tasks WHERE status = 'published'")
    stranded = {int(i) for (i,) in published}
    assert len(stranded) == 10

    processes.spawn("relay")  # restarted: it publishes the pending rest, not the stranded
    with Session(producer) as session, session.begin():
        later = ledgerq.enqueue_many(session, [TaskSpec("my.effect", {"n": i}) for i in range(20)])
    committed = {*first, *later}
    _until(
        lambda: len(_finished(mariadb)) == len(committed) - len(stranded),
        "every task but the stranded ones finished",
    )
    assert stranded.isdisjoint(_finished(mariadb))

    # The reconciler publishes the stranded rows again once their stall window passed.
    reconciler = processes.spawn("reconcile", "--every", "1", "--stall", "2")
    _until(lambda: len(_finished(mariadb)) == len(committed), "the stranded tasks ran")
    output = processes.stop(reconciler)
    assert reconciler.returncode == 0 and "Traceback" not in output, output
    assert "re-published 10 stalled" in output, output
    for worker in workers:
        assert worker.poll() is None

    assert _finished(mariadb) == {i: ("succeeded", 1) for i in committed}
    assert _effects(mariadb) == [(i, 1) for i in sorted(committed)]
