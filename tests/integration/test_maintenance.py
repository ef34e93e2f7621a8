"""Each maintenance service on its own: its ``run_once()`` called directly, against
the real PostgreSQL and RabbitMQ (relay/maintenance.py). The loop that runs them all
under the lock is tests/integration/test_reconciler.py's."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

import pytest

from ledgerq import Registry, TaskSpec
from ledgerq.broker.base import Publisher
from ledgerq.compose import open_reconciler
from ledgerq.core.config import Settings
from ledgerq.ledger.pg import PgLedger
from ledgerq.relay.overdue import Overdue, OverdueConfig
from ledgerq.relay.reconciler import ReconcilerConfig
from ledgerq.relay.rescue import RescueConfig, Rescuer
from ledgerq.relay.stalled import Stalled, StalledConfig
from ledgerq.relay.unserved import Unserved, UnservedConfig
from tests.harness import Pipeline, enqueue_committed, subscribe_queues

T = TypeVar("T")


@pytest.fixture
async def publisher(settings: Settings) -> AsyncIterator[Publisher]:
    """The reconciler's blocking publisher with confirms, as the composition root builds it."""
    async with open_reconciler(settings) as reconciler:
        yield reconciler.publisher


async def until(
    step: Callable[[], Awaitable[T]], done: Callable[[T], bool], limit: float = 10
) -> T:
    """Run ``step`` until its result is ``done`` (a condition, not a fixed sleep)."""
    deadline = asyncio.get_running_loop().time() + limit
    while True:
        result = await step()
        if done(result) or asyncio.get_running_loop().time() > deadline:
            return result
        await asyncio.sleep(0.05)


async def _published(settings: Settings, ledger: PgLedger, n: int) -> list[int]:
    """``n`` tasks published by a relay to a live whole-queue subscriber."""
    ids = enqueue_committed(settings, [TaskSpec("t.m", {"i": i}) for i in range(n)])
    await subscribe_queues(ledger, "default")
    async with Pipeline(settings, Registry(), start_worker=False) as pipe:
        assert (await pipe.relay.run_once()).published == n
    return ids


async def test_rescuer_charges_a_lone_task_and_hands_its_dead_row_to_the_loop(
    settings: Settings, ledger: PgLedger
) -> None:
    [lone] = enqueue_committed(settings, [TaskSpec("t.m", {}, max_attempts=1)])
    shared = enqueue_committed(settings, [TaskSpec("t.m", {}) for _ in range(2)])
    await ledger.claim([(lone, 0)], "gone:1", lease_s=0.1)
    await ledger.claim([(i, 0) for i in shared], "gone:2", lease_s=0.1)
    await until(ledger.count_expired, lambda n: n == 3)
    rescuer = Rescuer(ledger, RescueConfig(page_size=1))
    counts = await rescuer.run_once()
    assert (counts.expired, counts.dead, counts.released, counts.orphaned) == (3, 1, 2, 0)
    assert counts.pages == 3  # one row a page
    assert [row.id for row in rescuer.take_buried()] == [lone]
    assert rescuer.take_buried() == []  # taken once
    assert await ledger.whereabouts([lone, *shared]) == {
        lone: "dead",
        shared[0]: "pending",
        shared[1]: "pending",
    }
    assert (await rescuer.run_once()).expired == 0  # nothing left: a second pass is a no-op


async def test_unserved_takes_back_rows_of_a_route_nobody_serves(
    settings: Settings, ledger: PgLedger
) -> None:
    ids = await _published(settings, ledger, 3)
    service = Unserved(ledger, UnservedConfig(page_size=2))
    assert (await service.run_once()).unpublished == 0  # still served
    await ledger.unsubscribe("test-subscriber")
    counts = await service.run_once()
    assert (counts.unpublished, counts.pages) == (3, 2)
    assert set((await ledger.whereabouts(ids)).values()) == {"pending"}
    assert {(await ledger.show(i))["epoch"] for i in ids} == {1}  # the stranded messages lose


async def test_stalled_publishes_again_what_nobody_claimed(
    settings: Settings, ledger: PgLedger, publisher: Publisher
) -> None:
    ids = await _published(settings, ledger, 2)
    # Time moves through the seam (backdate) against minute-long windows: a slow pass
    # cannot carry the rows across a window's edge (a 0.2 s window, doubled to 0.4 s,
    # was crossed by a loaded machine between two passes).
    service = Stalled(ledger, publisher, StalledConfig(stall_s=60, page_size=1))
    assert await ledger.backdate(ids, "published_at", 61) == 2
    counts = await until(service.run_once, lambda c: c.published > 0)
    assert (counts.published, counts.unconfirmed, counts.pages) == (
        2,
        0,
        2,
    )  # an empty page ends it
    assert {(await ledger.show(i))["publishes"] for i in ids} == {2}
    # published again a minute and a half ago: inside the doubled window (120 s)
    assert await ledger.backdate(ids, "published_at", 90) == 2
    assert (await service.run_once()).published == 0  # the window doubled


async def test_overdue_publishes_as_a_relay_would(
    settings: Settings, ledger: PgLedger, publisher: Publisher
) -> None:
    ids = enqueue_committed(settings, [TaskSpec("t.m", {}) for _ in range(3)])
    service = Overdue(ledger, publisher, OverdueConfig(stall_s=0.2))
    await until(service.run_once, lambda c: True, 0)
    assert set((await ledger.whereabouts(ids)).values()) == {"pending"}  # no live window
    await subscribe_queues(ledger, "default", capacity=2)
    counts = await until(service.run_once, lambda c: c.published > 0)
    assert (counts.published, counts.unconfirmed) == (2, 0)  # the window's credit, no more
    assert sorted((await ledger.whereabouts(ids)).values()) == ["pending", "published", "published"]


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: RescueConfig(settle_s=0), "settle_s must be positive"),
        (lambda: RescueConfig(page_size=0), "page_size must be 1..10000"),
        (lambda: UnservedConfig(page_size=10_001), "page_size must be 1..10000"),
        (lambda: StalledConfig(stall_s=-1), "stall_s must be positive"),
        (lambda: StalledConfig(queue_stall_s={"q": 0}), "stall window for queue 'q'"),
        (lambda: OverdueConfig(stall_s=0), "stall_s must be positive"),
        (lambda: ReconcilerConfig(settle_s=0), "settle_s must be positive"),
    ],
)
def test_each_config_validates_its_fields(build: Callable[[], object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build()


def test_the_reconciler_config_gives_each_service_its_part() -> None:
    config = ReconcilerConfig(stall_s=5, queue_stall_s={"q": 9}, page_size=7, settle_s=3)
    assert config.rescue() == RescueConfig(page_size=7, settle_s=3)
    assert config.unserved() == UnservedConfig(page_size=7)
    assert config.stalled() == StalledConfig(5, {"q": 9}, 7, config.confirm_timeout)
    assert config.overdue() == OverdueConfig(5, config.aging_s, 7, config.confirm_timeout)
