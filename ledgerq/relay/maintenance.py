"""The reconciler's duties, each a maintenance service of its own module.

Shaped like River's maintenance services and Oban's plugins: each module holds
one duty, a frozen ``*Config`` that validates its fields when built, and a
service whose ``run_once()`` does one pass and returns that duty's counts
(:class:`Service`). The tests call each ``run_once()`` directly against
the real database. One loop runs them all: :class:`ledgerq.relay.reconciler.Reconciler`
holds the advisory lock around the locked services, in this order, then runs
the upkeep services after releasing it:

==================  ======================================================  ==============
service             duty                                                    runs
==================  ======================================================  ==============
:mod:`.expiry`      queued tasks past their ``expires_at`` ended cancelled  under the lock
                    (expired), audited
:mod:`.rescue`      dead workers' and expired leases' running rows judged   under the lock
                    (crash attribution) and finished; dead ones alerted
:mod:`.unserved`    published rows of routes nobody serves back to pending  under the lock
:mod:`.stalled`     published rows unclaimed past their stall window,       under the lock
                    published again
:mod:`.overdue`     due rows no relay published, published as a relay       under the lock
                    would
:mod:`.rollup`      finished tasks counted per minute for the dashboard     after the lock
:mod:`.retention`   history's day partitions created and dropped            after the lock
==================  ======================================================  ==============

The periodic enqueuer (:mod:`ledgerq.consumers.periodic`) has the same shape
but runs in every worker, not in this loop: its schedules are the worker's
registry (its ``--app``), and a deployment without a reconciler must still get
its periodic tasks (docs/howto.md, "Run a task periodically").

This module holds what they share: the :class:`Service` shape, and the
publishing pass the stalled and overdue services both run
(:class:`PublishingService`: the same ``run_once``, each with its own page
source).

:func:`publish_pages` takes a page of rows locked by its own transaction
(``FOR UPDATE SKIP LOCKED``), publishes them with confirms, marks only the
confirmed ones ``published`` (compare-and-set, in the page's transaction) and
commits. It asks for the next page (ids after the last one: keyset pagination;
the overdue source ignores ``after`` and selects by the relay's rule) until one
comes back short or wins no confirm, so a broker refusing everything costs one
page, not the whole backlog.

Races: a row a relay holds is skipped (locked); a confirm that arrives after
``confirm_timeout`` counts as unconfirmed and the row is left as it was (the
message may still be delivered: its claim wins or the re-publish's does, one
of the two, fenced by the epoch).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import asdict, dataclass
from typing import Any, Generic, Protocol, TypeVar

from ledgerq.broker.base import Publisher, PublishOutcome
from ledgerq.ledger.protocol import PublishBatch, ReconcilerLedger

CountsT_co = TypeVar("CountsT_co", covariant=True)

#: A page of rows to publish, locked for the block: ids after the argument.
PageSource = Callable[[int], AbstractAsyncContextManager[PublishBatch]]


class Service(Protocol[CountsT_co]):
    """A maintenance service: one pass, its counts back. A pass that fails raises
    (the loop around it decides what an outage costs); a pass is safe to run
    again at once."""

    async def run_once(self) -> CountsT_co: ...


def check_page_size(page_size: int) -> None:
    if not 1 <= page_size <= 10_000:
        raise ValueError(f"page_size must be 1..10000, got {page_size}")


@dataclass
class PublishCounts:
    #: Rows published and confirmed, and marked ``published``.
    published: int = 0
    #: Rows the broker did not confirm (left as they were, tried next pass).
    unconfirmed: int = 0
    pages: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


async def publish_pages(
    publisher: Publisher, pages: PageSource, page_size: int, confirm_timeout: float
) -> PublishCounts:
    """Publish page after page (see the module docstring); the counts."""
    counts = PublishCounts()
    after = 0
    while True:
        async with pages(after) as batch:
            if not batch.rows:
                return counts
            counts.pages += 1
            outcomes = await publisher.publish_many([(row,) for row in batch.rows], confirm_timeout)
            confirmed = [
                r
                for r, o in zip(batch.rows, outcomes, strict=True)
                if o is PublishOutcome.CONFIRMED
            ]
            counts.unconfirmed += len(batch.rows) - len(confirmed)
            counts.published += len(await batch.mark_published(confirmed))
            after = batch.rows[-1].id
            if len(batch.rows) < page_size or not confirmed:
                return counts


class PublishConfig(Protocol):
    """What :func:`publish_pages` reads of a publishing service's config."""

    @property
    def page_size(self) -> int: ...

    @property
    def confirm_timeout(self) -> float: ...


ConfigT = TypeVar("ConfigT", bound=PublishConfig)


@dataclass
class PublishingService(Generic[ConfigT]):
    """A service whose pass is :func:`publish_pages` over its own pages
    (:meth:`page`): the stalled and the overdue services."""

    ledger: ReconcilerLedger
    publisher: Publisher
    config: ConfigT

    def page(self, after: int) -> AbstractAsyncContextManager[PublishBatch]:
        """The next page of rows to publish, ids after ``after`` (a source may
        select by its own rule and ignore it)."""
        raise NotImplementedError

    async def run_once(self) -> PublishCounts:
        """Publish this service's pages (see its module's docstring)."""
        return await publish_pages(
            self.publisher, self.page, self.config.page_size, self.config.confirm_timeout
        )
