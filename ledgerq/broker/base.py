"""The broker seam: what the relay, the worker and the reconciler ask of RabbitMQ.

Modelled on dramatiq's broker: a few methods, each docstring a contract, and one
error type. An adapter turns every way a connection or channel can fail into
:class:`BrokerConnectionError`; nothing else of a client library crosses. The one
exception is :class:`QueueMismatchError`: the broker refused to declare a queue
because it exists with other arguments, which retrying cannot fix.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from enum import Enum
from typing import Protocol

from ledgerq.core.errors import ConfigError, LedgerqError


class BrokerConnectionError(LedgerqError):
    """The connection or channel to RabbitMQ failed (closed, reset, timed out)."""


class QueueMismatchError(ConfigError):
    """RabbitMQ refused to declare a queue (``PRECONDITION_FAILED``): a queue of that
    name exists with other arguments than ledgerq's topology (declared as the other
    ``LEDGERQ_QUEUE_TYPE``, by hand, or without ``x-max-priority``). Retrying cannot
    help: the relay, the workers and the reconciler stop with the message, which
    names the queue and the way out (docs/howto.md, "Upgrade a broker queue")."""


class PublishOutcome(Enum):
    CONFIRMED = "confirmed"
    RETURNED = "returned"  # basic.return: unroutable, not delivered
    NACKED = "nacked"
    FAILED = "failed"  # timeout, closed channel, connection loss: unknown, so not delivered


class Publishable(Protocol):
    """What a message says of a task; the ledger's ``DueTask`` is one. The broker
    names no ledger type, so the two packages stay peers."""

    @property
    def id(self) -> int: ...
    @property
    def epoch(self) -> int: ...
    @property
    def kind(self) -> str: ...
    @property
    def queue(self) -> str: ...
    @property
    def priority(self) -> int: ...
    @property
    def suspect(self) -> bool: ...
    @property
    def route(self) -> str | None: ...


#: The tasks one message carries: one, or several of one route and kind
#: (relay/envelopes.py).
Envelope = tuple[Publishable, ...]


class Publisher(Protocol):
    async def publish_many(
        self, envelopes: Sequence[Envelope], timeout: float
    ) -> list[PublishOutcome]:
        """Publish each envelope as one message (``mandatory``, persistent) and wait
        up to ``timeout`` seconds for each confirm. One outcome per envelope, in
        order, for every task in it; only ``CONFIRMED`` means the broker has it.
        Never raises for a broker failure met while publishing: those envelopes
        are ``FAILED``. While the connection is down (reconnecting) it publishes
        nothing and raises :class:`BrokerConnectionError`: the caller's batch fails
        whole, its rows stay due, and its loop backs off until the broker is back."""
        ...

    async def close(self) -> None: ...


class Delivery(Protocol):
    """One message as a consumer received it."""

    @property
    def body(self) -> bytes: ...

    @property
    def message_id(self) -> str | None: ...

    @property
    def delivery_tag(self) -> int:
        """Its number on its channel; the broker numbers a channel's deliveries in order."""
        ...

    @property
    def channel(self) -> object:
        """The channel it came on (an identity: a tag means nothing on another channel)."""
        ...

    async def ack(self, multiple: bool = False) -> None:
        """Settle it (and, with ``multiple``, every earlier delivery on its channel).
        Raises :class:`BrokerConnectionError` if its channel is gone: the broker
        then redelivers it, and the ack must never be sent on another channel."""
        ...

    async def reject(self, requeue: bool) -> None:
        """Give it back (``requeue``) or send it to the dead-letter exchange.
        Raises :class:`BrokerConnectionError` like :meth:`ack`."""
        ...


OnDelivery = Callable[[Delivery], Awaitable[None]]


class Consumption(Protocol):
    async def cancel(self) -> None:
        """Stop the broker pushing more deliveries; those already received stay
        unacked until settled (or requeued by the broker when the channel closes).
        Never raises for a connection that is already gone, and never waits for
        one to come back (a stop must end while the broker is away)."""
        ...
