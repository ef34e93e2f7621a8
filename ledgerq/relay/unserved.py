"""Unserved deliveries: a ``published`` row whose route no live worker serves
any more (its workers stopped, or died and their subscriptions lapsed within
one lease, or its queue is now served ``--direct``) goes back to ``pending``.
:meth:`Unserved.run_once` moves them a page at a time until a page comes back
short; each move bumps the epoch, so the message stranded in that broker queue
claims nothing, and is audited (actor ``ledgerq``). The relay then gives the
row to any live window that covers it (docs/design.md, "The window").

Contract: run under the reconciler's advisory lock, after
:mod:`~ledgerq.relay.rescue` (which lapses dead workers'
subscriptions, so their routes count as unserved in the same pass) and before
:mod:`~ledgerq.relay.stalled`.

Races: a worker subscribing to the route while the page moves: the page saw
no live subscription and moved the row; the new worker's window is filled by
the relay. A worker claiming a row as it moves: one compare-and-set wins; a
delivery whose claim lost (the epoch moved) is acked unrun.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from typing import Any

from ledgerq.ledger.protocol import ReconcilerLedger
from ledgerq.relay.maintenance import check_page_size

log = logging.getLogger("ledgerq.reconciler")


@dataclass(frozen=True)
class UnservedConfig:
    page_size: int = 500

    def __post_init__(self) -> None:
        check_page_size(self.page_size)


@dataclass
class UnservedCounts:
    #: Rows taken back to pending.
    unpublished: int = 0
    pages: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Unserved:
    ledger: ReconcilerLedger
    config: UnservedConfig = field(default_factory=UnservedConfig)

    async def run_once(self) -> UnservedCounts:
        """Take back every row published to a route nobody serves."""
        counts = UnservedCounts()
        limit = self.config.page_size
        while True:
            moved = await self.ledger.unpublish_unserved(limit)
            counts.pages += 1
            counts.unpublished += len(moved)
            if len(moved) < limit:
                if counts.unpublished:
                    log.info(
                        "took back %d tasks published to routes nobody serves",
                        counts.unpublished,
                    )
                return counts
