"""Broker-down mode on MariaDB (issue 29): the fault suite's own RabbitMQ node stops
its application mid-run for longer than the worker's ``--broker-fallback``; tasks
enqueued meanwhile run through the ledger-direct fallback, which polls on MySQL
(no LISTEN); the broker comes back, and the relay and the consumers take over
again. Every committed task ends once, at its first attempt, its ``ctx.session``
write made once."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import Session

import ledgerq
from ledgerq import TaskSpec
from ledgerq.compose.storage import sync_engine
from ledgerq.core.config import Settings
from tests.conftest import delete_broker_objects
from tests.mariadb_broker import APP, Processes, effects, finished, fresh, query, routed, until
from tests.rabbit import RabbitNode


@pytest.fixture
async def mariadb(mariadb_settings: Settings) -> AsyncIterator[Settings]:
    current = await fresh(mariadb_settings)  # its broker: the fault suite's node
    yield current
    delete_broker_objects(current, routed(current))


@pytest.fixture
def producer(mariadb: Settings) -> Iterator[Engine]:
    engine = sync_engine(mariadb, "ledgerq-test-producer", pool_size=1)
    yield engine
    engine.dispose()


def _enqueue(producer: Engine, n: int, tag: int) -> list[int]:
    with Session(producer) as session, session.begin():
        specs = [TaskSpec("my.effect", {"n": tag * 1000 + i}) for i in range(n)]
        return ledgerq.enqueue_many(session, specs)


def _published(settings: Settings, ids: list[int]) -> set[int]:
    """Of ``ids``, those a relay published (the rest were claimed from the ledger)."""
    rows = query(
        settings,
        "SELECT id FROM ledgerq_history WHERE published_at IS NOT NULL "
        f"AND id IN ({','.join(map(str, ids))})",
    )
    return {int(r[0]) for r in rows}


def test_tasks_run_through_the_ledger_while_the_broker_is_down_and_through_it_after(
    mariadb: Settings, producer: Engine, broker_node: RabbitNode
) -> None:
    processes = Processes(mariadb)
    try:
        processes.spawn("relay")
        worker = processes.spawn("worker", "--app", APP, "--broker-fallback", "1")
        before = _enqueue(producer, 20, 1)
        until(lambda: set(before) <= set(finished(mariadb)), "the first tasks ran")
        assert _published(mariadb, before) == set(before)  # through RabbitMQ

        broker_node.ctl("stop_app")
        try:
            during = _enqueue(producer, 20, 2)
            until(lambda: set(during) <= set(finished(mariadb)), "the tasks of the outage ran")
        finally:
            broker_node.ctl("start_app")
            broker_node.ctl("await_startup")
        assert _published(mariadb, during) == set()  # claimed from the ledger

        # Back: the consumers reconnect, the fallback stops, the relay publishes again.
        def through_the_broker() -> bool:
            [task_id] = _enqueue(producer, 1, 3)
            until(lambda: task_id in finished(mariadb), "a task after the outage ran")
            return bool(_published(mariadb, [task_id]))

        until(through_the_broker, "tasks going through RabbitMQ again", timeout=90)
        after = _enqueue(producer, 20, 4)
        until(lambda: set(after) <= set(finished(mariadb)), "the last tasks ran")
        assert worker.poll() is None
    finally:
        processes.stop_all()

    ran = finished(mariadb)
    assert set(ran.values()) == {("succeeded", 1)}  # each once, at its first attempt
    assert effects(mariadb) == [(i, 1) for i in sorted(ran)]  # one write each
    assert query(mariadb, "SELECT id FROM ledgerq_tasks") == []
