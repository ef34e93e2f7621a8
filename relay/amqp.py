"""The aio-pika adapter: connect, declare the topology, publish with confirms.

Shared by the relay and the consumers so both declare queues with identical
arguments (RabbitMQ refuses a re-declaration that differs). Modelled on
dramatiq's broker seam: persistent messages, publisher confirms, ``mandatory``
so an unroutable message comes back as ``basic.return`` and is never taken for
delivered, and a ``message_id`` equal to the task id.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Sequence
from enum import Enum
from typing import cast

import aio_pika
import aiormq
from aio_pika.abc import (
    AbstractChannel,
    AbstractExchange,
    AbstractRobustConnection,
    DeliveryMode,
)
from pamqp.commands import Basic
from pamqp.common import FieldTable
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_delay, wait_fixed
from yarl import URL

from ledger.errors import ServiceUnavailableError
from ledger.store import DueTask
from ledger.topology import Topology, message_body, message_priority

log = logging.getLogger("relay.amqp")

#: What a connection failure looks like from aio-pika/aiormq.
CONNECTION_ERRORS: tuple[type[Exception], ...] = (
    OSError,
    aiormq.exceptions.AMQPError,
    asyncio.TimeoutError,
    aiormq.exceptions.ChannelInvalidStateError,
)


def display_amqp_url(url: str) -> str:
    parsed = URL(url)
    return str(parsed.with_password("***")) if parsed.password else str(parsed)


async def connect(
    url: str, *, wait_s: float = 10.0, name: str = "ledgerq"
) -> AbstractRobustConnection:
    """A robust connection, retried for ``wait_s`` seconds, else ServiceUnavailableError.

    After the first connect, aio-pika reconnects by itself and restores channels,
    exchanges, queues and consumers; what it cannot restore (a publish that was
    in flight, a delivery tag from the old channel) the callers handle.
    """
    try:
        async for attempt in AsyncRetrying(
            stop=stop_after_delay(wait_s),
            wait=wait_fixed(0.5),
            retry=retry_if_exception_type(CONNECTION_ERRORS),
            reraise=True,
        ):
            with attempt:
                return await aio_pika.connect_robust(
                    url, client_properties={"connection_name": name}, timeout=5
                )
    except CONNECTION_ERRORS as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ServiceUnavailableError("RabbitMQ", display_amqp_url(url), reason) from exc
    raise AssertionError("unreachable")  # pragma: no cover


async def declare(
    channel: AbstractChannel, topology: Topology, queues: Iterable[str]
) -> AbstractExchange:
    """Declare the exchange, the dead-letter exchange and queue, and ``queues``."""
    dlx = await channel.declare_exchange(
        topology.dead_letter_exchange, aio_pika.ExchangeType.FANOUT, durable=True
    )
    dead = await channel.declare_queue(topology.dead_letter_queue, durable=True)
    await dead.bind(dlx)
    exchange = await channel.declare_exchange(
        topology.exchange, aio_pika.ExchangeType.DIRECT, durable=True
    )
    for name in queues:
        await declare_queue(channel, exchange, topology, name)
    return exchange


async def declare_queue(
    channel: AbstractChannel, exchange: AbstractExchange, topology: Topology, name: str
) -> aio_pika.abc.AbstractQueue:
    queue = await channel.declare_queue(
        topology.queue(name), durable=True, arguments=cast(FieldTable, topology.queue_arguments())
    )
    await queue.bind(exchange, routing_key=topology.routing_key(name))
    return queue


def properties(task: DueTask) -> Basic.Properties:
    """A task message's properties: persistent, ``message_id`` = task id (aiormq also
    matches a ``basic.return`` to its publish by it), the kind as ``type``."""
    return Basic.Properties(
        message_id=str(task.id),
        message_type=task.kind,
        content_type="application/json",
        delivery_mode=int(DeliveryMode.PERSISTENT),
        priority=message_priority(task.priority),
    )


class Outcome(Enum):
    CONFIRMED = "confirmed"
    RETURNED = "returned"  # basic.return: unroutable, not delivered
    NACKED = "nacked"
    FAILED = "failed"  # timeout, closed channel, connection loss: unknown, so not delivered


class ConfirmedPublisher:
    """Publishes tasks on one confirm-mode channel and reports each outcome."""

    def __init__(self, connection: AbstractRobustConnection, topology: Topology) -> None:
        self._connection = connection
        self._topology = topology
        self._channel: AbstractChannel | None = None
        self._exchange: AbstractExchange | None = None
        self._declared: set[str] = set()

    async def _ready(self) -> tuple[AbstractChannel, AbstractExchange]:
        if self._channel is None or self._channel.is_closed or self._exchange is None:
            self._channel = await self._connection.channel(
                publisher_confirms=True, on_return_raises=False
            )
            self._exchange = await declare(self._channel, self._topology, ())
            self._declared.clear()
        return self._channel, self._exchange

    async def publish_many(self, tasks: Sequence[DueTask], timeout: float) -> list[Outcome]:
        """Publish every task concurrently and wait for each confirm (or return, or error)."""
        try:
            channel, exchange = await self._ready()
            for name in {t.queue for t in tasks} - self._declared:
                await declare_queue(channel, exchange, self._topology, name)
                self._declared.add(name)
        except CONNECTION_ERRORS as exc:
            log.warning("cannot open a publishing channel: %s", exc)
            self._channel = None
            return [Outcome.FAILED] * len(tasks)
        # aio-pika's Exchange.publish costs more CPU than the publish itself; the
        # relay talks to the confirm-mode channel underneath it (aiormq) directly.
        underlay = await channel.get_underlay_channel()
        results = await asyncio.gather(
            *(self._publish_one(underlay, t, timeout) for t in tasks), return_exceptions=False
        )
        return list(results)

    async def _publish_one(
        self, channel: aiormq.abc.AbstractChannel, task: DueTask, timeout: float
    ) -> Outcome:
        try:
            result = await channel.basic_publish(
                message_body(task.id, task.epoch),
                exchange=self._topology.exchange,
                routing_key=self._topology.routing_key(task.queue),
                properties=properties(task),
                mandatory=True,
                timeout=timeout,
            )
        except aiormq.exceptions.DeliveryError:
            log.warning("broker nacked task %s; it stays pending", task.id)
            return Outcome.NACKED
        except CONNECTION_ERRORS as exc:
            # The channel is reopened by _ready() only if it really closed; a
            # confirm that timed out on a healthy channel keeps it.
            log.warning("publish of task %s unconfirmed (%s); it stays pending", task.id, exc)
            return Outcome.FAILED
        if isinstance(result, Basic.Ack):
            return Outcome.CONFIRMED
        # A returned message (basic.return) is confirmed too; it was not delivered.
        log.warning(
            "task %s to queue %r was unroutable (basic.return); it stays pending",
            task.id,
            task.queue,
        )
        self._declared.discard(task.queue)  # re-declare its queue before the next try
        return Outcome.RETURNED

    async def close(self) -> None:
        if self._channel is not None and not self._channel.is_closed:
            await self._channel.close()
