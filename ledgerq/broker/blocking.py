"""The pika adapter: a blocking, confirm-mode publisher for the reconciler.

The reconciler is a short-lived cron job, and the product card asks for pika
there. Each publish is ``mandatory`` and waits for its confirm: pika raises
``UnroutableError`` for a ``basic.return`` and ``NackError`` for a nack, and both
leave the row as it was. :class:`ThreadedPublisher` gives the async reconciler
the same :class:`~.base.Publisher` the relay has, running every pika call on
one thread of its own (a pika connection must stay on one thread).

The first connect keeps trying, every 0.5 s, for ``wait_s`` seconds (the
reconciler passes ``LEDGERQ_CONNECT_WAIT_S``); a reconnect after a broker
restart tries twice. A broker that refuses the user or password is never tried
again: :class:`CredentialsRefusedError` at once.

TLS (``amqps://``) uses the ``ssl_context`` the caller gives (the composition
root passes :meth:`Settings.amqp_ssl_context`, the same one the aio-pika adapter
gets), with the URL's host as the name the certificate must hold. A broker
certificate it does not accept is a :class:`ServiceUnavailableError` at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pika
import pika.exceptions

from ledgerq.broker.base import Envelope, PublishOutcome, QueueMismatchError
from ledgerq.broker.topology import MessageSpec, QueueSpec, Topology, mismatch
from ledgerq.core.errors import ConfigError, CredentialsRefusedError, ServiceUnavailableError
from ledgerq.core.masking import mask_text, mask_url, secrets_of, split_urls
from ledgerq.core.tls import amqp_certificate_problem

log = logging.getLogger("ledgerq.broker")

_CONNECTION_ERRORS = (
    pika.exceptions.AMQPConnectionError,
    pika.exceptions.AMQPChannelError,
    OSError,
)
_REFUSALS = (
    pika.exceptions.ProbableAuthenticationError,
    pika.exceptions.AuthenticationError,
    pika.exceptions.ProbableAccessDeniedError,
)
CONNECT_ATTEMPTS = 2
#: AMQP's reply code for a declaration whose arguments differ from the existing one's.
PRECONDITION_FAILED = 406
RETRY_EVERY_S = 0.5


class BlockingPublisher:
    def __init__(
        self,
        url: str,
        topology: Topology,
        timeout: float = 5.0,
        wait_s: float = 0.0,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self._url = url
        self._ssl_context = ssl_context
        self._topology = topology
        self._timeout = timeout
        self._connection: Any = None
        self._channel: Any = None
        self._declared: set[str] = set()
        self._ensure(wait_s)

    def _ensure(self, wait_s: float = 0.0) -> None:
        """Connect (again, after a broker restart) and declare the base topology;
        connection failures are retried for ``wait_s`` seconds, and at least once."""
        if self._channel is not None and self._channel.is_open:
            return
        self.close()
        params = [self._parameters(url) for url in split_urls(self._url)]
        deadline = time.monotonic() + wait_s
        attempt = 0
        while True:
            attempt += 1
            try:
                self._open(params)
                break
            except _REFUSALS as exc:
                self.close()
                raise CredentialsRefusedError("RabbitMQ", self._url, self._reason(exc)) from exc
            except _CONNECTION_ERRORS as exc:
                self.close()
                problem = amqp_certificate_problem(exc)
                if problem is not None:
                    raise ServiceUnavailableError("RabbitMQ", self._url, problem) from exc
                if attempt >= CONNECT_ATTEMPTS and time.monotonic() + RETRY_EVERY_S > deadline:
                    reason = self._reason(exc)
                    if wait_s:
                        reason += f" (tried for {wait_s:g} s)"
                    raise ServiceUnavailableError("RabbitMQ", self._url, reason) from exc
            time.sleep(RETRY_EVERY_S)
        self._declared.clear()

    def _parameters(self, url: str) -> pika.URLParameters:
        try:
            params = pika.URLParameters(url)
        except (ValueError, TypeError) as exc:
            raise ConfigError(
                f"LEDGERQ_AMQP_URL / --amqp-url (RabbitMQ) cannot be used: "
                f"{mask_url(url)!r}: {self._reason(exc)}"
            ) from exc
        params.connection_attempts = 1
        if self._ssl_context is not None:
            params.ssl_options = pika.SSLOptions(self._ssl_context, params.host)
        # A confirm that does not come within the timeout fails the connection (pika
        # has no per-publish confirm timeout): the rest of the page waits.
        params.socket_timeout = self._timeout
        params.blocked_connection_timeout = self._timeout
        return params

    def _open(self, params: Sequence[pika.URLParameters]) -> None:
        """Connect to the first node of ``params`` that answers (pika tries them in
        order), then declare the base topology."""
        self._connection = pika.BlockingConnection(list(params))
        self._channel = self._connection.channel()
        self._channel.confirm_delivery()
        exchanges, queues = self._topology.base()
        for exchange in exchanges:
            self._channel.exchange_declare(exchange.name, exchange.type, durable=exchange.durable)
        try:
            for queue in queues:
                self._declare(queue)
        except QueueMismatchError:
            self.close()  # not retried: the caller gets the error
            raise

    def _reason(self, exc: BaseException) -> str:
        reason = "; ".join(str(a) for a in exc.args) or "connection refused or timed out"
        return mask_text(reason, secrets_of(self._url))

    def _declare(self, spec: QueueSpec) -> None:
        try:
            self._channel.queue_declare(
                spec.name, durable=spec.durable, arguments=dict(spec.arguments)
            )
        except pika.exceptions.ChannelClosedByBroker as exc:
            if exc.reply_code != PRECONDITION_FAILED:
                raise
            self._channel = None
            raise QueueMismatchError(mismatch(spec, exc.reply_text)) from exc
        self._channel.queue_bind(spec.name, spec.exchange, routing_key=spec.routing_key)

    def publish_many(self, envelopes: Sequence[Envelope]) -> list[PublishOutcome]:
        self._ensure()
        outcomes: list[PublishOutcome] = []
        for envelope in envelopes:
            try:
                outcomes.append(self._publish_one(envelope))
            except _CONNECTION_ERRORS as exc:
                log.warning("connection lost while re-publishing (%s); the rest waits", exc)
                self._channel = None
                outcomes.extend([PublishOutcome.FAILED] * (len(envelopes) - len(outcomes)))
                break
        return outcomes

    def _publish_one(self, envelope: Envelope) -> PublishOutcome:
        message = self._topology.message(envelope)
        try:
            if message.routing_key not in self._declared:
                self._declare(self._topology.task_queue(message.routing_key))
                self._declared.add(message.routing_key)
            self._channel.basic_publish(
                message.exchange,
                message.routing_key,
                message.body,
                _properties(message),
                mandatory=message.mandatory,
            )
        except pika.exceptions.UnroutableError:
            log.warning(
                "re-publish of message %s was unroutable; it stays as it was", message.message_id
            )
            self._declared.discard(message.routing_key)
            return PublishOutcome.RETURNED
        except pika.exceptions.NackError:
            log.warning("broker nacked the re-publish of message %s", message.message_id)
            return PublishOutcome.NACKED
        return PublishOutcome.CONFIRMED

    def close(self) -> None:
        connection, self._connection, self._channel = self._connection, None, None
        if connection is not None and connection.is_open:
            with contextlib.suppress(*_CONNECTION_ERRORS):
                connection.close()


def _properties(message: MessageSpec) -> pika.BasicProperties:
    return pika.BasicProperties(
        message_id=message.message_id,
        type=message.type,
        content_type=message.content_type,
        delivery_mode=2 if message.persistent else 1,
        priority=message.priority,
    )


class ThreadedPublisher:
    """:class:`~.base.Publisher` over :class:`BlockingPublisher`, on one thread."""

    def __init__(self, thread: ThreadPoolExecutor, publisher: BlockingPublisher) -> None:
        self._thread = thread
        self._publisher = publisher

    @classmethod
    async def open(
        cls,
        url: str,
        topology: Topology,
        timeout: float = 10.0,
        wait_s: float = 0.0,
        ssl_context: ssl.SSLContext | None = None,
    ) -> ThreadedPublisher:
        """Connect, trying for ``wait_s`` seconds (ServiceUnavailableError if RabbitMQ
        does not answer). ``timeout`` bounds every socket operation, confirms included;
        ``ssl_context`` is the TLS context of an ``amqps://`` URL."""
        thread = ThreadPoolExecutor(1, thread_name_prefix="ledgerq-pika")
        try:
            loop = asyncio.get_running_loop()
            publisher = await loop.run_in_executor(
                thread, BlockingPublisher, url, topology, timeout, wait_s, ssl_context
            )
        except BaseException:
            thread.shutdown(wait=False)
            raise
        return cls(thread, publisher)

    async def publish_many(
        self, envelopes: Sequence[Envelope], timeout: float
    ) -> list[PublishOutcome]:
        """Publish one by one, each waiting for its confirm. The wait is bounded by the
        timeout given to :meth:`open` (pika sets it per connection, not per publish)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._thread, self._publisher.publish_many, envelopes)

    async def close(self) -> None:
        await asyncio.get_running_loop().run_in_executor(self._thread, self._publisher.close)
        self._thread.shutdown(wait=True)
