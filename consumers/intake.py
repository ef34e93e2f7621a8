"""Deliveries in: each one either names a task (an :class:`Arrival` for the
claimer) or is rejected to the dead-letter queue, at once.

A body that is not ``{"id": <int>, "epoch": <int>}`` can never be claimed;
holding it would hold a prefetch slot forever, so it is rejected (not requeued)
and logged with what it held.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

from ledgerq.consumers.acker import Acker
from ledgerq.consumers.handoff import Arrival
from ledgerq.ledger.model import Fence
from ledgerq.relay.broker.base import Delivery
from ledgerq.relay.probes import Probe, no_probe

log = logging.getLogger("ledgerq.worker")

MAX_BIGINT = 2**63 - 1


def parse_fence(body: bytes) -> Fence | None:
    """``(id, epoch)`` from a message body, or None if it is not one of ours."""
    try:
        data = json.loads(body)
        task_id, epoch = data["id"], data["epoch"]
    except (ValueError, TypeError, KeyError):
        return None
    if type(task_id) is not int or type(epoch) is not int:
        return None
    if not (1 <= task_id <= MAX_BIGINT and 0 <= epoch <= MAX_BIGINT):
        return None
    return task_id, epoch


class Intake:
    def __init__(
        self, acker: Acker, deliver: Callable[[Arrival], None], probe: Probe = no_probe
    ) -> None:
        self.acker = acker
        self.deliver = deliver
        self.probe = probe
        self.received = 0
        self.rejected = 0

    async def __call__(self, delivery: Delivery) -> None:
        self.received += 1
        self.acker.received(delivery)
        fence = parse_fence(delivery.body)
        if fence is None:
            self.rejected += 1
            log.error(
                "rejecting a message that names no task (message_id=%r, body=%r); "
                "it goes to the dead-letter queue",
                delivery.message_id,
                delivery.body[:200],
            )
            await self.acker.reject([delivery], requeue=False)
            return
        self.probe("worker.after_receive")
        self.deliver(Arrival(fence, delivery))
