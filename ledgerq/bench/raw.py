"""The raw ceiling: what this machine's broker does with aio-pika and nothing else.

A minimal publish-with-confirms loop (persistent, mandatory, pipelined in windows
like the relay) and a consume-with-ack loop, on a private queue of the same
broker, so every ledgerq figure can be read as a fraction of it.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import aio_pika
from aio_pika.abc import DeliveryMode

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
