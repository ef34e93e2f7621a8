"""The raw ceilings: what this machine's broker does with aio-pika and nothing else.

A minimal publish-with-confirms loop (persistent, mandatory, pipelined in windows
like the relay) and a consume-with-ack loop, on a private queue of the same
broker, so every ledgerq figure can be read as a fraction of it; and
:func:`pipeline_ceiling`, the same two loops joined with the ledger writes every
task needs (lock and mark published, claim, finish), each in a process of its
own like the relay and the worker: the ceiling the no-op drain is compared with.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from multiprocessing.synchronize import Barrier, Event
from typing import TYPE_CHECKING, Protocol

import aio_pika
from aio_pika.abc import AbstractRobustConnection, DeliveryMode
from pamqp.commands import Basic

from ledgerq.compose.storage import RELAY_PLANNER, WORKER_PLANNER, async_engine, own_ledger_on
from ledgerq.compose.storage import amqp_connect as connect
from ledgerq.core.config import Settings
from ledgerq.ledger.model import Fence, Outcome
from ledgerq.ledger.routing import Subscription
from ledgerq.runtime import run_service

if TYPE_CHECKING:
    from ledgerq.ledger.protocol import RelayLedger, RoutingLedger, WorkerLedger

    class CeilingLedger(RelayLedger, WorkerLedger, RoutingLedger, Protocol):
        """What the ceiling's two sides ask of the ledger (either server's)."""

        async def dispose(self) -> None: ...


BODY = b'{"id":123456789,"epoch":0}'


async def raw_ceiling(
    amqp_url: str, messages: int, window: int = 500, prefetch: int = 256
) -> tuple[float, float]:
    """Return (publishes/s with confirms, consumes/s with acks)."""
    connection = await connect(amqp_url, name="ledgerq-bench-raw")
    try:
        channel = await connection.channel(publisher_confirms=True)
        queue = await channel.declare_queue(
            f"ledgerq-bench-raw.{uuid.uuid4().hex[:8]}", durable=True, auto_delete=False
        )
        exchange = channel.default_exchange
        started = time.perf_counter()
        for first in range(0, messages, window):
            count = min(window, messages - first)
            await asyncio.gather(
                *(
                    exchange.publish(
                        aio_pika.Message(
                            BODY, delivery_mode=DeliveryMode.PERSISTENT, message_id=str(first + i)
                        ),
                        routing_key=queue.name,
                        mandatory=True,
                    )
                    for i in range(count)
                )
            )
        publish_s = time.perf_counter() - started

        consume_channel = await connection.channel()
        await consume_channel.set_qos(prefetch_count=prefetch)
        consume_queue = await consume_channel.get_queue(queue.name)
        received = 0
        done = asyncio.Event()

        async def on_message(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            nonlocal received
            await message.ack()
            received += 1
            if received >= messages:
                done.set()

        started = time.perf_counter()
        tag = await consume_queue.consume(on_message)
        await asyncio.wait_for(done.wait(), timeout=max(60.0, messages / 100))
        consume_s = time.perf_counter() - started
        await consume_queue.cancel(tag)
        await queue.delete(if_unused=False, if_empty=False)
        return messages / publish_s, messages / consume_s
    finally:
        await connection.close()


def pipeline_ceiling(
    settings: Settings, tasks: int, batch: int = 500, prefetch: int = 1000
) -> float:
    """A minimal publish -> consume -> ack pipeline with the per-task ledger writes
    of the real one, and nothing else, in two processes as the relay and the worker
    are; tasks/s.

    ``tasks`` pending rows must be in the ledger. The publishing process locks due
    rows (``select_due``), publishes them with confirms and marks them published,
    two batches at a time; the consuming process claims what arrived in one statement, finishes the
    winners ``succeeded`` in one more, and acks (one ``multiple`` ack per batch),
    claiming the next batch while it finishes the last, as the worker does.
    No handler, no heartbeat, no metrics, no scheduling of its own: what the real
    relay and worker add to this is their own cost. It runs the services' planner
    settings and publishes as the relay does (on aiormq's channel), so that it
    is no slower than they are at what they share. Both processes start (imports,
    connections) before the clock does; it stops when the consumer has acked the
    last task."""
    queue = f"ledgerq-bench-pipeline.{uuid.uuid4().hex[:8]}"
    context = multiprocessing.get_context("spawn")
    ready, go = context.Barrier(3), context.Event()
    results: multiprocessing.Queue[float] = context.Queue()
    run = _Run(settings, queue, tasks, batch, prefetch, ready, go, results)
    sides = [context.Process(target=_side, args=(role, run)) for role in ("consume", "publish")]
    for side in sides:
        side.start()
    try:
        ready.wait(timeout=120)  # both connected, the queue declared
        started = time.monotonic()
        go.set()
        finished = results.get(timeout=max(120.0, tasks / 100))
        return tasks / (finished - started)
    finally:
        for side in sides:
            side.join(timeout=30)
            if side.is_alive():
                side.kill()


#: Each side's service, whose planner settings it runs on.
_PLANNERS = {"consume": WORKER_PLANNER, "publish": RELAY_PLANNER}

#: The subscriber the ceiling registers (its window), released by :func:`release_ceiling`.
CEILING = "bench-pipeline"


async def release_ceiling(settings: Settings) -> None:
    """Expire the ceiling's subscription, whatever became of its processes: left
    live, its window would take the drains' tasks to a queue nobody reads."""
    async with _ledger(settings, "ledgerq-bench-pipeline") as ledger:
        await ledger.unsubscribe(CEILING)


@dataclass(frozen=True)
class _Run:
    """What both processes of :func:`pipeline_ceiling` are given."""

    settings: Settings
    queue: str
    tasks: int
    batch: int
    prefetch: int
    ready: Barrier
    go: Event
    results: multiprocessing.Queue[float]


def _side(role: str, run: _Run) -> None:
    """One process of :func:`pipeline_ceiling`, on the services' event loop."""
    main = _consume if role == "consume" else _publish
    run_service(main(run), run.settings.event_loop)


@asynccontextmanager
async def _ledger(
    settings: Settings, application_name: str, planner: tuple[str, ...] = ()
) -> AsyncIterator[CeilingLedger]:
    """The benchmark's one database's ledger, on PostgreSQL or MySQL / MariaDB
    (``planner``: a PostgreSQL service's planner settings), disposed of on exit."""
    ledger = own_ledger_on(async_engine(settings, application_name, 2, planner=planner))
    try:
        yield ledger
    finally:
        await ledger.dispose()


@asynccontextmanager
async def _opened(
    run: _Run, role: str
) -> AsyncIterator[tuple[AbstractRobustConnection, CeilingLedger]]:
    """A side's broker connection and its ledger, on its service's planner settings
    (the worker's for ``consume``, the relay's for ``publish``)."""
    connection = await connect(run.settings.amqp_url, name=f"ledgerq-bench-pipeline-{role}")
    try:
        async with _ledger(run.settings, "ledgerq-bench-pipeline", _PLANNERS[role]) as ledger:
            yield connection, ledger
    finally:
        await connection.close()


async def _consume(run: _Run) -> None:
    queue_name, tasks, batch = run.queue, run.tasks, run.batch
    async with _opened(run, "consume") as (connection, ledger):
        channel = await connection.channel()
        await channel.set_qos(prefetch_count=run.prefetch)
        queue = await channel.declare_queue(queue_name, durable=True, auto_delete=False)
        arrived: list[tuple[Fence, aio_pika.abc.AbstractIncomingMessage]] = []
        wake = asyncio.Event()

        async def on_message(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            body = json.loads(message.body)
            arrived.append(((int(body["id"]), int(body["epoch"])), message))
            wake.set()

        claimed: asyncio.Queue[tuple[list[Fence], aio_pika.abc.AbstractIncomingMessage, int]]
        claimed = asyncio.Queue(maxsize=2)

        async def claim() -> None:  # claims overlap finishes, as in the worker
            while True:
                await wake.wait()
                wake.clear()
                while arrived:
                    taken = arrived[:batch]
                    del arrived[: len(taken)]
                    won = await ledger.claim([f for f, _ in taken], "bench-pipeline", 60.0)
                    await claimed.put(([t.fence for t in won], taken[-1][1], len(taken)))

        tag = await queue.consume(on_message)
        await asyncio.to_thread(run.ready.wait)
        claimer = asyncio.create_task(claim())
        finished = 0
        while finished < tasks:
            fences, last, count = await claimed.get()
            await ledger.finish([Outcome.succeeded(f) for f in fences])
            await last.ack(multiple=True)
            finished += count
        run.results.put(time.monotonic())
        claimer.cancel()
        await queue.cancel(tag)
        await queue.delete(if_unused=False, if_empty=False)


async def _publish(run: _Run) -> None:
    queue_name, tasks, batch = run.queue, run.tasks, run.batch
    async with _opened(run, "publish") as (connection, ledger):
        channel = await connection.channel(publisher_confirms=True)
        await channel.declare_queue(queue_name, durable=True, auto_delete=False)
        # On the confirm-mode channel underneath aio-pika, as the relay publishes.
        raw = await channel.get_underlay_channel()
        persistent = Basic.Properties(delivery_mode=int(DeliveryMode.PERSISTENT))
        # A window as large as the backlog: this ceiling is the path of one
        # message per task with nothing held back (the relay's selection
        # publishes nothing to a route nobody subscribed).
        await ledger.subscribe(CEILING, [Subscription("default", capacity=tasks)], 600.0)
        await asyncio.to_thread(run.ready.wait)
        await asyncio.to_thread(run.go.wait)
        published = 0

        async def publish() -> None:  # two of these overlap, as the relay's batches do
            nonlocal published
            while published < tasks:
                async with ledger.publish_batch(batch) as due:
                    if not due.rows:  # the other one holds the rest
                        await asyncio.sleep(0.005)
                        continue
                    await asyncio.gather(
                        *(
                            raw.basic_publish(
                                json.dumps({"id": row.id, "epoch": row.epoch}).encode(),
                                routing_key=queue_name,
                                properties=persistent,
                                mandatory=True,
                            )
                            for row in due.rows
                        )
                    )
                    published += len(await due.mark_published(due.rows))

        await asyncio.gather(publish(), publish())
