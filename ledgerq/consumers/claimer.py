"""Claiming: arrivals in, as many as there are free handler slots, one
compare-and-set statement per batch.

A delivery waits here, unclaimed, until a slot is free, so no attempt is counted
for a task that has not started. The claim bumps the epoch, so the delivery that
won carried ``epoch - 1``: matching by (id, epoch) keeps a stale duplicate in
the same batch from taking the winner's place. Winners go to the dispatcher;
losers (a row already finished, cancelled, or claimed by another worker) are
acked at once, because the row moved on without them. If the claim itself fails
(the database is away), the batch is requeued to the broker and the claimer
backs off for a second; an outage is logged once, when it begins and when it
ends (:mod:`ledgerq.ledger.outages`).

Suspects run alone. A message with ``"alone": true`` names a task whose last
worker died with other tasks in flight (``relay/reconciler.py``). When one waits
in the inbox, the claimer claims nothing new until every handler slot is free,
then claims the suspect by itself, and nothing more until its slot is given
back. Other deliveries wait in the inbox meanwhile, unclaimed (so no attempt is
counted for them, and if the suspect kills the worker they are simply
redelivered). If the suspect then kills the worker, it was the only running row
of that worker, and the reconciler charges it.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable

from ledgerq.broker.base import Delivery
from ledgerq.consumers.acker import Acker
from ledgerq.consumers.handoff import Arrival, Claimed
from ledgerq.ledger.observer import NO_OBSERVER, Observer
from ledgerq.ledger.outages import Outage
from ledgerq.ledger.protocol import WorkerLedger

log = logging.getLogger("ledgerq.worker")


class Slots:
    """Free handler slots; taking them is the claimer's, giving back the dispatcher's.

    ``alone`` is set while a suspect holds the one slot taken, and clears when
    every slot is free again."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.free = capacity
        self.alone = False
        self.changed = asyncio.Event()

    @property
    def idle(self) -> bool:
        return self.free >= self.capacity

    def take(self, n: int, *, alone: bool = False) -> None:
        self.free -= n
        self.alone = alone

    def give(self, n: int = 1) -> None:
        self.free += n
        if self.idle:
            self.alone = False
        self.changed.set()


class Claimer:
    def __init__(
        self,
        ledger: WorkerLedger,
        acker: Acker,
        slots: Slots,
        start: Callable[[list[Claimed]], None],
        *,
        worker_id: str,
        lease_s: float,
        max_batch: int,
        observer: Observer = NO_OBSERVER,
        lease_kinds: frozenset[str] = frozenset(),
    ) -> None:
        self.ledger = ledger
        #: Kinds in lease mode: their deliveries are acked as soon as the claim commits.
        self.lease_kinds = lease_kinds
        self.observer = observer
        self.acker = acker
        self.slots = slots
        self.start = start
        self.worker_id = worker_id
        self.lease_s = lease_s
        self.max_batch = max_batch
        self.inbox: deque[Arrival] = deque()
        self._alone_waiting = 0
        self.claimed = 0
        self.skipped = 0
        self._stopping = False
        self._loop: asyncio.Task[None] | None = None
        #: Failed claims (the database away): one line per outage, not one per batch.
        self.outage = Outage("claiming deliveries (returned to the broker meanwhile)", log)

    def offer(self, arrival: Arrival) -> None:
        self.inbox.append(arrival)
        self._alone_waiting += arrival.alone
        self.slots.changed.set()

    def _next_batch(self) -> list[Arrival]:
        """Take the next batch off the inbox and its slots, or nothing (see the
        module docstring for suspects)."""
        if self.slots.alone:
            return []
        if self._alone_waiting:
            if not self.slots.idle:
                return []
            suspect = next(a for a in self.inbox if a.alone)
            self.inbox.remove(suspect)
            self._alone_waiting -= 1
            self.slots.take(1, alone=True)
            log.info("task %s is a suspect; running it alone", suspect.fence[0])
            return [suspect]
        take = min(self.slots.free, self.max_batch, len(self.inbox))
        if take <= 0:
            return []
        self.slots.take(take)
        return [self.inbox.popleft() for _ in range(take)]

    async def claim_once(self) -> int:
        """Claim one batch from the inbox (at most the free slots); return its size."""
        batch = self._next_batch()
        take = len(batch)
        if not take:
            return 0
        try:
            won = await self.ledger.claim([a.fence for a in batch], self.worker_id, self.lease_s)
        except Exception as exc:  # logged once per outage, a traceback only for a bug
            self.outage.failed(exc)
            self.slots.give(len(batch))
            await self.acker.reject([a.delivery for a in batch], requeue=True)
            await asyncio.sleep(1.0)
            return take
        self.outage.succeeded()
        by_fence = {(t.id, t.epoch - 1): t for t in won}
        winners: list[Claimed] = []
        losers: list[Arrival] = []
        leased: list[Delivery] = []
        for arrival in batch:
            task = by_fence.pop(arrival.fence, None)
            if task is None:
                losers.append(arrival)
            elif task.kind in self.lease_kinds:  # the ledger's lease holds it from now on
                leased.append(arrival.delivery)
                winners.append(Claimed(task, None))
            else:
                winners.append(Claimed(task, arrival.delivery))
        if leased:
            await self.acker.finished(leased)
        self.claimed += len(winners)
        self.observer.claimed(len(winners), len(losers))
        if winners:
            self.start(winners)
        if losers:
            self.slots.give(len(losers))
            await self._skip(losers)
        return take

    async def _skip(self, losers: list[Arrival]) -> None:
        try:
            where = await self.ledger.whereabouts(a.fence[0] for a in losers)
        except Exception:
            where = {}
        for (task_id, epoch), _ in ((a.fence, a) for a in losers):
            status = where.get(task_id)
            if status is None:
                log.warning("delivery names task %s, which is not in the ledger; acked", task_id)
            elif status == "cancelled":
                log.info("task %s was cancelled; its delivery is acked and skipped", task_id)
            else:
                log.debug("task %s (epoch %s) is %s; stale delivery acked", task_id, epoch, status)
        self.skipped += len(losers)
        await self.acker.finished([a.delivery for a in losers])

    async def _run(self) -> None:
        while not self._stopping:
            await self.slots.changed.wait()
            self.slots.changed.clear()
            while self.inbox and self.slots.free > 0 and not self._stopping:
                try:
                    if not await self.claim_once():
                        break  # waiting for slots to free up around a suspect
                except Exception:  # a bug of ours must not stop the claimer
                    log.exception("claim batch failed unexpectedly")

    def start_loop(self) -> None:
        self._loop = asyncio.create_task(self._run(), name="ledgerq-claimer")

    async def stop(self) -> None:
        """Finish the claim in flight, then claim no more; what waits in the inbox
        stays unacked (the broker requeues it when the channel closes)."""
        self._stopping = True
        self.slots.changed.set()
        if self._loop is not None:
            await asyncio.gather(self._loop, return_exceptions=True)
