"""The name of a route in the broker: ``queue`` or ``queue@route``.

A ledger queue's tasks go to one broker queue per live route (a worker's
``--kinds`` and ``--shards``, :mod:`ledgerq.ledger.routing`). The ledger names
the route; the broker names its queue and routing key after it
(:mod:`ledgerq.broker.topology`). Both take the name from here, so neither
imports the other.
"""

from __future__ import annotations

#: Between a ledger queue's name and its route in a broker queue's name and
#: routing key. Queue names cannot hold it (validation), so no route collides
#: with another queue.
ROUTE_SEPARATOR = "@"

#: How a worker's personal route's name starts (``sticky_retry``; a shared
#: route's starts ``r-``).
STICKY_PREFIX = "s-"


def routing_key(queue: str, route: str | None) -> str:
    """The routing key (and the broker queue's suffix) of ``queue`` on ``route``."""
    return queue if route is None else queue + ROUTE_SEPARATOR + route
