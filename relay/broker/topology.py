"""The RabbitMQ topology and the task message, described once as data.

One durable direct exchange carries every task; each ledger queue has a durable
broker queue bound to it by the queue's name. Messages a consumer rejects as
malformed go to a dead-letter exchange and its queue, where an operator can look
at them. The broker never holds a delayed task: only due rows are published.

Both adapters (:mod:`.aio` for the relay and the worker, :mod:`.blocking` for
the reconciler) declare exactly these objects and send exactly these messages,
because RabbitMQ refuses a re-declaration whose arguments differ.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

from ledgerq.ledger.model import DueTask

#: Classic queues get this many priority levels (task priority 0-9).
MAX_PRIORITY = 9


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

    @cached_property
    def exchange(self) -> ExchangeSpec:
        return ExchangeSpec(self.prefix + ".tasks", "direct")

    @cached_property
    def dead_letter_exchange(self) -> ExchangeSpec:
        return ExchangeSpec(self.prefix + ".dlx", "fanout")

    @cached_property
    def dead_letter_queue(self) -> QueueSpec:
        return QueueSpec(self.prefix + ".dead-letters", self.dead_letter_exchange.name, "")

    def base(self) -> tuple[tuple[ExchangeSpec, ...], tuple[QueueSpec, ...]]:
        """What every declarer declares first: both exchanges and the dead-letter queue."""
        return (self.dead_letter_exchange, self.exchange), (self.dead_letter_queue,)

    def task_queue(self, name: str) -> QueueSpec:
        """The broker queue that carries the ledger queue ``name``."""
        return QueueSpec(
            self.prefix + ".q." + name,
            self.exchange.name,
            name,
            {
                "x-dead-letter-exchange": self.dead_letter_exchange.name,
                "x-max-priority": MAX_PRIORITY,
            },
        )

    def message(self, task: DueTask) -> MessageSpec:
        return MessageSpec(
            exchange=self.exchange.name,
            routing_key=task.queue,
            body=message_body(task.id, task.epoch, alone=task.suspect),
            message_id=str(task.id),
            type=task.kind,
            priority=min(max(task.priority, 0), MAX_PRIORITY),
        )


def mismatch(spec: QueueSpec, detail: str) -> str:
    """The one line an operator reads when RabbitMQ refuses ``spec``'s arguments."""
    wanted = ", ".join(f"{k}={v}" for k, v in spec.arguments.items())
    return (
        f"RabbitMQ refused to declare queue {spec.name!r} ({detail}): a queue of that name "
        f"exists with other arguments; ledgerq declares it durable, classic, with {wanted}. "
        f"Stop its producers' relays, let the workers drain it, delete it "
        f"(rabbitmqctl delete_queue {spec.name}) and start again: the ledger re-publishes "
        "what it held (docs/howto.md, 'Upgrade a broker queue')"
    )


def message_body(task_id: int, epoch: int, *, alone: bool = False) -> bytes:
    """``{"id":…,"epoch":…}``, plus ``"alone":true`` for a suspect (run it alone)."""
    body: dict[str, object] = {"id": task_id, "epoch": epoch}
    if alone:
        body["alone"] = True
    return json.dumps(body, separators=(",", ":")).encode()
