"""Envelopes: several due tasks of one route in one AMQP message.

Contract. :func:`pack` cuts a batch of due rows, in the order the ledger picked
them, into envelopes. An envelope holds tasks of one routing key (queue and
route) and one kind, consecutive in that order, at most ``limit`` of them, where
``limit`` is the smaller of the relay's ``envelope_max`` and the route's share of
the batch per live subscriber (so two workers on a route get about half each,
however small the batch). A suspect (run alone) and a task of a *long* kind (one
whose recent attempts ran ``long_s`` or longer on average, :class:`KindDurations`)
always travel alone, so no worker holds long work in its inbox while another
idles. The worker claims an envelope's tasks in one statement and acks the
message once every one of them is terminal (consumers/acker.py).

Races. A redelivered envelope whose tasks are partly finished runs only the
unfinished ones: the finished ones' fences moved on, so their claims win
nothing and are skipped. Kind durations are a hint read every few seconds: a
kind that turns long is packed for at most one refresh more.
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence

from ledgerq.ledger.model import DueTask
from ledgerq.ledger.routing import routing_key

log = logging.getLogger("ledgerq.relay")

#: An envelope of the relay's rows (the broker takes any tuple of publishable tasks).
RowEnvelope = tuple[DueTask, ...]


def pack(
    rows: Sequence[DueTask], limit: int, alone: frozenset[str] = frozenset()
) -> list[RowEnvelope]:
    """Cut ``rows`` into envelopes (see the module docstring); ``alone``: the long kinds."""
    if limit <= 1:
        return [(row,) for row in rows]
    per_route = Counter(routing_key(r.queue, r.route) for r in rows)
    # Each envelope is placed where its first task was picked, so the batch keeps
    # the ledger's order (priority, aging) from envelope to envelope.
    placed: list[tuple[int, RowEnvelope]] = []
    open_: dict[tuple[str, str], tuple[int, list[DueTask]]] = {}
    for index, row in enumerate(rows):
        key = routing_key(row.queue, row.route)
        if row.suspect or row.kind in alone:
            placed.append((index, (row,)))
            continue
        share = max(1, min(limit, math.ceil(per_route[key] / max(1, row.subscribers))))
        first, current = open_.setdefault((key, row.kind), (index, []))
        current.append(row)
        if len(current) >= share:
            placed.append((first, tuple(current)))
            del open_[(key, row.kind)]
    placed.extend((first, tuple(rest)) for first, rest in open_.values())
    placed.sort(key=lambda p: p[0])
    return [envelope for _, envelope in placed]


class KindDurations:
    """Which kinds run long: their recent attempts' mean run time, read from the
    ledger at most every ``every_s`` seconds. A failed read keeps the last answer
    (a hint, never a reason to stop publishing)."""

    def __init__(
        self,
        read: Callable[[], Awaitable[Mapping[str, float]]],
        long_s: float,
        every_s: float = 5.0,
    ) -> None:
        self._read = read
        self.long_s = long_s
        self.every_s = every_s
        self._next = 0.0
        self.long: frozenset[str] = frozenset()

    async def refresh(self) -> frozenset[str]:
        now = time.monotonic()
        if now < self._next:
            return self.long
        self._next = now + self.every_s
        try:
            means = await self._read()
        except Exception as exc:  # the relay's batch reports a dead database itself
            log.debug("reading kind durations failed (%s); keeping the last", exc)
            return self.long
        self.long = frozenset(kind for kind, mean in means.items() if mean >= self.long_s)
        return self.long
