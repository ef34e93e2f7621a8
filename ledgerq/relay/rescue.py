"""The rescuer: running rows whose worker is gone, judged and finished.

**Expired leases.** A ``running`` row whose lease ran out lost its worker (it
crashed, hung, or was cut off). Who pays depends on what else that worker had
in flight (crash attribution):

- *alone*: the task was the only one running, so it is charged a failed
  attempt: back to ``pending`` with its backoff, or ``dead`` once attempts are
  spent, so a task that always kills its worker cannot loop forever;
- *with others*: any of them may be the culprit. Each is released: back to
  ``pending`` at once, the attempt not charged, flagged ``suspect``. The relay
  publishes a suspect with ``"alone": true`` in its message and a worker claims
  it only when nothing else runs there, and runs nothing else beside it
  (``consumers/claimer.py``). A suspect that kills its worker again is then
  alone, and charged: a poison task still ends dead within its attempts, and
  its neighbours lose nothing.

A worker heartbeats all its tasks together, so their leases run out within
about one heartbeat of each other. The pass first reads which workers have
*all* their leases expired (``silent_workers``) and how many rows each left,
and judges only those, so a worker's rows are counted together even when they
expire across passes or pages. A row whose lease expired over ``settle_s`` ago
is judged (and charged) anyway, so a worker that still heartbeats other tasks
cannot hold it forever. An external SIGKILL of a worker running a suspect
alone charges the suspect: the one case where a task pays for a death it did
not cause, and only while it is a suspect. The relay publishes the retry like
any other due row.

**Dead workers first.** A worker beats a liveness row every second or so
(:mod:`ledgerq.consumers.liveness`, migration 0017). One whose beats stopped
for its silence (5 s by default) while other workers' went on is presumed dead
(``ledgerq_worker_dead``): its running rows are judged now, as if all its
leases had run out (``dead_workers``, ``orphaned_batch``: the same verdicts,
the same fenced ``finish``, so an attempt of a worker that was only slow
cannot write over the rescue; each page audited, actor ``ledgerq``), and its
subscriptions expire now (so :mod:`~ledgerq.relay.unserved` takes
back what was published to a route only it served). A SIGKILLed worker's tasks
are back in the ledger within its silence plus one pass, instead of a lease.
Silence is judged against the other workers' beats, never the clock alone:
after a PostgreSQL restart nobody is presumed dead until the others are back.
A worker without a liveness row keeps the lease as its only bound.

Contract: run under the reconciler's advisory lock, first of the locked
services. Pages through rows by id (keyset pagination), each page locked
(``FOR UPDATE SKIP LOCKED``) and finished in its own transaction. The tasks it
ends ``dead`` are kept in :attr:`Rescuer.buried` for the loop to alert after the
lock is released (:meth:`Rescuer.take_buried`): a pass that fails part-way has
committed the pages before the failure, and those are alerted all the same.

Races: a worker cut off from the database (or its event loop blocked) for
longer than its silence, but alive, is presumed dead like a dead one: its
tasks run again elsewhere while it may still be running them, and its own
writes are fenced out (its finish, heartbeat and checkpoints lose). The
broker's redelivery of its messages to another worker claims nothing while
the row is ``running`` (acked as a loser); the rescue puts the row back to
``pending`` (or a scheduled retry) and the relay publishes it again. A worker
finishing a row as the page locks it: one of the two fenced writes wins; the
page's ``finish`` returns only the rows it moved.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from ledgerq.ledger.model import Finished
from ledgerq.ledger.protocol import ExpiredBatch
from ledgerq.relay.maintenance import check_page_size

log = logging.getLogger("ledgerq.reconciler")


class RescueLedger(Protocol):
    """What the rescuer asks of the ledger (part of
    :class:`~ledgerq.ledger.protocol.ReconcilerLedger`)."""

    async def lapse_dead_subscriptions(self) -> int: ...

    async def dead_workers(self) -> dict[str, int]: ...

    async def silent_workers(self) -> dict[str, int]: ...

    def orphaned_batch(
        self, after: int, limit: int, dead: Mapping[str, int]
    ) -> AbstractAsyncContextManager[ExpiredBatch]: ...

    def expired_batch(
        self, after: int, limit: int, silent: Mapping[str, int], settle_s: float
    ) -> AbstractAsyncContextManager[ExpiredBatch]: ...


#: A page of running rows to judge, locked for the block: ids after the argument.
ExpiredSource = Callable[[int], AbstractAsyncContextManager[ExpiredBatch]]


@dataclass(frozen=True)
class RescueConfig:
    page_size: int = 500
    #: An expired lease is judged once all its worker's leases ran out, or once
    #: it has been expired this long, whichever comes first.
    settle_s: float = 60.0

    def __post_init__(self) -> None:
        check_page_size(self.page_size)
        if self.settle_s <= 0:
            raise ValueError(f"settle_s must be positive, got {self.settle_s}")


@dataclass
class RescueCounts:
    #: Rows judged and finished (retried, dead or released).
    expired: int = 0
    #: Of ``expired``: rows of workers presumed dead, taken before their leases ran out.
    orphaned: int = 0
    dead: int = 0
    released: int = 0
    pages: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Rescuer:
    ledger: RescueLedger
    config: RescueConfig = field(default_factory=RescueConfig)
    #: Tasks ended ``dead`` by passes whose alerts the loop has not taken yet.
    buried: list[Finished] = field(default_factory=list, repr=False)

    async def run_once(self) -> RescueCounts:
        """Dead workers' rows, then expired leases (see the module docstring)."""
        counts = RescueCounts()
        size = self.config.page_size
        if await self.ledger.lapse_dead_subscriptions():
            log.info("subscriptions of workers presumed dead expired")
        gone = await self.ledger.dead_workers()
        if gone:
            log.warning(
                "workers presumed dead (liveness beats stopped): %s; rescuing %d running tasks",
                ", ".join(sorted(gone)),
                sum(gone.values()),
            )
            await self._finish_pages(
                counts, lambda after: self.ledger.orphaned_batch(after, size, gone)
            )
        silent = await self.ledger.silent_workers()
        await self._finish_pages(
            counts,
            lambda after: self.ledger.expired_batch(after, size, silent, self.config.settle_s),
        )
        return counts

    def take_buried(self) -> list[Finished]:
        """The tasks ended dead since the last call, to alert (outside the lock)."""
        buried, self.buried = self.buried, []
        return buried

    async def _finish_pages(self, counts: RescueCounts, pages: ExpiredSource) -> None:
        after = 0
        while True:
            async with pages(after) as batch:
                if not batch.rows:
                    return
                counts.pages += 1
                outcomes = {lease.id: lease.outcome() for lease in batch.rows}
                finished = await batch.finish(list(outcomes.values()))
                after = batch.rows[-1].id
            orphaned = {lease.id for lease in batch.rows if lease.orphaned}
            for row in finished:
                counts.expired += 1
                counts.orphaned += row.id in orphaned
                if outcomes[row.id].verdict == "release":
                    counts.released += 1
                elif row.status == "dead":
                    counts.dead += 1
                    self.buried.append(row)
