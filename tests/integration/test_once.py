"""Permanent de-duplication (``once=True``) on the real database: a business key that
never runs twice, whether the first task is live, finished, or purged, and whoever
races for it."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta

import psycopg
import pytest
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

from ledgerq import InvalidTaskError, TaskSpec, aenqueue, enqueue, enqueue_many
from ledgerq.compose import open_ledger
from ledgerq.core.config import Settings
from ledgerq.ledger.model import Outcome
from ledgerq.ledger.pg import PgLedger
from ledgerq.ledger.pg.engines import async_engine, libpq_url, sync_engine
from ledgerq.relay.retention import Retention

PRODUCERS = 8


@pytest.fixture
def engine(settings: Settings) -> Iterator[Engine]:
    engine = sync_engine(settings, "test-once", pool_size=PRODUCERS)
    yield engine
    engine.dispose()


def give_points(engine: Engine, key: str = "order-17") -> int:
    with Session(engine) as session, session.begin():
        return enqueue(session, "points.give", {"points": 10}, business_key=key, once=True)


async def finish(ledger: PgLedger, task_id: int) -> None:
    [claimed] = await ledger.claim([(task_id, 0)], "test-once", 30.0)
    await ledger.finish([Outcome.succeeded(claimed.fence)])


async def test_a_duplicate_returns_the_first_tasks_id_live_finished_and_purged(
    engine: Engine, ledger: PgLedger
) -> None:
    first = give_points(engine)
    assert give_points(engine) == first  # live: nothing inserted

    await finish(ledger, first)
    assert (await ledger.show(first))["location"] == "history"
    assert give_points(engine) == first  # finished: still nothing inserted (unique=True would)

    # Purged: everything that finished before a second from now.
    soon = await ledger.database_now() + timedelta(seconds=1)
    removed = await Retention(ledger).purge({"succeeded": soon})
    assert removed.by_status == {"succeeded": 1}
    assert give_points(engine) == first  # purged from history: the key outlives it

    stats = await ledger.stats()
    assert stats["total"] == 0  # one task ever, and it is gone
    assert give_points(engine, key="order-18") != first  # another key is another task


def test_producers_racing_on_one_key_make_exactly_one_task(
    engine: Engine, settings: Settings
) -> None:
    barrier = threading.Barrier(PRODUCERS)
    got: list[int] = []
    lock = threading.Lock()

    def produce() -> None:
        with Session(engine) as session, session.begin():
            barrier.wait(timeout=10)
            task_id = enqueue(session, "points.give", business_key="race-1", once=True)
        with lock:
            got.append(task_id)

    threads = [threading.Thread(target=produce) for _ in range(PRODUCERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)

    assert len(got) == PRODUCERS and len(set(got)) == 1
    with psycopg.connect(libpq_url(settings.database_url)) as conn:
        rows = conn.execute("SELECT id FROM ledgerq_tasks WHERE business_key = 'race-1'").fetchall()
    assert rows == [(got[0],)]


def test_a_rolled_back_first_leaves_the_key_free(engine: Engine) -> None:
    with Session(engine) as session, session.begin():
        enqueue(session, "points.give", business_key="rolled-back", once=True)
        session.rollback()
    first = give_points(engine, key="rolled-back")
    assert give_points(engine, key="rolled-back") == first


def test_a_batch_keeps_the_first_of_each_key_and_skips_keys_already_held(
    engine: Engine,
) -> None:
    held = give_points(engine, key="b-held")
    with Session(engine) as session, session.begin():
        ids = enqueue_many(
            session,
            [
                TaskSpec("points.give", {"n": 1}, business_key="b-1", once=True),
                TaskSpec("points.give", {"n": 2}),  # no key: always a task
                TaskSpec("points.give", {"n": 3}, business_key="b-1", once=True),  # in-batch
                TaskSpec("points.give", {"n": 4}, business_key="b-held", once=True),
                TaskSpec("points.give", {"n": 5}, business_key="b-2", once=True),
            ],
        )
        payloads = session.execute(
            text("SELECT payload->>'n' FROM ledgerq_tasks WHERE id = ANY(:ids) ORDER BY id"),
            {"ids": ids},
        ).scalars()
        assert list(payloads) == ["1", "2", "5"]
    assert len(ids) == 3 and ids == sorted(ids) and held not in ids
    assert give_points(engine, key="b-2") == ids[2]


def test_a_refused_once_enqueue_leaves_the_transaction_usable(engine: Engine) -> None:
    with Session(engine) as session, session.begin():
        with pytest.raises(InvalidTaskError, match="once=True needs a business_key"):
            enqueue(session, "points.give", once=True)
        with pytest.raises(InvalidTaskError, match="once must be True or False"):
            enqueue(session, "points.give", business_key="k", once="yes")
        assert enqueue(session, "points.give", business_key="still-usable", once=True) > 0


async def test_aenqueue_and_a_raw_psycopg_connection_share_the_key(settings: Settings) -> None:
    engine = async_engine(settings, "test-once-async", pool_size=1)
    try:
        async with engine.begin() as session:
            first = await aenqueue(session, "points.give", business_key="mixed", once=True)
    finally:
        await engine.dispose()
    with psycopg.connect(libpq_url(settings.database_url)) as conn, conn.transaction():
        again = enqueue(conn, "points.give", business_key="mixed", once=True)
    assert again == first
    async with open_ledger(settings, "test-once") as ledger:
        assert (await ledger.stats())["by_kind"] == {"points.give": {"pending": 1}}
