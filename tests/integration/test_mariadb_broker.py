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
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

import ledgerq
from ledgerq import TaskSpec
from ledgerq.compose.storage import sync_engine
from ledgerq.core.config import Settings
from tests.conftest import delete_broker_objects
from tests.mariadb_broker import (
    APP,
    Processes,
    effects,
    finished,
    fresh,
    query,
    routed,
    until,
)
from tests.support import ledgerq as run_ledgerq


@pytest.fixture
async def mariadb(mariadb_settings: Settings) -> AsyncIterator[Settings]:
    """The MariaDB ledger emptied, the test's own tables afresh, a private AMQP prefix."""
    current = await fresh(mariadb_settings)
    yield current
    delete_broker_objects(current, routed(current))


@pytest.fixture
def producer(mariadb: Settings) -> Iterator[Engine]:
    engine = sync_engine(mariadb, "ledgerq-test-producer", pool_size=8)
    yield engine
    engine.dispose()


@pytest.fixture
def processes(mariadb: Settings) -> Iterator[Processes]:
    started = Processes(mariadb)
    try:
        yield started
    finally:
        started.stop_all()


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

    until(lambda: len(finished(mariadb)) >= len(committed), "every committed task finished")
    for process in (*relays, *workers):
        assert process.poll() is None, processes.stop(process)
        output = processes.stop(process)
        assert process.returncode == 0, output
        assert "Traceback" not in output, output

    assert finished(mariadb) == {i: ("succeeded", 1) for i in committed}
    assert effects(mariadb) == [(i, 1) for i in sorted(committed)]  # once each, by attempt 1
    assert not dropped & {i for i, _ in effects(mariadb)}
    assert query(mariadb, "SELECT id FROM ledgerq_tasks") == []
    notes = [str(n) for (n,) in query(mariadb, "SELECT note FROM mariadb_orders")]
    assert len(notes) == 6 * 20 and all(n.endswith("kept") for n in notes)
    # Each went through RabbitMQ: the relay published it (a worker without --direct
    # claims only what a delivery names while the broker is up).
    assert query(mariadb, "SELECT id FROM ledgerq_history WHERE published_at IS NULL") == []


def test_a_worker_killed_mid_task_has_it_rescued_and_run_once_by_another(
    mariadb: Settings, producer: Engine, processes: Processes, tmp_path: Path
) -> None:
    with Session(producer) as session, session.begin():
        task_id = ledgerq.enqueue(session, "my.crash_once", {"n": 7, "dir": str(tmp_path)})
    processes.spawn("relay")
    first = processes.spawn("worker", "--app", APP)
    until(lambda: (tmp_path / "started-1").exists(), "the first attempt started")
    first.kill()  # SIGKILL mid-task: no finish, no goodbye, its lease still runs
    first.communicate(timeout=10)
    processes.spawn("worker", "--app", APP)
    passes: list[str] = []

    def rescued() -> bool:
        # `ledgerq reconcile`, one pass at a time, as a cron job runs it: the killed
        # worker is presumed dead once its silence ran out while the second one
        # beats; its task goes back to pending, and the relay publishes it again.
        passes.append(run_ledgerq(mariadb, "reconcile").stdout)
        return task_id in finished(mariadb)

    until(rescued, "the task rescued and run again", timeout=120)

    [(status, attempts, log)] = query(
        mariadb, f"SELECT status, attempts, attempt_log FROM ledgerq_history WHERE id = {task_id}"
    )
    assert (status, attempts) == ("succeeded", 2)
    first_attempt = json.loads(log)[0]
    assert first_attempt["outcome"] == "retry" and "presumed dead" in first_attempt["error"]
    written = query(mariadb, "SELECT task_id, attempt, n FROM mariadb_effects")
    assert [tuple(map(int, row)) for row in written] == [(task_id, 2, 7)]  # once, by attempt 2
    assert any("expired 1 leases (1 of dead workers" in p for p in passes), passes


def test_a_relay_killed_between_its_commit_and_its_publish_loses_and_doubles_nothing(
    mariadb: Settings, producer: Engine, processes: Processes
) -> None:
    with Session(producer) as session, session.begin():
        first = ledgerq.enqueue_many(session, [TaskSpec("my.effect", {"n": i}) for i in range(30)])
    workers = [processes.spawn("worker", "--app", APP) for _ in range(2)]
    until(
        lambda: len(query(mariadb, "SELECT worker FROM ledgerq_subscriptions")) == 2,
        "both workers subscribed (a relay publishes only to live routes)",
    )
    # The relay SIGKILLs itself right after committing its first batch published,
    # before any message of it went out: those rows are published with no message.
    crashing = processes.spawn("relay", "--batch-size", "10", LEDGERQ_CRASH_AT="relay.after_commit")
    crashing.communicate(timeout=60)
    assert crashing.returncode == -signal.SIGKILL
    published = query(mariadb, "SELECT id FROM ledgerq_tasks WHERE status = 'published'")
    stranded = {int(i) for (i,) in published}
    assert len(stranded) == 10

    processes.spawn("relay")  # restarted: it publishes the pending rest, not the stranded
    with Session(producer) as session, session.begin():
        later = ledgerq.enqueue_many(session, [TaskSpec("my.effect", {"n": i}) for i in range(20)])
    committed = {*first, *later}
    until(
        lambda: len(finished(mariadb)) == len(committed) - len(stranded),
        "every task but the stranded ones finished",
    )
    assert stranded.isdisjoint(finished(mariadb))

    # The reconciler publishes the stranded rows again once their stall window passed.
    reconciler = processes.spawn("reconcile", "--every", "1", "--stall", "2")
    until(lambda: len(finished(mariadb)) == len(committed), "the stranded tasks ran")
    output = processes.stop(reconciler)
    assert reconciler.returncode == 0 and "Traceback" not in output, output
    assert "re-published 10 stalled" in output, output
    for worker in workers:
        assert worker.poll() is None

    assert finished(mariadb) == {i: ("succeeded", 1) for i in committed}
    assert effects(mariadb) == [(i, 1) for i in sorted(committed)]
