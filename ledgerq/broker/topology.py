"""The RabbitMQ topology and the task message, described once as data.

One durable direct exchange carries every task; each ledger queue has a durable
broker queue bound to it by the queue's name. Messages a consumer rejects as
malformed go to a dead-letter exchange and its queue, where an operator can look
at them. The broker never holds a delayed task: only due rows are published.
A message names one task (``{"id":…,"epoch":…}``) or, as an envelope, several
tasks of one route and kind (``{"tasks":[[id,epoch],…]}``, relay/envelopes.py);
the payloads stay in the ledger.

Both adapters (:mod:`.aio` for the relay and the worker, :mod:`.blocking` for
the reconciler) declare exactly these objects and send exactly these messages,
because RabbitMQ refuses a re-declaration whose arguments differ. That refusal
(a queue declared before as another type, say) is
:class:`~.base.QueueMismatchError`, a configuration error: nothing retries it.

``queue_type`` (``LEDGERQ_QUEUE_TYPE``) picks classic queues (the default: one
node, ten priority levels in the broker) or quorum queues (replicated across a
cluster; a delivery limit; see :attr:`Topology._type_arguments` on priorities).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

from ledgerq.broker.base import Publishable
from ledgerq.core.routes import ROUTE_SEPARATOR, STICKY_PREFIX, routing_key

#: The most tasks one envelope (one message) may carry.
MAX_ENVELOPE = 256
#: Classic queues get this many priority levels (task priority 0-9).
MAX_PRIORITY = 9
#: ``LEDGERQ_QUEUE_TYPE``: classic queues (one node; priorities in the broker), or
#: quorum queues (replicated with Raft across a cluster's nodes).
QUEUE_TYPES = ("classic", "quorum")
#: Deliveries of one message a quorum queue allows before it dead-letters it: a
#: message whose every delivery kills its consumer stops circulating, and the
#: reconciler, finding its row still published, publishes the row again later
#: (counted as a new publication, so its stall window doubles).
DELIVERY_LIMIT = 20
#: A routed broker queue (``<prefix>.q.<queue>@<route>``) unused this long (no
#: consumer, no re-declaration) is deleted by RabbitMQ: a week.
ROUTED_QUEUE_EXPIRY_MS = 7 * 24 * 3600 * 1000
#: A worker's personal broker queue (``<queue>@s-...``, sticky retries) goes sooner:
#: only that worker, one start of it, ever consumes it; what was published there
#: when it stopped comes back to the ledger (unpublish_unserved).
STICKY_QUEUE_EXPIRY_MS = 15 * 60 * 1000


@dataclass(frozen=True, slots=True)
class ExchangeSpec:
    name: str
    type: Literal["direct", "fanout"]
    durable: bool = True


@dataclass(frozen=True, slots=True)
class QueueSpec:
    name: str
    exchange: str
    routing_key: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    durable: bool = True


@dataclass(frozen=True, slots=True)
class MessageSpec:
    """One task message: persistent, ``mandatory`` (an unroutable message comes back
    as ``basic.return`` and is never taken for delivered), ``message_id`` = task id,
    the kind as ``type``. The body names the row and the epoch it was published
    under; the payload stays in the ledger (the claim returns it)."""

    exchange: str
    routing_key: str
    body: bytes
    message_id: str
    type: str
    priority: int
    content_type: str = "application/json"
    persistent: bool = True
    mandatory: bool = True


@dataclass(frozen=True)
class Topology:
    prefix: str = "ledgerq"
    queue_type: str = "classic"

    def __post_init__(self) -> None:
        if self.queue_type not in QUEUE_TYPES:
            raise ValueError(f"queue_type must be one of {QUEUE_TYPES}, got {self.queue_type!r}")

    @property
    def _type_arguments(self) -> dict[str, Any]:
        """Quorum queues: declared as such, with the delivery limit. RabbitMQ 3.x
        quorum queues have no priorities (``x-max-priority`` is refused); 4.x ones
        have two (priority 5-9 before 0-4) without any argument. Either way the
        relay already publishes higher priority first."""
        if self.queue_type == "quorum":
            return {"x-queue-type": "quorum", "x-delivery-limit": DELIVERY_LIMIT}
        return {"x-max-priority": MAX_PRIORITY}

    @cached_property
    def exchange(self) -> ExchangeSpec:
        return ExchangeSpec(self.prefix + ".tasks", "direct")

    @cached_property
    def dead_letter_exchange(self) -> ExchangeSpec:
        return ExchangeSpec(self.prefix + ".dlx", "fanout")

    @cached_property
    def dead_letter_queue(self) -> QueueSpec:
        arguments = {"x-queue-type": "quorum"} if self.queue_type == "quorum" else {}
        return QueueSpec(
            self.prefix + ".dead-letters", self.dead_letter_exchange.name, "", arguments
        )

    def base(self) -> tuple[tuple[ExchangeSpec, ...], tuple[QueueSpec, ...]]:
        """What every declarer declares first: both exchanges and the dead-letter queue."""
        return (self.dead_letter_exchange, self.exchange), (self.dead_letter_queue,)

    def task_queue(self, name: str) -> QueueSpec:
        """The broker queue that carries the ledger queue ``name``, or (``name`` =
        ``queue@route``, :func:`~ledgerq.ledger.routing.routing_key`) the part of it
        the workers of one ``--kinds``/``--shards`` subscription serve. Bound by
        its name on the one direct exchange. A routed queue is deleted by the
        broker after :data:`ROUTED_QUEUE_EXPIRY_MS` without a consumer (its rows
        stay ``published``; the reconciler publishes them again), a worker's
        personal one (``queue@s-...``) after :data:`STICKY_QUEUE_EXPIRY_MS`."""
        routed = {"x-expires": ROUTED_QUEUE_EXPIRY_MS} if ROUTE_SEPARATOR in name else {}
        if ROUTE_SEPARATOR + STICKY_PREFIX in name:
            routed = {"x-expires": STICKY_QUEUE_EXPIRY_MS}
        return QueueSpec(
            self.prefix + ".q." + name,
            self.exchange.name,
            name,
            {
                "x-dead-letter-exchange": self.dead_letter_exchange.name,
                **self._type_arguments,
                **routed,
            },
        )

    def message(self, envelope: Sequence[Publishable]) -> MessageSpec:
        """The message of one envelope: one task, or several of one route and kind
        (relay/envelopes.py). ``message_id`` is the first task's id, and ``+n`` for
        the n more an envelope carries; its priority is its highest task's."""
        first = envelope[0]
        if len(envelope) == 1:
            body = message_body(first.id, first.epoch, alone=first.suspect)
            message_id = str(first.id)
        else:
            body = envelope_body([(t.id, t.epoch) for t in envelope])
            message_id = f"{first.id}+{len(envelope) - 1}"
        return MessageSpec(
            exchange=self.exchange.name,
            routing_key=routing_key(first.queue, first.route),
            body=body,
            message_id=message_id,
            type=first.kind,
            priority=min(max(max(t.priority for t in envelope), 0), MAX_PRIORITY),
        )


