"""Stalled deliveries: a ``published`` row nobody claimed within its queue's stall
window, on a route that is still served, may have lost its message (a broker
that lost it, a queue that was purged). :meth:`Stalled.run_once` publishes it
again, to the same route under the same epoch, and marks it published again
(its ``publishes`` count grows, and with it the window: a row published ``n``
times since its last claim stalls after ``stall * 2**min(n - 1, 6)``).

Contract: run under the reconciler's advisory lock, after
:mod:`~ledgerq.relay.unserved` (a row of an unserved route goes back
to pending instead of being published again to nobody). Pages through rows by
id, each page locked while it is published (:func:`~.maintenance.publish_pages`).

Races: the first message was only slow: both are delivered, one claim wins
(the fenced compare-and-set on (id, epoch, published)) and the other is
acked as a loser. A worker claims the row while the page holds it: the claim
waits for the page's transaction (the relay's trap, docs/design.md), then
finds it published and wins.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field

from ledgerq.ledger.protocol import PublishBatch
from ledgerq.relay.maintenance import PublishingService, check_page_size


@dataclass(frozen=True)
class StalledConfig:
    #: A published row unclaimed for this long is published again.
    stall_s: float = 180.0
    #: Per-queue stall windows, overriding ``stall_s`` (a queue of slow tasks
    #: with a deep backlog wants a longer one).
    queue_stall_s: Mapping[str, float] = field(default_factory=dict)
    page_size: int = 500
    #: How long to wait for each re-publish's confirm (bounds pika's socket waits).
    confirm_timeout: float = 10.0

    def __post_init__(self) -> None:
        if self.stall_s <= 0:
            raise ValueError(f"stall_s must be positive, got {self.stall_s}")
        for queue, seconds in self.queue_stall_s.items():
            if seconds <= 0:
                raise ValueError(f"stall window for queue {queue!r} must be positive")
        check_page_size(self.page_size)


@dataclass
class Stalled(PublishingService[StalledConfig]):
    """Publish again every stalled row (see the module docstring)."""

    config: StalledConfig = field(default_factory=StalledConfig)

    def page(self, after: int) -> AbstractAsyncContextManager[PublishBatch]:
        cfg = self.config
        return self.ledger.stalled_batch(after, cfg.page_size, cfg.stall_s, cfg.queue_stall_s)
