"""The raw ceilings: what this machine's broker does with aio-pika and nothing else.

A minimal publish-with-confirms loop (persistent, mandatory, pipelined in windows
like the relay) and a consume-with-ack loop, on a private queue of the same
broker, so every ledgerq figure can be read as a fraction of it; and
:func:`pipeline_ceiling`, the same two loops joined with the ledger writes every
task needs (lock and mark published, claim, finish), the ceiling the no-op
drain is compared with.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid

import aio_pika
from aio_pika.abc import DeliveryMode

from ledgerq.ledger.model import Fence, Outcome
from ledgerq.ledger.protocol import Ledger
from ledgerq.relay.broker.aio import connect

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


async def pipeline_ceiling(
    ledger: Ledger, amqp_url: str, tasks: int, batch: int = 500, prefetch: int = 256
) -> float:
    """A minimal publish -> consume -> ack pipeline with the per-task ledger writes
    of the real one, and nothing else; tasks/s.

    ``tasks`` pending rows must be in the ledger. One loop locks due rows
    (``select_due``), publishes them with confirms and marks them published; the
    consumer claims what arrived in one statement, finishes the winners
    ``succeeded`` in one more, and acks (one ``multiple`` ack per batch). No
    relay or worker process, no handler, no heartbeat, no metrics: what the
    real pipeline adds to this is its own cost."""
    connection = await connect(amqp_url, name="ledgerq-bench-pipeline")
    try:
        channel = await connection.channel(publisher_confirms=True)
        queue = await channel.declare_queue(
            f"ledgerq-bench-pipeline.{uuid.uuid4().hex[:8]}", durable=True, auto_delete=False
        )
        consume_channel = await connection.channel()
        await consume_channel.set_qos(prefetch_count=prefetch)
        consume_queue = await consume_channel.get_queue(queue.name)
        arrived: list[tuple[Fence, aio_pika.abc.AbstractIncomingMessage]] = []
        wake = asyncio.Event()

        async def on_message(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            body = json.loads(message.body)
            arrived.append(((int(body["id"]), int(body["epoch"])), message))
            wake.set()

        async def consume() -> None:
            finished = 0
            while finished < tasks:
                await wake.wait()
                wake.clear()
                while arrived:
                    taken = arrived[:batch]
                    del arrived[: len(taken)]
                    won = await ledger.claim([f for f, _ in taken], "bench-pipeline", 60.0)
                    await ledger.finish([Outcome.succeeded(t.fence) for t in won])
                    await taken[-1][1].ack(multiple=True)
                    finished += len(taken)

        started = time.perf_counter()
        consumer = asyncio.create_task(consume())
        tag = await consume_queue.consume(on_message)
        published = 0
        while published < tasks:
            async with ledger.publish_batch(batch) as due:
                await asyncio.gather(
                    *(
                        channel.default_exchange.publish(
                            aio_pika.Message(
                                json.dumps({"id": row.id, "epoch": row.epoch}).encode(),
                                delivery_mode=DeliveryMode.PERSISTENT,
                                message_id=str(row.id),
                            ),
                            routing_key=queue.name,
                            mandatory=True,
                        )
                        for row in due.rows
                    )
                )
                published += len(await due.mark_published(due.rows))
        await asyncio.wait_for(consumer, timeout=max(60.0, tasks / 100))
        elapsed = time.perf_counter() - started
        await consume_queue.cancel(tag)
        await queue.delete(if_unused=False, if_empty=False)
        return tasks / elapsed
    finally:
        await connection.close()
