"""Priorities with aging (issue 14), each rule shown on the real ledger and broker.

* the relay takes higher priorities first;
* a retried task goes behind the never-run tasks of its priority (and stays
  ahead of lower priorities);
* a task due for the aging time or longer is taken before every priority, and is
  published at priority 9; with aging off it waits behind a stream of higher work;
* the broker delivers a queue's backlog highest priority first (``x-max-priority``);
* a backlog held in the ledger (no worker: the window is zero) reaches a worker
  highest priority first;
* a broker queue declared with other arguments is refused with the way out.

Nothing is published to a queue without a live subscriber (the window), so the
relay-order tests register a whole-queue subscriber with a large window.

Rows are created as a producer creates them; raw SQL only simulates time passing.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from typing import Any

import pika
import psycopg
import pytest

from ledgerq import Registry, TaskSpec
from ledgerq.broker.base import QueueMismatchError
from ledgerq.broker.topology import Topology
from ledgerq.consumers.worker import WorkerConfig
from ledgerq.core.config import Settings
from ledgerq.ledger.model import Outcome
from ledgerq.ledger.pg import PgLedger
from ledgerq.ledger.pg.engines import libpq_url
from ledgerq.relay.service import RelayConfig
from tests.harness import Pipeline, enqueue_committed, subscribe_like_worker, subscribe_queues


def make_due_earlier(settings: Settings, ids: Sequence[int], seconds: float) -> None:
    """Simulate time passing: the tasks became due ``seconds`` ago."""
    with psycopg.connect(libpq_url(settings.database_url), autocommit=True) as conn:
        conn.execute(
            "UPDATE ledgerq_tasks SET run_at = now() - make_interval(secs => %s) "
            "WHERE id = ANY(%s)",
            (seconds, list(ids)),
        )


async def taken(
    ledger: PgLedger, limit: int = 100, aging_s: float = 300.0
) -> list[tuple[int, int]]:
    """(id, priority) of what one relay batch would publish, in its order (rolled back)."""

    class Peek(Exception):
        pass

    await subscribe_queues(ledger, "default")  # a window larger than any batch here
    rows: list[tuple[int, int]] = []
    with pytest.raises(Peek):
        async with ledger.publish_batch(limit, aging_s) as batch:
            rows = [(r.id, r.priority) for r in batch.rows]
            raise Peek
    return rows


async def test_the_relay_takes_higher_priorities_first(
    ledger: PgLedger, settings: Settings
) -> None:
    ids = enqueue_committed(settings, [TaskSpec("t.p", priority=p) for p in (0, 5, 9, 3, 5)])
    assert await taken(ledger) == [(ids[2], 9), (ids[1], 5), (ids[4], 5), (ids[3], 3), (ids[0], 0)]


async def test_a_retried_task_goes_behind_the_never_run_tasks_of_its_priority(
    ledger: PgLedger, settings: Settings
) -> None:
    [first] = enqueue_committed(settings, [TaskSpec("t.p", priority=5)])
    [claimed] = await ledger.claim([(first, 0)], "w", 30)
    await ledger.finish([Outcome.failed(claimed.fence, "boom", delay=0.0)])
    # Enqueued after the retry became due: by due time alone it would come second.
    later = enqueue_committed(settings, [TaskSpec("t.p", priority=5), TaskSpec("t.p", priority=4)])
    assert await taken(ledger) == [(later[0], 5), (first, 5), (later[1], 4)]


async def test_an_aged_task_goes_first_and_is_published_at_the_top_priority(
    ledger: PgLedger, settings: Settings
) -> None:
    [low] = enqueue_committed(settings, [TaskSpec("t.p", priority=0)])
    high = enqueue_committed(settings, [TaskSpec("t.p", priority=9) for _ in range(5)])
    make_due_earlier(settings, [low], 400)
    assert await taken(ledger, limit=1, aging_s=300) == [(low, 9)]
    # Not yet aged: it waits behind the higher priorities, at its own.
    assert await taken(ledger, limit=6, aging_s=500) == [*((h, 9) for h in high), (low, 0)]
    # Aging off (0): priority alone decides.
    assert (await taken(ledger, limit=1, aging_s=0)) == [(high[0], 9)]


async def test_aging_bounds_the_wait_of_a_low_priority_task_under_a_stream_of_high(
    ledger: PgLedger, settings: Settings
) -> None:
    """A relay draining a constant stream of priority-9 work, 5 tasks per round, as
    many arriving each round: the priority-0 task starts within the aging time (plus a
    round) with aging on, and never with aging off.

    Time moves through the testing protocol, not the wall clock: each round is
    ``round_s`` (a minute) of the low task's age (``backdate`` of its ``run_at``),
    so how fast the machine runs a round cannot move the verdict."""
    round_s, aging_s = 60.0, 300.0

    async def rounds_until_low_is_published(aging_s: float, rounds: int) -> float | None:
        [low] = enqueue_committed(settings, [TaskSpec("t.low", priority=0)])
        for n in range(1, rounds + 1):
            enqueue_committed(settings, [TaskSpec("t.high", priority=9) for _ in range(5)])
            assert await ledger.backdate([low], "run_at", n * round_s) == 1
            backdated = asyncio.get_running_loop().time()
            async with ledger.publish_batch(5, aging_s) as batch:
                await batch.mark_published(batch.rows)
                if low in {r.id for r in batch.rows}:
                    # its age as the pick saw it: the rounds, and the real time since
                    return n * round_s + asyncio.get_running_loop().time() - backdated
        return None

    await subscribe_queues(ledger, "default")  # room for every round's batch
    assert await rounds_until_low_is_published(aging_s=0, rounds=30) is None
    await ledger.truncate()  # (the subscription too)
    await subscribe_queues(ledger, "default")
    waited = await rounds_until_low_is_published(aging_s=aging_s, rounds=60)
    assert waited is not None, "the low-priority task never started"
    assert aging_s <= waited < aging_s + round_s


async def test_the_broker_delivers_a_backlog_highest_priority_first(settings: Settings) -> None:
    """Published in two batches, low priorities first, into the broker queue of a worker
    that has not started yet (a stand-in subscription gives the route a large window),
    then consumed one at a time (concurrency 1, prefetch 1): the broker hands out the
    high ones first."""
    order: list[int] = []
    registry = Registry()

    @registry.task("t.ordered")
    async def record(payload: dict[str, Any], ctx: object) -> None:
        order.append(int(payload["p"]))

    config = WorkerConfig(concurrency=1, prefetch=1, lease_s=30, heartbeat_s=5, grace_s=5)
    # One task per message: the broker's ordering of messages is under test here, not
    # an envelope's (which would carry three tasks at its highest task's priority).
    relay = RelayConfig(batch_size=200, confirm_timeout=5, envelope_max=1)
    async with Pipeline(settings, registry, relay=relay, start_worker=False) as pipe:
        await subscribe_like_worker(settings, pipe.ledger, registry, config)
        low = enqueue_committed(
            settings, [TaskSpec("t.ordered", {"p": p}, priority=p) for p in (0, 1, 2)]
        )
        assert (await pipe.relay.run_once()).messages == len(low)
        high = enqueue_committed(
            settings, [TaskSpec("t.ordered", {"p": p}, priority=p) for p in (7, 8, 9)]
        )
        assert (await pipe.relay.run_once()).messages == len(high)
        assert set((await pipe.statuses(low + high)).values()) == {"published"}
        await pipe.ledger.unsubscribe("test-subscriber")  # the worker's own window: 1
    async with Pipeline(settings, registry, worker=config, relay=relay) as pipe:
        await pipe.settle(low + high)
    assert order == [9, 8, 7, 2, 1, 0]


async def test_a_backlog_held_in_the_ledger_reaches_a_worker_highest_priority_first(
    settings: Settings,
) -> None:
    """With no live subscriber nothing is published: enqueued low priorities first, the
    backlog waits in the ledger. A worker whose window is one task (concurrency 1,
    prefetch 1) then gets it highest priority first, one publish at a time."""
    order: list[int] = []
    registry = Registry()

    @registry.task("t.ordered")
    async def record(payload: dict[str, Any], ctx: object) -> None:
        order.append(int(payload["p"]))

    async with Pipeline(settings, registry, start_worker=False) as pipe:
        low = enqueue_committed(
            settings, [TaskSpec("t.ordered", {"p": p}, priority=p) for p in (0, 1, 2)]
        )
        assert (await pipe.relay.run_once()).published == 0
        high = enqueue_committed(
            settings, [TaskSpec("t.ordered", {"p": p}, priority=p) for p in (7, 8, 9)]
        )
        assert (await pipe.relay.run_once()).published == 0
        assert set((await pipe.statuses(low + high)).values()) == {"pending"}
    config = WorkerConfig(concurrency=1, prefetch=1, lease_s=30, heartbeat_s=5, grace_s=5)
    async with Pipeline(settings, registry, worker=config) as pipe:
        await pipe.settle(low + high)
    assert order == [9, 8, 7, 2, 1, 0]


async def test_a_queue_declared_without_priorities_is_refused_with_the_way_out(
    settings: Settings,
) -> None:
    """An older or hand-made queue (here: no ``x-max-priority``) makes RabbitMQ refuse
    ledgerq's declaration (PRECONDITION_FAILED). The worker stops with one line naming
    the queue and the fix; so does the relay, at its first batch for that queue (a
    live subscription on the worker's route, as another worker's would be),
    publishing nothing: the task stays pending."""
    registry = Registry()

    @registry.task("t.p")
    async def handler(payload: Any, ctx: object) -> None:
        raise AssertionError("never runs")

    config = WorkerConfig(concurrency=2, lease_s=30, heartbeat_s=5, grace_s=5)
    [subscription] = config.subscriptions(registry.kinds())
    topology = Topology(settings.amqp_prefix)
    name = topology.task_queue(subscription.broker_name).name  # the worker's broker queue
    connection = pika.BlockingConnection(pika.URLParameters(settings.amqp_url))
    try:
        connection.channel().queue_declare(name, durable=True)
    finally:
        connection.close()
    [task_id] = enqueue_committed(settings, [TaskSpec("t.p", priority=3)])
    with pytest.raises(
        QueueMismatchError, match=rf"queue '{re.escape(name)}'.*x-max-priority=9.*delete_queue"
    ):
        async with Pipeline(settings, registry, worker=config):
            pass
    async with Pipeline(settings, registry, start_worker=False) as pipe:
        await pipe.ledger.subscribe("test-subscriber", [subscription], 600)
        with pytest.raises(QueueMismatchError, match=rf"queue '{re.escape(name)}'.*delete_queue"):
            await pipe.relay.run_once()
        assert await pipe.statuses([task_id]) == {task_id: "pending"}
