"""Races on the MariaDB ledger (issue 29), on the real server:

* eight producers enqueue the same business key at once, each in its own
  transaction at the server's default isolation (REPEATABLE READ, as an
  application's own engine has it) or at READ COMMITTED: ``unique=True`` leaves
  exactly one live task and every producer gets its id; ``once=True`` the same,
  for good; a holder that rolls back leaves the key to the next one;
* four direct claimers race on one backlog: every task is claimed exactly once.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator

import pytest
from sqlalchemy import Engine, create_engine
from sqlalchemy.orm import Session

import ledgerq
from ledgerq import TaskSpec
from ledgerq.compose.storage import async_engine, sync_engine
from ledgerq.core.config import Settings
from ledgerq.ledger.mysql import MyLedger

PRODUCERS = 8


@pytest.fixture
async def ledger(mariadb_settings: Settings) -> AsyncIterator[MyLedger]:
    opened = MyLedger(async_engine(mariadb_settings, "ledgerq-test-races", pool_size=4))
    await opened.truncate()
    yield opened
    await opened.dispose()


@pytest.fixture(params=["REPEATABLE READ", "READ COMMITTED"])
def producers(request: pytest.FixtureRequest, mariadb_settings: Settings) -> Iterator[Engine]:
    """An application's engine: plain SQLAlchemy on the ledger's URL, at ``param``."""
    engine = create_engine(
        mariadb_settings.database_url, pool_size=PRODUCERS, isolation_level=request.param
    )
    yield engine
    engine.dispose()


def _at_once(engine: Engine, spec: TaskSpec) -> list[int]:
    """``PRODUCERS`` threads enqueue ``spec`` at the same moment, each in its own
    transaction (committed at once); the ids they got."""
    start = threading.Barrier(PRODUCERS)
    ids: list[int] = []
    errors: list[BaseException] = []

    def produce() -> None:
        try:
            with Session(engine) as session, session.begin():
                start.wait()
                ids.append(ledgerq.enqueue(session, spec.kind, spec.payload, **_options(spec)))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=produce) for _ in range(PRODUCERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors
    return ids


def _options(spec: TaskSpec) -> dict[str, object]:
    return {"business_key": spec.business_key, "unique": spec.unique, "once": spec.once}


@pytest.mark.parametrize("strength", ["unique", "once"])
async def test_eight_producers_on_one_business_key_make_one_task(
    ledger: MyLedger, producers: Engine, strength: str
) -> None:
    once = strength == "once"
    spec = TaskSpec("race.key", {"n": 1}, business_key="order-8", unique=not once, once=once)

    ids = await asyncio.to_thread(_at_once, producers, spec)

    assert len(ids) == PRODUCERS and len(set(ids)) == 1, ids
    stats = await ledger.stats()
    assert stats["total"] == 1 and stats["by_status"] == {"pending": 1}


async def test_a_holder_that_rolls_back_leaves_the_key_to_the_next_producer(
    ledger: MyLedger, mariadb_settings: Settings
) -> None:
    engine = sync_engine(mariadb_settings, "ledgerq-test-races", pool_size=2)
    try:
        spec = {"business_key": "order-9", "unique": True}
        first = Session(engine)
        first.begin()
        rolled = ledgerq.enqueue(first, "race.key", **spec)
        waiting: list[int] = []

        def second() -> None:
            with Session(engine) as session, session.begin():
                waiting.append(ledgerq.enqueue(session, "race.key", **spec))

        thread = threading.Thread(target=second)
        thread.start()
        thread.join(0.5)
        assert thread.is_alive()  # it waits on the key the first one holds
        first.rollback()
        first.close()
        thread.join(30)
        assert not thread.is_alive() and waiting and waiting[0] != rolled
        assert await ledger.whereabouts([rolled, waiting[0]]) == {waiting[0]: "pending"}
    finally:
        engine.dispose()


async def test_four_direct_claimers_claim_every_task_exactly_once(
    ledger: MyLedger, mariadb_settings: Settings
) -> None:
    ids = set(await ledger.enqueue([TaskSpec("race.claim", {"i": i}) for i in range(400)]))
    claimers = [
        MyLedger(async_engine(mariadb_settings, f"ledgerq-test-claimer-{n}", pool_size=1))
        for n in range(4)
    ]
    claimed: list[list[int]] = [[] for _ in claimers]

    async def claim(n: int) -> None:
        while True:
            won = await claimers[n].claim_due(["default"], 25, f"claimer-{n}", 60.0)
            if not won and not await _pending(ledger, ids):
                return
            claimed[n] += [t.id for t in won]

    try:
        await asyncio.gather(*(claim(n) for n in range(len(claimers))))
    finally:
        for claimer in claimers:
            await claimer.dispose()

    every = [i for mine in claimed for i in mine]
    assert sorted(every) == sorted(ids)  # each once: no id twice, none missing
    assert sum(1 for mine in claimed if mine) > 1  # the claimers did share the backlog
    assert set((await ledger.whereabouts(ids)).values()) == {"running"}


async def _pending(ledger: MyLedger, ids: set[int]) -> bool:
    return "pending" in (await ledger.whereabouts(ids)).values()
