"""Waiting tasks: the safety net under the release of dependents (issue 27).

A task enqueued with ``after`` is released (or cancelled) by the trigger on
its last dependency's terminal write, in that write's transaction (migration
0020), so a release is normally never missed. :meth:`Dependencies.run_once`
finds, a page at a time, the ``waiting`` tasks none of whose dependencies is
live, and judges them with the same function (``ledgerq_release``); it should
find none, and logs a warning naming how many it moved when it does (a
dependency that ended in a REPEATABLE READ transaction, which could not see an
edge committed after its snapshot; a dependency an operator retried from
history that then ended again).

Contract: run under the reconciler's advisory lock, after
:mod:`~ledgerq.relay.rescue` (whose ends release dependents themselves).

Races: the release takes each waiting row ``FOR UPDATE`` and re-reads its
dependencies with a fresh snapshot, and moves it only while it is still
``waiting``: a pass and a dependency's end at the same moment move it once
(whichever waits re-reads after the other committed, and finds it moved). A
producer adding a dependent at that moment holds its dependencies ``FOR KEY
SHARE``, so the dependency's end waits for the new edge to commit.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from typing import Any

from ledgerq.ledger.protocol import ReconcilerLedger
from ledgerq.relay.maintenance import check_page_size

log = logging.getLogger("ledgerq.reconciler")


@dataclass(frozen=True)
class DependenciesConfig:
    page_size: int = 500

    def __post_init__(self) -> None:
        check_page_size(self.page_size)


@dataclass
class DependenciesCounts:
    #: Waiting tasks made pending (their dependencies had all ended).
    released: int = 0
    #: Waiting tasks cancelled (a dependency had ended dead or cancelled).
    cancelled: int = 0
    pages: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Dependencies:
    ledger: ReconcilerLedger
    config: DependenciesConfig = field(default_factory=DependenciesConfig)

    async def run_once(self) -> DependenciesCounts:
        """Judge every waiting task whose dependencies have all ended."""
        counts = DependenciesCounts()
        limit = self.config.page_size
        while True:
            moved = await self.ledger.release_stuck(limit)
            counts.pages += 1
            counts.released += sum(1 for _, outcome in moved if outcome == "released")
            counts.cancelled += sum(1 for _, outcome in moved if outcome == "cancelled")
            if len(moved) < limit:
                if counts.released or counts.cancelled:
                    log.warning(
                        "released %d and cancelled %d waiting tasks whose dependencies had "
                        "all ended (their release was missed; see relay/dependencies.py)",
                        counts.released,
                        counts.cancelled,
                    )
                return counts