def mismatch(spec: QueueSpec, detail: str) -> str:
    """The one line an operator reads when RabbitMQ refuses ``spec``'s arguments."""
    wanted = ", ".join(f"{k}={v}" for k, v in spec.arguments.items() if k != "x-queue-type")
    kind = spec.arguments.get("x-queue-type", "classic")
    others = f"with {wanted}" if wanted else "and no other arguments"
    return (
        f"RabbitMQ refused to declare queue {spec.name!r} ({detail}): a queue of that name "
        f"exists with other arguments; ledgerq declares it durable, {kind} "
        f"(LEDGERQ_QUEUE_TYPE), {others}. "
        f"Stop its producers' relays, let the workers drain it, delete it "
        f"(rabbitmqctl delete_queue {spec.name}) and start again: the ledger re-publishes "
        "what it held (docs/howto.md, 'Upgrade a broker queue')"
    )


def envelope_body(fences: Sequence[tuple[int, int]]) -> bytes:
    """``{"tasks":[[id,epoch],…]}``: an envelope of several tasks."""
    return json.dumps({"tasks": [list(f) for f in fences]}, separators=(",", ":")).encode()


def message_body(task_id: int, epoch: int, *, alone: bool = False) -> bytes:
    """``{"id":…,"epoch":…}``, plus ``"alone":true`` for a suspect (run it alone)."""
    body: dict[str, object] = {"id": task_id, "epoch": epoch}
    if alone:
        body["alone"] = True
    return json.dumps(body, separators=(",", ":")).encode()
