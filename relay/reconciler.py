"""The reconciler: the ledger's safety net under the broker, run as a cron job.

One pass, under a PostgreSQL advisory lock so only one reconciler acts at a time:

1. **Expired leases.** A ``running`` row whose lease ran out lost its worker (it
   crashed, hung, or was cut off). Who pays depends on what else that worker
   had in flight (crash attribution):

   - *alone*: the task was the only one running, so it is charged a failed
     attempt: back to ``pending`` with its backoff, or ``dead`` once attempts
     are spent, so a task that always kills its worker cannot loop forever;
   - *with others*: any of them may be the culprit. Each is released: back to
     ``pending`` at once, the attempt not charged, flagged ``suspect``. The
     relay publishes a suspect with ``"alone": true`` in its message and a
     worker claims it only when nothing else runs there, and runs nothing else
     beside it (``consumers/claimer.py``). A suspect that kills its worker
     again is then alone, and charged: a poison task still ends dead within
     its attempts, and its neighbours lose nothing.

   A worker heartbeats all its tasks together, so their leases run out within
   about one heartbeat of each other. The pass first reads which workers have
   *all* their leases expired (``silent_workers``) and how many rows each left,
   and judges only those, so a worker's rows are counted together even when
   they expire across passes or pages. A row whose lease expired over
   ``settle_s`` ago is judged (and charged) anyway, so a worker that still
   heartbeats other tasks cannot hold it forever. An external SIGKILL of a
   worker running a suspect alone charges the suspect: the one case where a
   task pays for a death it did not cause, and only while it is a suspect.
   The relay publishes the retry like any other due row.

   **Dead workers first.** A worker beats a liveness row every second or so
   (:mod:`ledgerq.consumers.liveness`, migration 0017). One whose beats stopped
   for its silence (5 s by default) while other workers' went on is presumed
   dead (``ledgerq_worker_dead``): its running rows are judged now, as if all
   its leases had run out (``dead_workers``, ``orphaned_batch``: the same
   verdicts, the same fenced ``finish``, so an attempt of a worker that was
   only slow cannot write over the rescue; each page audited, actor
   ``ledgerq``), and its subscriptions expire now (so step 2 takes back what
   was published to a route only it served). A SIGKILLed worker's tasks are
   back in the ledger within its silence plus one pass, instead of a lease.
   Silence is judged against the other workers' beats, never the clock alone:
   after a PostgreSQL restart nobody is presumed dead until the others are
   back. A worker without a liveness row keeps the lease as its only bound.

   Races: a worker cut off from the database (or its event loop blocked) for
   longer than its silence, but alive, is presumed dead like a dead one: its
   tasks run again elsewhere while it may still be running them, and its own
   writes are fenced out (its finish, heartbeat and checkpoints lose). The
   broker's redelivery of its messages to another worker claims nothing while
   the row is ``running`` (acked as a loser); the rescue puts the row back to
   ``pending`` (or a scheduled retry) and the relay publishes it again.
2. **Unserved deliveries.** A ``published`` row whose route no live worker
   serves any more (its workers stopped, or died and their subscriptions lapsed
   within one lease; or its queue is now served ``--direct``) goes back to
   ``pending``, its epoch bumped so the message stranded in that broker queue
   claims nothing, with an audit record (actor ``ledgerq``). The relay then
   gives it to any live window that covers it (docs/design.md, "The window").
3. **Stalled deliveries.** A ``published`` row nobody claimed within its queue's
   stall window, on a route that is still served, may have lost its message (a
   broker that lost it, a queue that was purged). It is published again to the
   same route under the same epoch; if the first message was only slow, one of
   the two claims wins and the other is skipped.
4. **Overdue pending rows.** Due rows the relay has not published within the
   stall window (the relay is down) are published here instead, exactly as a
   relay would (the same rule, within the same windows).

Tasks that end ``dead`` in step 1 are alerted after the pass, once the lock is
released, so a slow alert hook never holds the lock; ``run_once`` returns when
the alerts are sent or have met their deadlines (``elapsed_s`` is the locked pass).
A pass that fails part-way (its connection lost) still alerts the tasks it
committed dead before it raises.

5. **Retention** (when the reconciler has a :class:`~ledgerq.relay.retention.Retention`),
   also after the lock is released, and only by the reconciler that held it:
   history's upcoming day partitions are created and expired ones dropped
   (:meth:`Retention.run_once <ledgerq.relay.retention.Retention.run_once>`; it
   is safe to run twice at once). A drop that waited too long for its lock, or
   a lost connection, is logged and tried again next pass.

6. **Rollup** (when the reconciler has a :class:`~ledgerq.relay.rollup.Rollup`),
   after the lock is released too, before retention: the tasks finished since
   the last pass are counted per minute for the dashboard
   (:meth:`Rollup.run_once <ledgerq.relay.rollup.Rollup.run_once>`; safe to run
   twice at once). A lost connection is logged and the pass tried again next time.

Steps 1 and 3 page through rows by id (keyset pagination); step 4 asks for a
page at a time until one comes back short or wins no confirm. Each holds its page's
rows locked (``FOR UPDATE SKIP LOCKED``) while it acts on them: expired leases
are finished in the page's transaction, stalled and overdue rows are published
(with pika, through :class:`~ledgerq.relay.broker.blocking.ThreadedPublisher`)
and only the confirmed ones marked.

Shaped like River's maintenance services: :class:`ReconcilerConfig` validates
its defaults and :meth:`Reconciler.run_once` does one pass and returns counts.
A failed pass raises; the loop around it (``ledgerq reconcile --every``,
:func:`ledgerq.compose.serve_reconciler`) lives through a lost database by the
rule every loop shares (:mod:`ledgerq.ledger.outages`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar

from ledgerq.ledger.alerts import AlertHook, AlertSender, log_alert
from ledgerq.ledger.errors import TransientStorageError
from ledgerq.ledger.model import Finished
from ledgerq.ledger.protocol import ExpiredBatch, PublishBatch, ReconcilerLedger
from ledgerq.ledger.scheduling import DEFAULT_AGING_S
from ledgerq.relay.broker.base import Publisher, PublishOutcome
from ledgerq.relay.retention import Retention, RetentionCounts
from ledgerq.relay.rollup import Rollup, RollupCounts

log = logging.getLogger("ledgerq.reconciler")

#: How long a pass waits, after releasing its lock, for its dead-task alerts.
ALERTS_WAIT_S = 30.0


@dataclass(frozen=True)
class ReconcilerConfig:
    #: A published row unclaimed for this long is published again.
    stall_s: float = 180.0
    #: Per-queue stall windows, overriding ``stall_s`` (a queue of slow tasks
    #: with a deep backlog wants a longer one).
    queue_stall_s: Mapping[str, float] = field(default_factory=dict)
    page_size: int = 500
    #: How long to wait for each re-publish's confirm (bounds pika's socket waits).
    confirm_timeout: float = 10.0
    #: An expired lease is judged once all its worker's leases ran out, or once
    #: it has been expired this long, whichever comes first.
    settle_s: float = 60.0
    #: As the relay's: the overdue step picks by the relay's rule, aging included
    #: (LEDGERQ_PRIORITY_AGING_S).
    aging_s: float = DEFAULT_AGING_S

    def __post_init__(self) -> None:
        if self.stall_s <= 0:
            raise ValueError(f"stall_s must be positive, got {self.stall_s}")
        for queue, seconds in self.queue_stall_s.items():
            if seconds <= 0:
                raise ValueError(f"stall window for queue {queue!r} must be positive")
        if not 1 <= self.page_size <= 10_000:
            raise ValueError(f"page_size must be 1..10000, got {self.page_size}")
        if self.settle_s <= 0:
            raise ValueError(f"settle_s must be positive, got {self.settle_s}")


@dataclass
class ReconcileCounts:
    acted: bool = True
    republished: int = 0
    overdue_published: int = 0
    unpublished: int = 0
    expired: int = 0
    #: Of ``expired``: rows of workers presumed dead, taken before their leases ran out.
    orphaned: int = 0
    dead: int = 0
    released: int = 0
    unconfirmed: int = 0
    pages: int = 0
    elapsed_s: float = 0.0
    retention: RetentionCounts | None = None
    rollup: RollupCounts | None = None

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["elapsed_s"] = round(self.elapsed_s, 4)
        data["retention"] = None if self.retention is None else self.retention.as_dict()
        data["rollup"] = None if self.rollup is None else self.rollup.as_dict()
        return data

    def line(self) -> str:
        if not self.acted:
            return "reconcile: another reconciler holds the lock; this one did nothing"
        return (
            f"reconcile: took back {self.unpublished} from unserved routes, "
            f"re-published {self.republished} stalled, published "
            f"{self.overdue_published} overdue, expired {self.expired} leases "
            f"({self.orphaned} of dead workers, {self.dead} dead, "
            f"{self.released} released as suspects), "
            f"{self.unconfirmed} unconfirmed, {self.pages} pages "
            f"in {self.elapsed_s * 1000:.0f} ms"
        ) + "".join("; " + c.line() for c in (self.rollup, self.retention) if c is not None)


PageSource = Callable[[int], AbstractAsyncContextManager[PublishBatch]]
ExpiredSource = Callable[[int], AbstractAsyncContextManager[ExpiredBatch]]
T = TypeVar("T")


async def _upkeep(name: str, step: Callable[[], Awaitable[T]] | None) -> T | None:
    """An upkeep pass after the lock (rollup, retention): a lost connection is
    logged and the pass tried again next time."""
    if step is None:
        return None
    try:
        return await step()
    except TransientStorageError as exc:
        log.warning("%s pass failed (%s); tried again next pass", name, exc)
        return None


@dataclass
class Reconciler:
    ledger: ReconcilerLedger
    publisher: Publisher
    config: ReconcilerConfig = field(default_factory=ReconcilerConfig)
    alert: AlertHook = log_alert
    retention: Retention | None = None
    rollup: Rollup | None = None

    async def run_once(self) -> ReconcileCounts:
        started = time.perf_counter()
        dead: list[Finished] = []
        try:
            async with self.ledger.exclusive() as acquired:
                if not acquired:
                    log.info("another reconciler holds the lock; skipping this pass")
                    return ReconcileCounts(acted=False, elapsed_s=time.perf_counter() - started)
                counts = ReconcileCounts()
                await self._expire(counts, dead)
                cfg = self.config
                counts.unpublished = await self._unpublish()
                counts.republished = await self._republish(
                    counts,
                    lambda after: self.ledger.stalled_batch(
                        after, cfg.page_size, cfg.stall_s, cfg.queue_stall_s
                    ),
                )
                counts.overdue_published = await self._republish(
                    counts,
                    lambda _after: self.ledger.overdue_batch(
                        cfg.page_size, cfg.stall_s, cfg.aging_s
                    ),
                )
        except Exception:
            # The pass failed (a lost connection, say) after some tasks ended dead and
            # were committed: they are alerted all the same, then the error goes on.
            await self._send_alerts(dead)
            raise
        counts.elapsed_s = time.perf_counter() - started
        await self._send_alerts(dead)
        counts.rollup = await _upkeep(
            "rollup", None if self.rollup is None else self.rollup.run_once
        )
        counts.retention = await _upkeep(
            "retention", None if self.retention is None else self.retention.run_once
        )
        return counts

    async def _send_alerts(self, dead: list[Finished]) -> None:
        """After the pass, outside the lock: each alert within its deadline, a few at
        a time, and all of them within :data:`ALERTS_WAIT_S`."""
        if not dead:
            return
        sender = AlertSender(self.alert)
        for row in dead:
            sender.submit(row)
        await sender.close(ALERTS_WAIT_S)

    async def _expire(self, counts: ReconcileCounts, dead: list[Finished]) -> None:
        """Step 1: the rows of workers presumed dead, then expired leases."""
        cfg = self.config
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
                counts, dead, lambda after: self.ledger.orphaned_batch(after, cfg.page_size, gone)
            )
        silent = await self.ledger.silent_workers()
        await self._finish_pages(
            counts,
            dead,
            lambda after: self.ledger.expired_batch(after, cfg.page_size, silent, cfg.settle_s),
        )

    async def _finish_pages(
        self, counts: ReconcileCounts, dead: list[Finished], pages: ExpiredSource
    ) -> None:
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
                    dead.append(row)

    async def _unpublish(self) -> int:
        """Published rows of routes no live worker serves go back to pending."""
        total = 0
        while True:
            moved = await self.ledger.unpublish_unserved(self.config.page_size)
            total += len(moved)
            if len(moved) < self.config.page_size:
                if total:
                    log.info("took back %d tasks published to routes nobody serves", total)
                return total

    async def _republish(self, counts: ReconcileCounts, pages: PageSource) -> int:
        after, published = 0, 0
        while True:
            async with pages(after) as batch:
                if not batch.rows:
                    return published
                counts.pages += 1
                outcomes = await self.publisher.publish_many(
                    [(row,) for row in batch.rows], self.config.confirm_timeout
                )
                confirmed = [
                    r
                    for r, o in zip(batch.rows, outcomes, strict=True)
                    if o is PublishOutcome.CONFIRMED
                ]
                counts.unconfirmed += len(batch.rows) - len(confirmed)
                published += len(await batch.mark_published(confirmed))
                after = batch.rows[-1].id
                if len(batch.rows) < self.config.page_size or not confirmed:
                    return published
