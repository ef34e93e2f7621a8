"""Names of the RabbitMQ objects, as plain data shared by the relay and consumers.

One durable direct exchange carries every task; each ledger queue has a durable
broker queue bound to it by the queue's name. Messages that a consumer rejects
as malformed go to a dead-letter exchange and its queue, where an operator can
look at them. The broker never holds a delayed task: the relay publishes only
rows that are due.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

#: Classic queues get this many priority levels (task priority 0-9).
MAX_PRIORITY = 9


@dataclass(frozen=True)
class Topology:
    prefix: str = "ledgerq"

    @property
    def exchange(self) -> str:
        return self.prefix + ".tasks"

    @property
    def dead_letter_exchange(self) -> str:
        return self.prefix + ".dlx"

    @property
    def dead_letter_queue(self) -> str:
        return self.prefix + ".dead-letters"

    def queue(self, name: str) -> str:
        """The broker queue that carries the ledger queue ``name``."""
        return self.prefix + ".q." + name

    @staticmethod
    def routing_key(name: str) -> str:
        return name

    def queue_arguments(self) -> dict[str, Any]:
        """Arguments every declarer uses (RabbitMQ refuses a re-declaration that differs)."""
        return {"x-dead-letter-exchange": self.dead_letter_exchange, "x-max-priority": MAX_PRIORITY}


def message_body(task_id: int, epoch: int) -> bytes:
    """A task message names its row and the epoch it was published under; the payload
    stays in the ledger (the claim returns it)."""
    return json.dumps({"id": task_id, "epoch": epoch}, separators=(",", ":")).encode()


def message_priority(priority: int) -> int:
    return min(max(priority, 0), MAX_PRIORITY)
