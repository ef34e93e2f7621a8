"""The worker's subscriptions: what it serves, registered in the ledger.

At start, after its broker queues are declared (so the relay never routes to
a queue that does not exist yet), the worker writes one row per queue it
consumes (its ``--kinds`` and ``--shards``, :mod:`ledgerq.ledger.routing`),
live for one lease; :class:`Subscriber` refreshes them every heartbeat. On stop
they expire at once, after consuming stopped: the relay stops routing to the
worker's broker queue, and what it would have sent waits in the ledger.

A refresh that fails (the database away) is retried on the next beat and
logged once per outage (:mod:`ledgerq.ledger.outages`); if the rows expire
meanwhile the relay holds the worker's share of the work in the ledger until a
refresh succeeds. Nothing is lost either way.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from ledgerq.consumers.beat import Beat
from ledgerq.core.errors import first_line
from ledgerq.ledger.outages import Outage
from ledgerq.ledger.protocol import RoutingLedger
from ledgerq.ledger.routing import Subscription

log = logging.getLogger("ledgerq.worker")


class Subscriber(Beat):
    def __init__(
        self,
        ledger: RoutingLedger,
        worker_id: str,
        subscriptions: Sequence[Subscription],
        *,
        ttl_s: float,
        every_s: float,
        direct: bool = False,
    ) -> None:
        super().__init__(every_s, Outage("refreshing the worker's subscriptions", log))
        self._ledger = ledger
        self._worker_id = worker_id
        self.subscriptions = tuple(subscriptions)
        self._ttl_s = ttl_s
        #: The worker claims from the ledger itself: no relay publishes its queues.
        self.direct = direct

    async def beat(self) -> None:
        await self._ledger.subscribe(
            self._worker_id, self.subscriptions, self._ttl_s, direct=self.direct
        )

    async def farewell(self) -> None:
        """Expire the subscriptions now (else they expire by themselves within one lease)."""
        try:
            await self._ledger.unsubscribe(self._worker_id)
        except Exception as exc:  # the database away: one line, as every outage is logged
            log.warning(
                "expiring the worker's subscriptions failed (%s); they expire within one lease",
                first_line(exc),
            )
