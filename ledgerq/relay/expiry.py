"""Expiry: a task not started by its ``expires_at`` ends ``cancelled``, marked
expired, and never runs (issue 26).

Two places enforce it. The claim (the broker path's ``claim`` and the direct
path's ``claim_due``) refuses a row whose expiry has passed and ends it in the
same statement, fenced like every write, so an expired task never starts however
late its message arrives, and a retry due after the task's expiry does not run
either. This service sweeps the rest: :meth:`Expiry.run_once` ends every
``pending`` or ``published`` row whose expiry has passed, a page at a time
(``expire_due``, the partial index on ``expires_at``), so expired tasks do not
sit pending (nor count as backlog) until a worker happens to reach them. Each
page writes one audit record (actor ``ledgerq``, action ``expire``) naming its
tasks; the history row has ``expired = true`` and ``last_error`` ``expired: not
started by <time>``.

Contract: run in the reconciler's pass, under its advisory lock, first (so the
stalled and overdue services do not publish rows that are about to expire).
A pass is safe to repeat at once.

Races: a worker claiming a row as the page moves it: the page locks its rows
(``FOR UPDATE SKIP LOCKED``) and ends only rows still under the epoch and
status it read; a claim that wins first starts the task only if it had not yet
expired (the claim's own check), and a claim that comes second finds the row
gone and acks its message unrun. A row a relay holds is skipped and taken by a
later page or by its claim. A running task never expires: expiry is about
starting, and a started attempt ends by its own timeout.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from typing import Any

from ledgerq.ledger.protocol import ReconcilerLedger
from ledgerq.relay.maintenance import check_page_size

log = logging.getLogger("ledgerq.reconciler")


@dataclass(frozen=True)
class ExpiryConfig:
    page_size: int = 500

    def __post_init__(self) -> None:
        check_page_size(self.page_size)


@dataclass
class ExpiryCounts:
    #: Tasks ended cancelled as expired.
    expired: int = 0
    pages: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Expiry:
    ledger: ReconcilerLedger
    config: ExpiryConfig = field(default_factory=ExpiryConfig)

    async def run_once(self) -> ExpiryCounts:
        """End every queued task whose expiry has passed."""
        counts = ExpiryCounts()
        limit = self.config.page_size
        while True:
            ended = await self.ledger.expire_due(limit)
            counts.pages += 1
            counts.expired += len(ended)
            if len(ended) < limit:
                if counts.expired:
                    log.info("%d tasks expired before they started", counts.expired)
                return counts
