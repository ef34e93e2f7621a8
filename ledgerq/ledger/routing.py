"""Routing: what part of a queue a worker serves (its app's kinds, narrowed by
``--kinds``, and ``--shards``), and the parsers of the worker's ``--kinds``,
``--shards`` and ``--queues``.

A :class:`Subscription` is one queue, the kinds and shards of it a worker
serves, and its capacity (the worker's prefetch: its share of the route's
window). A worker always names its kinds (those it has handlers for), so it
reads ``<prefix>.q.<queue>@<route>``, where the route is a stable digest of its
kinds and shards: every worker of the same app and ``--shards`` shares one
broker queue (competing consumers), a restart finds its queue again, and a
rolling deploy that adds a kind gives the new workers a route of their own. A
subscription with neither kinds nor shards (None: every one) reads the queue's
own broker queue, ``<prefix>.q.<queue>``; only tools and tests make one.

The worker declares its broker queue first, then registers the subscription
in ``ledgerq_subscriptions`` with an expiry it refreshes on its heartbeat. The
relay publishes to each live route at most its window (migration 0014,
docs/design.md "The window"); what no live subscription covers stays
``pending`` in the ledger and counts as unserved backlog, never as an attempt.
A worker that runs a kind with ``@task(sticky_retry=...)`` also consumes a
personal route (:func:`sticky_route`, migration 0018): the retries held for it
go there, and nothing else does.

Races: a worker that dies keeps its subscription live until it expires (one
lease): the relay may fill its window meanwhile; once it lapses, the reconciler
takes those rows back to ``pending`` (``unpublish_unserved``) and the relay
gives them to a live route that covers them. A publish to a broker queue that
was deleted comes back as ``basic.return`` and its row stays ``pending``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from ledgerq.core.errors import ConfigError
from ledgerq.core.routes import ROUTE_SEPARATOR as ROUTE_SEPARATOR
from ledgerq.core.routes import STICKY_PREFIX as STICKY_PREFIX
from ledgerq.core.routes import routing_key as routing_key
from ledgerq.ledger.sharding import MAX_SHARDS
from ledgerq.ledger.validation import check_name


class RoutingError(ConfigError):
    """A ``--kinds``, ``--shards`` or ``--queues`` value that does not parse; the
    message is one line for a person."""


@dataclass(frozen=True)
class Subscription:
    queue: str
    #: The kinds served, or None for all.
    kinds: frozenset[str] | None = None
    #: The shards served, or None for all.
    shards: frozenset[int] | None = None
    #: How many delivered but unstarted tasks the subscriber can hold (its lane's
    #: prefetch): its share of its route's window. 0 holds nothing.
    capacity: int = 0
    #: The worker's personal route (:func:`sticky_route`), when it runs a kind with
    #: ``@task(sticky_retry=...)``: the retries held for it come there, and only it
    #: consumes that broker queue. None: no personal route.
    sticky: str | None = None

    @property
    def route(self) -> str | None:
        """None for the whole queue; else ``r-`` and 16 hex digits of a BLAKE2b
        digest of the sorted kinds and shards."""
        if self.kinds is None and self.shards is None:
            return None
        kinds = "*" if self.kinds is None else ",".join(sorted(self.kinds))
        shards = "*" if self.shards is None else ",".join(map(str, sorted(self.shards)))
        return "r-" + hashlib.blake2b(f"{kinds};{shards}".encode(), digest_size=8).hexdigest()

    @property
    def broker_name(self) -> str:
        """The queue name the broker topology is asked for (``queue`` or ``queue@route``)."""
        return routing_key(self.queue, self.route)

    @property
    def broker_names(self) -> tuple[str, ...]:
        """Every broker queue the subscriber consumes: its route's, then its own."""
        if self.sticky is None:
            return (self.broker_name,)
        return (self.broker_name, routing_key(self.queue, self.sticky))


def sticky_route(worker_id: str) -> str:
    """A worker's personal route: ``s-`` and 16 hex digits of a BLAKE2b digest of its
    id (unique per start, so a restarted worker gets a new one)."""
    return STICKY_PREFIX + hashlib.blake2b(worker_id.encode(), digest_size=8).hexdigest()


def parse_kinds(value: str | None) -> frozenset[str] | None:
    """``"a,b"`` -> {"a", "b"}; empty or None -> None (every kind)."""
    if value is None or not value.strip():
        return None
    kinds = [k.strip() for k in value.split(",")]
    for kind in kinds:
        if not kind:
            raise RoutingError(f"--kinds {value!r}: an empty kind between commas")
        try:
            check_name(kind, "kind")
        except ValueError as exc:
            raise RoutingError(f"--kinds {value!r}: {exc}") from None
    return frozenset(kinds)


def parse_shards(value: str | None, count: int) -> frozenset[int] | None:
    """``"0-3"``, ``"0,2,5-7"`` -> the shard numbers, each below ``count``
    (LEDGERQ_SHARDS); empty or None -> None (every shard)."""
    if value is None or not value.strip():
        return None
    if not 1 <= count <= MAX_SHARDS:
        raise RoutingError(f"the shard count must be from 1 to {MAX_SHARDS}, got {count}")
    shards: set[int] = set()
    for part in (p.strip() for p in value.split(",")):
        low, sep, high = part.partition("-")
        try:
            first, last = int(low), int(high if sep else low)
        except ValueError:
            raise RoutingError(
                f"--shards {value!r}: {part!r} is not a shard number or a range like 0-3"
            ) from None
        if first < 0 or first > last:
            raise RoutingError(f"--shards {value!r}: {part!r} is not an ascending range")
        if last >= count:
            raise RoutingError(
                f"--shards {value!r}: shard {last} does not exist; LEDGERQ_SHARDS={count} "
                f"gives shards 0-{count - 1}"
            )
        shards.update(range(first, last + 1))
    return frozenset(shards)


def parse_queues(value: str) -> tuple[tuple[str, int | None], ...]:
    """``"fast=50,slow=2"`` -> (("fast", 50), ("slow", 2)); ``"a,b"`` -> (("a", None),
    ("b", None)) (one shared concurrency, as before). Mixing both forms is refused."""
    queues: list[tuple[str, int | None]] = []
    for part in (p.strip() for p in value.split(",")):
        if not part:
            raise RoutingError(f"--queues {value!r}: an empty queue name between commas")
        name, sep, number = part.partition("=")
        name = name.strip()
        try:
            check_name(name, "queue")
        except ValueError as exc:
            raise RoutingError(f"--queues {value!r}: {exc}") from None
        limit: int | None = None
        if sep:
            try:
                limit = int(number)
            except ValueError:
                raise RoutingError(
                    f"--queues {value!r}: {number!r} is not a concurrency (queue=N, N >= 1)"
                ) from None
            if not 1 <= limit <= 10_000:
                raise RoutingError(f"--queues {value!r}: concurrency {limit} is not 1..10000")
        if any(q == name for q, _ in queues):
            raise RoutingError(f"--queues {value!r}: queue {name!r} is named twice")
        queues.append((name, limit))
    if len({limit is None for _, limit in queues}) > 1:
        raise RoutingError(
            f"--queues {value!r}: give every queue a concurrency (fast=50,slow=2) or none"
        )
    return tuple(queues)
