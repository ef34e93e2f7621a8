"""The aio-pika adapter (the relay publishes, the worker consumes).

:func:`connect` makes a robust connection: after the first connect, aio-pika
reconnects by itself and restores channels, queues and consumers; what it cannot
restore (a publish in flight, a delivery tag from the old channel) the callers
handle. Every client error that means "the connection or channel failed" leaves
this module as :class:`~.base.BrokerConnectionError`.

The first connect is bounded: a broker that cannot be reached is tried every
0.5 s for ``wait_s`` seconds (then :class:`ServiceUnavailableError`); a broker
that refuses the user or password is not tried again
(:class:`CredentialsRefusedError` at once); a URL the client cannot use is a
:class:`ConfigError` at once. A failed attempt's connection object is closed, so
no reconnect loop of aio-pika's outlives it.

TLS (``amqps://``) uses the ``ssl_context`` the caller gives (the composition
root passes :meth:`Settings.amqp_ssl_context`, the same one the pika adapter
gets), never TLS parameters of the URL. A broker certificate that context does
not accept (unknown CA, wrong host name) is a :class:`ServiceUnavailableError`
at once that says so: retrying cannot help.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Sequence
from typing import cast

import aio_pika
import aiormq
from aio_pika.abc import (
    AbstractChannel,
    AbstractIncomingMessage,
    AbstractQueue,
    AbstractRobustConnection,
    DeliveryMode,
)
from pamqp.commands import Basic
from pamqp.common import FieldTable
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    retry_if_not_exception_type,
    stop_after_delay,
    wait_fixed,
)

from ledgerq.broker.base import (
    BrokerConnectionError,
    Envelope,
    OnDelivery,
    PublishOutcome,
    QueueMismatchError,
)
from ledgerq.broker.failover import FailoverConnection
from ledgerq.broker.topology import MessageSpec, QueueSpec, Topology, mismatch
from ledgerq.core.errors import ConfigError, CredentialsRefusedError, ServiceUnavailableError
from ledgerq.core.masking import mask_text, mask_url, secrets_of, split_urls
from ledgerq.core.tls import amqp_certificate_problem

log = logging.getLogger("ledgerq.broker")

#: What a connection failure looks like from aio-pika/aiormq.
_CONNECTION_ERRORS: tuple[type[Exception], ...] = (
    OSError,
    aiormq.exceptions.AMQPError,
    asyncio.TimeoutError,
    aiormq.exceptions.ChannelInvalidStateError,
)


#: The broker answered and refused the login: retrying cannot help.
_REFUSALS: tuple[type[Exception], ...] = (
    aiormq.exceptions.ProbableAuthenticationError,
    aiormq.exceptions.AuthenticationError,
)
#: Seconds between connect attempts, and the client's own timeout for one.
RETRY_EVERY_S = 0.5
ATTEMPT_TIMEOUT_S = 5.0
#: Longest wait for the broker to confirm a consumer's cancel at shutdown.
CANCEL_WAIT_S = 2.0


def _reason(exc: BaseException, url: str) -> str:
    text = str(exc).splitlines()[0] if str(exc).strip() else type(exc).__name__
    return mask_text(text, secrets_of(url))


async def _attempt(
    urls: Sequence[str], first: int, name: str, budget: float, ssl_context: ssl.SSLContext | None
) -> AbstractRobustConnection:
    """One connect to ``urls[first]``, given up after ``budget`` seconds; a failed
    one is closed. Its reconnects go round the other nodes (:mod:`.failover`)."""
    url = urls[first % len(urls)]
    try:
        connection = FailoverConnection(
            urls, first, ssl_context=ssl_context, client_properties={"connection_name": name}
        )
    except (ValueError, TypeError) as exc:
        raise ConfigError(
            f"LEDGERQ_AMQP_URL / --amqp-url (RabbitMQ) cannot be used: {mask_url(url)!r}: "
            f"{_reason(exc, url)}"
        ) from exc
    try:
        await asyncio.wait_for(connection.connect(timeout=ATTEMPT_TIMEOUT_S), budget)
    except BaseException as exc:
        await _abandon(connection)
        problem = amqp_certificate_problem(exc)
        if problem is not None:  # not a connection error: never retried
            raise ServiceUnavailableError("RabbitMQ", url, problem) from exc
        raise
    return connection


#: The connection type :func:`connect` returns (for callers that hold one).
AmqpConnection = AbstractRobustConnection


def is_connected(connection: AbstractRobustConnection) -> bool:
    """Whether the robust connection is up now (not closed, not reconnecting)."""
    return not connection.is_closed and connection.connected.is_set()


async def _abandon(connection: AbstractRobustConnection) -> None:
    try:
        await connection.close()
    except Exception as exc:  # it never opened; nothing is lost
        log.debug("closing a failed connection attempt: %r", exc)


async def connect(
    url: str,
    *,
    wait_s: float = 10.0,
    name: str = "ledgerq",
    ssl_context: ssl.SSLContext | None = None,
) -> AbstractRobustConnection:
    """A robust connection within ``wait_s`` seconds (see the module docstring);
    ``ssl_context`` is the TLS context of an ``amqps://`` URL. ``url`` may list
    several nodes (comma-separated): each attempt tries the next."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    urls = split_urls(url)
    tried = 0

    def waiting(state: RetryCallState) -> None:  # one line while it waits (-v)
        if state.attempt_number == 1 and state.outcome is not None:
            error = state.outcome.exception()
            reason = "?" if error is None else _reason(error, url)
            log.info(
                "RabbitMQ at %s does not answer yet (%s); trying for up to %g s",
                mask_url(urls[0]),
                reason,
                wait_s,
            )

    try:
        async for attempt in AsyncRetrying(
            stop=stop_after_delay(wait_s),
            wait=wait_fixed(RETRY_EVERY_S),
            retry=retry_if_exception_type(_CONNECTION_ERRORS)
            & retry_if_not_exception_type(_REFUSALS),
            before_sleep=waiting,
            reraise=True,
        ):
            with attempt:
                budget = max(deadline - loop.time(), 0.0) + ATTEMPT_TIMEOUT_S
                tried += 1
                return await _attempt(urls, tried - 1, name, budget, ssl_context)
    except _REFUSALS as exc:
        raise CredentialsRefusedError("RabbitMQ", url, _reason(exc, url)) from exc
    except _CONNECTION_ERRORS as exc:
        reason = _reason(exc, url)
        if wait_s:
            reason += f" (tried for {wait_s:g} s)"
        raise ServiceUnavailableError("RabbitMQ", url, reason) from exc
    raise AssertionError("unreachable")  # pragma: no cover


