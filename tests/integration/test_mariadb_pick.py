"""The MariaDB pick's re-check and its races on ordering keys (issue 29), on the real
server, in process (no subprocess):

* the direct claim reads its candidates with a plain read, then locks them: a
  pause, or an earlier task of the key put back in line (an operator's retry),
  committed between the two stops the row at the lock (``lock_due`` re-checks
  the fragment ``ready`` on the latest committed rows);
* two direct claimers race round after round on a backlog of keyed tasks: no
  round ever holds two tasks of one key, and each key's tasks run in id order;
* two direct claimers and a relay race on one rate-limited kind: together they
  never take more than its burst plus its rate times the time elapsed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import pytest
from sqlalchemy import TextClause
from sqlalchemy.orm import Session

import ledgerq
from ledgerq import Action, TaskFilter, TaskSpec
from ledgerq.compose.storage import async_engine, sync_engine
from ledgerq.core.config import Settings
from ledgerq.ledger.model import ClaimedTask, Outcome
from ledgerq.ledger.mysql import MyLedger
from ledgerq.ledger.mysql.claims import claim_due
from ledgerq.ledger.mysql.plans import Answer, adrive, async_runner
from ledgerq.ledger.mysql.queries import MQ
from ledgerq.ledger.routing import Subscription
from ledgerq.ledger.scheduling import RateLimit
from ledgerq.ledger.validation import MAX_CLAIM_PAYLOAD_BYTES

LEASE_S = 30.0
KEYS = 4
PER_KEY = 5


@pytest.fixture
async def ledger(mariadb_settings: Settings) -> AsyncIterator[MyLedger]:
    opened = MyLedger(async_engine(mariadb_settings, "ledgerq-test-pick", pool_size=4))
    await opened.truncate()
    yield opened
    await opened.dispose()


def enqueued(settings: Settings, specs: list[TaskSpec]) -> list[int]:
    """``specs`` enqueued in one committed transaction (a batch, in input order)."""
    engine = sync_engine(settings, "ledgerq-test-pick-producer", pool_size=1)
    try:
        with Session(engine) as session, session.begin():
            return ledgerq.enqueue_many(session, specs)
    finally:
        engine.dispose()


async def claim_with(
    ledger: MyLedger, before_lock: Callable[[], Awaitable[object]]
) -> list[ClaimedTask]:
    """The direct claim of "default", ``before_lock`` run (and committed, on the
    ledger's other connections) between its read of the candidates and its lock."""
    async with ledger.engine.begin() as conn:
        run = async_runner(conn, "ledgerq")

        async def intercepted(statement: TextClause, params: Mapping[str, Any]) -> Answer:
            if statement is MQ.lock_due:
                await before_lock()
            return await run(statement, params)

        plan = claim_due(["default"], None, 10, 0.0, "w-1", LEASE_S, MAX_CLAIM_PAYLOAD_BYTES)
        return await adrive(plan, intercepted)


async def test_a_pause_committed_between_the_read_and_the_lock_stops_the_claim(
    ledger: MyLedger, mariadb_settings: Settings
) -> None:
    [task_id] = enqueued(mariadb_settings, [TaskSpec("pick.paused")])

    won = await claim_with(ledger, lambda: ledger.pause("kind", "pick.paused", actor="t"))

    assert won == []
    assert await ledger.whereabouts([task_id]) == {task_id: "pending"}
    await ledger.resume("kind", "pick.paused", actor="t")
    assert [t.id for t in await ledger.claim_due(["default"], 10, "w-1", LEASE_S)] == [task_id]


async def test_an_earlier_task_of_the_key_back_in_line_after_the_read_stops_the_claim(
    ledger: MyLedger, mariadb_settings: Settings
) -> None:
    first, second = enqueued(
        mariadb_settings, [TaskSpec("pick.key", ordering_key="k", max_attempts=1)] * 2
    )
    [task] = await ledger.claim_due(["default"], 10, "w-1", LEASE_S)
    await ledger.finish([Outcome.failed(task.fence, "boom", final=True)])

    async def retry_first() -> object:
        return await ledger.act(Action.retry(), TaskFilter(ids=(first,)), actor="t")

    won = await claim_with(ledger, retry_first)  # read: second; locked: nothing

    assert won == []
    assert await ledger.whereabouts([first, second]) == {first: "pending", second: "pending"}
    assert [t.id for t in await ledger.claim_due(["default"], 10, "w-1", LEASE_S)] == [first]


async def test_two_direct_claimers_never_hold_two_tasks_of_one_key(
    ledger: MyLedger, mariadb_settings: Settings
) -> None:
    specs = [TaskSpec("pick.race", ordering_key=f"k{n % KEYS}") for n in range(KEYS * PER_KEY)]
    ids = enqueued(mariadb_settings, specs)
    key_of = {task_id: f"k{n % KEYS}" for n, task_id in enumerate(ids)}
    other = MyLedger(async_engine(mariadb_settings, "ledgerq-test-pick-2", pool_size=4))
    ran: dict[str, list[int]] = {}
    try:
        for _ in range(4 * PER_KEY):  # each round runs at least one task of every key
            rounds = await asyncio.gather(
                ledger.claim_due(["default"], 3, "w-1", LEASE_S),
                other.claim_due(["default"], 3, "w-2", LEASE_S),
            )
            held = [t for claimed in rounds for t in claimed]
            keys = [key_of[t.id] for t in held]
            assert len(keys) == len(set(keys)), f"two tasks of one key at once: {held}"
            for t in sorted(held, key=lambda t: t.id):
                ran.setdefault(key_of[t.id], []).append(t.id)
            await asyncio.gather(
                ledger.finish([Outcome.succeeded(t.fence) for t in rounds[0]]),
                other.finish([Outcome.succeeded(t.fence) for t in rounds[1]]),
            )
            if sum(len(v) for v in ran.values()) == len(ids):
                break
    finally:
        await other.dispose()

    assert sorted(i for v in ran.values() for i in v) == ids  # each ran once
    assert all(v == sorted(v) for v in ran.values())  # in id order within its key


async def test_two_claimers_and_a_relay_under_one_bucket_never_exceed_burst_plus_rate(
    ledger: MyLedger, mariadb_settings: Settings
) -> None:
    rate, burst, wanted = 20.0, 5.0, 25  # the 10 free tasks, 15 metered: refills too
    enqueued(mariadb_settings, [TaskSpec("pick.metered") for _ in range(60)])
    free = set(enqueued(mariadb_settings, [TaskSpec("pick.free") for _ in range(10)]))
    await ledger.subscribe("relay-window", [Subscription("default", capacity=100)], 600.0)
    other = MyLedger(async_engine(mariadb_settings, "ledgerq-test-pick-2", pool_size=2))
    took: list[int] = []
    start = time.monotonic()  # before the bucket is filled: the bound can only loosen
    await ledger.set_limit("pick.metered", RateLimit(rate, burst), actor="test")

    async def claimer(mine: MyLedger, worker: str) -> None:
        while len(took) < wanted:
            took.extend(t.id for t in await mine.claim_due(["default"], 4, worker, LEASE_S))

    async def relay() -> None:  # publishes (to nobody): the claimers never see those rows
        while len(took) < wanted:
            async with ledger.publish_batch(4) as batch:
                took.extend(await batch.mark_published(batch.rows))

    try:
        await asyncio.gather(claimer(ledger, "w-1"), claimer(other, "w-2"), relay())
    finally:
        await other.dispose()
    elapsed = time.monotonic() - start

    metered = [i for i in took if i not in free]
    assert len(took) == len(set(took))  # none twice
    assert free <= set(took)  # the free kind is not held back
    assert len(metered) >= wanted - len(free)
    assert len(metered) <= burst + rate * elapsed, (len(metered), elapsed)
