"""Overdue pending rows: due rows the relay has not published within the stall
window (no relay runs, or every relay is stuck) are published here instead,
exactly as a relay would: :meth:`Overdue.run_once` takes pages by the relay's
rule (``overdue_batch``: the same due selection, pauses, ordering keys, rate
limits, aging and live windows as ``publish_batch``), publishes them with
confirms and marks the confirmed ones published.

Contract: run under the reconciler's advisory lock, last of the locked
services. It asks for a page at a time until one comes back short or wins no
confirm (:func:`~.maintenance.publish_pages`); a route without a live window gets
nothing, as from a relay.

Races: a relay that comes back meanwhile selects with ``SKIP LOCKED`` and
skips the page's rows; a row this pass published is no longer ``pending``, so
no relay publishes it again. A rate-limited kind is charged when the page
commits, as in the relay.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field

from ledgerq.ledger.protocol import PublishBatch
from ledgerq.ledger.scheduling import DEFAULT_AGING_S
from ledgerq.relay.maintenance import PublishingService, check_page_size


@dataclass(frozen=True)
class OverdueConfig:
    #: A row due for this long without a relay publishing it is published here.
    stall_s: float = 180.0
    #: As the relay's: the pick follows the relay's rule, aging included.
    aging_s: float = DEFAULT_AGING_S
    page_size: int = 500
    confirm_timeout: float = 10.0

    def __post_init__(self) -> None:
        if self.stall_s <= 0:
            raise ValueError(f"stall_s must be positive, got {self.stall_s}")
        check_page_size(self.page_size)


@dataclass
class Overdue(PublishingService[OverdueConfig]):
    """Publish what a relay should have (see the module docstring)."""

    config: OverdueConfig = field(default_factory=OverdueConfig)

    def page(self, after: int) -> AbstractAsyncContextManager[PublishBatch]:
        """A page by the relay's rule (``after`` plays no part)."""
        cfg = self.config
        return self.ledger.overdue_batch(cfg.page_size, cfg.stall_s, cfg.aging_s)