async def _declare_base(channel: AbstractChannel, topology: Topology) -> None:
    exchanges, queues = topology.base()
    for exchange in exchanges:
        await channel.declare_exchange(
            exchange.name, aio_pika.ExchangeType(exchange.type), durable=exchange.durable
        )
    for queue in queues:
        await _declare_queue(channel, queue)


async def _declare_queue(channel: AbstractChannel, spec: QueueSpec) -> AbstractQueue:
    try:
        queue = await channel.declare_queue(
            spec.name, durable=spec.durable, arguments=cast(FieldTable, dict(spec.arguments))
        )
    except aiormq.exceptions.ChannelPreconditionFailed as exc:
        raise QueueMismatchError(mismatch(spec, str(exc))) from exc
    await queue.bind(spec.exchange, routing_key=spec.routing_key)
    return queue


def _properties(message: MessageSpec) -> Basic.Properties:
    return Basic.Properties(
        message_id=message.message_id,
        message_type=message.type,
        content_type=message.content_type,
        delivery_mode=int(
            DeliveryMode.PERSISTENT if message.persistent else DeliveryMode.NOT_PERSISTENT
        ),
        priority=message.priority,
    )


class AioPublisher:
    """:class:`~.base.Publisher` on one confirm-mode channel."""

    def __init__(self, connection: AbstractRobustConnection, topology: Topology) -> None:
        self._connection = connection
        self._topology = topology
        self._channel: AbstractChannel | None = None
        self._declared: set[str] = set()

    async def _ready(self, queues: set[str]) -> aiormq.abc.AbstractChannel:
        if self._channel is None or self._channel.is_closed:
            self._channel = await self._connection.channel(
                publisher_confirms=True, on_return_raises=False
            )
            await _declare_base(self._channel, self._topology)
            self._declared.clear()
        for name in queues - self._declared:
            await _declare_queue(self._channel, self._topology.task_queue(name))
            self._declared.add(name)
        # aio-pika's Exchange.publish costs more CPU than the publish itself; the
        # relay talks to the confirm-mode channel underneath it (aiormq) directly.
        return await self._channel.get_underlay_channel()

    async def publish_many(
        self, envelopes: Sequence[Envelope], timeout: float
    ) -> list[PublishOutcome]:
        if not is_connected(self._connection):  # aio-pika would raise a bare RuntimeError
            self._channel = None
            raise BrokerConnectionError("not connected to RabbitMQ (reconnecting)")
        try:
            messages = [self._topology.message(e) for e in envelopes]
            # Declared as the workers declare them: the broker queue of each
            # envelope's route (a mismatch is found here, not by a return).
            channel = await self._ready({m.routing_key for m in messages})
        except QueueMismatchError:  # a configuration error: the relay stops on it
            self._channel = None
            raise
        except _CONNECTION_ERRORS as exc:
            log.warning("cannot open a publishing channel: %s", exc)
            self._channel = None
            return [PublishOutcome.FAILED] * len(envelopes)
        return list(
            await asyncio.gather(*(self._publish_one(channel, m, timeout) for m in messages))
        )

    async def _publish_one(
        self, channel: aiormq.abc.AbstractChannel, message: MessageSpec, timeout: float
    ) -> PublishOutcome:
        try:
            result = await channel.basic_publish(
                message.body,
                exchange=message.exchange,
                routing_key=message.routing_key,
                properties=_properties(message),
                mandatory=message.mandatory,
                timeout=timeout,
            )
        except aiormq.exceptions.DeliveryError:
            log.warning("broker nacked message %s; it stays pending", message.message_id)
            return PublishOutcome.NACKED
        except _CONNECTION_ERRORS as exc:
            # The channel is reopened by _ready() only if it really closed; a
            # confirm that timed out on a healthy channel keeps it.
            log.warning(
                "publish of message %s unconfirmed (%s); it stays pending", message.message_id, exc
            )
            return PublishOutcome.FAILED
        if isinstance(result, Basic.Ack):
            return PublishOutcome.CONFIRMED
        # A returned message (basic.return) is confirmed too; it was not delivered.
        log.warning(
            "message %s to %r was unroutable (basic.return); it stays pending",
            message.message_id,
            message.routing_key,
        )
        self._declared.discard(message.routing_key)  # re-declare it before the next try
        return PublishOutcome.RETURNED

    async def close(self) -> None:
        if self._channel is not None and not self._channel.is_closed:
            await self._channel.close()


