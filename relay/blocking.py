"""The pika adapter: a blocking, confirm-mode publisher for the reconciler.

The reconciler is a short-lived cron job, so a blocking connection is the simple
fit. Each publish is ``mandatory`` and waits for its confirm: pika raises
``UnroutableError`` for a ``basic.return`` and ``NackError`` for a nack, and
both leave the row as it was.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from typing import Any

import pika
import pika.exceptions

from ledger.errors import ServiceUnavailableError
from ledger.store import DueTask
from ledger.topology import Topology, message_body, message_priority
from relay.amqp import Outcome, display_amqp_url

log = logging.getLogger("relay.blocking")

_CONNECTION_ERRORS = (
    pika.exceptions.AMQPConnectionError,
    pika.exceptions.AMQPChannelError,
    OSError,
)


class BlockingConfirmedPublisher:
    def __init__(self, url: str, topology: Topology) -> None:
        self._url = url
        self._topology = topology
        self._connection: Any = None
        self._channel: Any = None
        self._declared: set[str] = set()
        self._ensure()

    def _ensure(self) -> None:
        """Connect (again, after a broker restart) and declare the base topology."""
        if self._channel is not None and self._channel.is_open:
            return
        self.close()
        params = pika.URLParameters(self._url)
        params.connection_attempts = 2
        params.retry_delay = 0.5
        params.socket_timeout = 5
        try:
            self._connection = pika.BlockingConnection(params)
            self._channel = self._connection.channel()
            self._channel.confirm_delivery()
            self._declare_base()
        except _CONNECTION_ERRORS as exc:
            reason = "; ".join(str(a) for a in exc.args) or "connection refused or timed out"
            raise ServiceUnavailableError("RabbitMQ", display_amqp_url(self._url), reason) from exc
        self._declared.clear()

    def _declare_base(self) -> None:
        t = self._topology
        self._channel.exchange_declare(t.dead_letter_exchange, "fanout", durable=True)
        self._channel.queue_declare(t.dead_letter_queue, durable=True)
        self._channel.queue_bind(t.dead_letter_queue, t.dead_letter_exchange)
        self._channel.exchange_declare(t.exchange, "direct", durable=True)

    def _declare_queue(self, name: str) -> None:
        if name in self._declared:
            return
        t = self._topology
        self._channel.queue_declare(t.queue(name), durable=True, arguments=t.queue_arguments())
        self._channel.queue_bind(t.queue(name), t.exchange, routing_key=t.routing_key(name))
        self._declared.add(name)

    def publish_many(self, tasks: Sequence[DueTask]) -> list[Outcome]:
        self._ensure()
        outcomes = []
        for task in tasks:
            try:
                outcomes.append(self._publish_one(task))
            except _CONNECTION_ERRORS as exc:
                log.warning("connection lost while re-publishing (%s); the rest waits", exc)
                self._channel = None
                outcomes.extend([Outcome.FAILED] * (len(tasks) - len(outcomes)))
                break
        return outcomes

    def _publish_one(self, task: DueTask) -> Outcome:
        properties = pika.BasicProperties(
            message_id=str(task.id),
            type=task.kind,
            content_type="application/json",
            delivery_mode=2,  # persistent
            priority=message_priority(task.priority),
        )
        try:
            self._declare_queue(task.queue)
            self._channel.basic_publish(
                self._topology.exchange,
                self._topology.routing_key(task.queue),
                message_body(task.id, task.epoch),
                properties,
                mandatory=True,
            )
        except pika.exceptions.UnroutableError:
            log.warning("re-publish of task %s was unroutable; it stays as it was", task.id)
            self._declared.discard(task.queue)
            return Outcome.RETURNED
        except pika.exceptions.NackError:
            log.warning("broker nacked the re-publish of task %s", task.id)
            return Outcome.NACKED
        return Outcome.CONFIRMED

    def close(self) -> None:
        connection, self._connection, self._channel = self._connection, None, None
        if connection is not None and connection.is_open:
            with contextlib.suppress(*_CONNECTION_ERRORS):
                connection.close()