class AioDelivery:
    """:class:`~.base.Delivery` over an aio-pika message."""

    __slots__ = ("_message", "channel")

    def __init__(self, message: AbstractIncomingMessage) -> None:
        self._message = message
        # Valid now; aio-pika raises once the channel has closed. Held, so the
        # channel object (and its id) outlives every delivery that names it.
        self.channel: object = message.channel

    @property
    def body(self) -> bytes:
        return self._message.body

    @property
    def message_id(self) -> str | None:
        return self._message.message_id

    @property
    def delivery_tag(self) -> int:
        tag = self._message.delivery_tag
        assert tag is not None, "a consumed delivery always has a tag"
        return tag

    async def ack(self, multiple: bool = False) -> None:
        try:
            await self._message.ack(multiple=multiple)
        except _CONNECTION_ERRORS as exc:
            raise BrokerConnectionError(str(exc)) from exc

    async def reject(self, requeue: bool) -> None:
        try:
            await self._message.reject(requeue=requeue)
        except _CONNECTION_ERRORS as exc:
            raise BrokerConnectionError(str(exc)) from exc


class AioConsumption:
    """Consumers on one channel, one per queue; see :meth:`consume`."""

    def __init__(
        self, connection: AbstractRobustConnection, consumers: list[tuple[AbstractQueue, str]]
    ) -> None:
        self._connection = connection
        self._consumers = consumers

    @classmethod
    async def consume(
        cls,
        connection: AbstractRobustConnection,
        topology: Topology,
        queues: Sequence[str],
        prefetch: int,
        on_delivery: OnDelivery,
    ) -> AioConsumption:
        """Declare ``queues`` and push their deliveries to ``on_delivery``, at most
        ``prefetch`` unsettled at a time."""
        channel = await connection.channel()
        await channel.set_qos(prefetch_count=prefetch)
        await _declare_base(channel, topology)

        async def deliver(message: AbstractIncomingMessage) -> None:
            await on_delivery(AioDelivery(message))

        consumers = []
        for name in queues:
            queue = await _declare_queue(channel, topology.task_queue(name))
            consumers.append((queue, await queue.consume(deliver, no_ack=False)))
        return cls(connection, consumers)

    async def cancel(self) -> None:
        """Cancel every consumer, waiting at most :data:`CANCEL_WAIT_S` for the broker,
        and not at all while the connection is down (aio-pika's cancel would wait for
        the reconnect, which may never come: a stop must not). A consumer whose cancel
        was not confirmed is still never restored by a reconnect (aio-pika drops it
        from its restore list first); it ends with its channel, and the broker
        requeues what it had delivered unacked."""
        cancels = [asyncio.ensure_future(queue.cancel(tag)) for queue, tag in self._consumers]
        if not cancels:
            return
        # Even with the connection down each cancel takes its first step (the one
        # that stops its consumer's restoration) before the wait ends.
        wait = CANCEL_WAIT_S if is_connected(self._connection) else 0.1
        done, late = await asyncio.wait(cancels, timeout=wait)
        for cancel in late:
            cancel.cancel()
        await asyncio.gather(*late, return_exceptions=True)
        if late:
            log.info(
                "RabbitMQ did not confirm the cancel of %d consumers within %.1fs (the "
                "connection is down or slow); they end with the channel",
                len(late),
                wait,
            )
        for cancel in done:
            exc = cancel.exception()
            if isinstance(exc, _CONNECTION_ERRORS):
                log.info("cancelling a consumer failed (%s); the channel is already gone", exc)
            elif exc is not None:
                raise exc
