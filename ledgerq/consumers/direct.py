"""The ledger-direct path: a worker claims due tasks straight from the ledger.

``ledgerq worker --direct`` takes no broker connection at all. Its
:class:`DirectClaimer` stands where the broker, :class:`~.intake.Intake` and
:class:`~.claimer.Claimer` stand in the default worker; everything after the
claim is the same pipeline (Dispatcher, Finisher, Leases)::

    ledger ──claim_due──▶ DirectClaimer ──Claimed(task, None)──▶ Dispatcher ──▶ Finisher

Contract:

* One statement per batch (``claim_due``, ledger/direct.sql): the relay's due
  selection (pauses, ordering keys, rate limits, aging, priority, run_at), the
  worker's queues, and the claim's compare-and-set (epoch + 1, ``running``,
  attempts + 1, lease, worker) in one round trip, autocommit. A claimed task
  has no delivery to ack, like lease mode's; the Finisher writes its outcome
  and the lease is its only guard: a worker that dies leaves ``running`` rows
  whose lease the reconciler expires (retry, charged), as in lease mode.
* The claimer asks for at most the free handler slots, and waits until a
  quarter of the batch (``refill``) is free before it asks again, so a busy
  worker claims in batches rather than one slot at a time.
* When a claim comes back short, the ledger has nothing due for it: it waits
  for a wake-up (LISTEN ``ledgerq_enqueued``, :class:`~ledgerq.ledger.pg.notify.Wakeup`,
  which the insert trigger notifies on every enqueue commit) or ``poll_s``,
  whichever comes first. Polling finds what no notification announces: a
  scheduled task coming due, a retry's backoff ending, a pause lifted, tokens
  refilled, and everything behind a transaction pooler (no LISTEN there).

Races, each settled by the row lock or the fence:

* Two direct workers, or a direct worker and a relay, selecting the same row:
  ``FOR UPDATE SKIP LOCKED`` gives it to one; the other skips it this batch.
* A relay publishes a row, then the worker claims it directly: it cannot, the
  direct claim takes only ``pending`` rows; the message claims it (or, lost,
  the reconciler re-publishes it). A row the relay has selected but not yet
  marked published is locked, so it is skipped, never claimed twice.
* A message published for a row that was afterwards claimed directly (a relay
  that published, then died before marking it; the reconciler's re-publish of
  a row that went back to pending): the direct claim bumped the epoch, so the
  delivery's claim finds (id, old epoch) nowhere and the consumer acks it as
  stale. Nothing runs twice.
* A direct claim that fails (the database is away): nothing was claimed (the
  statement is atomic); the slots go back and the claimer backs off.
* Stopping: :meth:`DirectClaimer.stop` finishes the claim in flight (its tasks
  start and are drained with the others) and claims no more.

Not handled here: a suspect (``ledgerq_tasks.suspect``) is claimed like any
other task, not alone as the broker path runs it (docs/guarantees.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar

from ledgerq.consumers.claimer import Slots
from ledgerq.consumers.handoff import Claimed
from ledgerq.ledger.observer import NO_OBSERVER, Observer
from ledgerq.ledger.outages import Outage
from ledgerq.ledger.protocol import DirectLedger
from ledgerq.ledger.scheduling import DEFAULT_AGING_S

log = logging.getLogger("ledgerq.worker")


@dataclass(frozen=True)
class DirectConfig:
    #: Most tasks one claim takes (and never more than the free handler slots).
    batch: int = 100
    #: Longest wait for a wake-up before looking at the ledger again. On PostgreSQL
    #: an enqueue's NOTIFY wakes the worker, so the poll is only its safety net.
    poll_s: float = 1.0
    #: The poll on MySQL / MariaDB, which has no LISTEN: the poll is the only wake-up,
    #: so it sets the idle latency (about half of it on average). One indexed read of
    #: the due index per poll per worker (solid_queue polls every 0.1 s by default).
    mysql_poll_s: ClassVar[float] = 0.1
    #: As the relay's ``aging_s``: due this long, a task goes first at priority 9.
    aging_s: float = DEFAULT_AGING_S
    #: After a failed claim (database away), wait this long before the next.
    backoff_s: float = 1.0

    @classmethod
    def default_poll_s(cls, *, mysql: bool) -> float:
        """The poll when none is given: :attr:`mysql_poll_s` on MySQL, else :attr:`poll_s`."""
        return cls.mysql_poll_s if mysql else cls.poll_s

    def __post_init__(self) -> None:
        if not 1 <= self.batch <= 10_000:
            raise ValueError(f"direct batch must be 1..10000, got {self.batch}")
        if not 0 < self.poll_s <= 60:
            raise ValueError(f"direct poll_s must be in (0, 60], got {self.poll_s}")
        if self.aging_s < 0:
            raise ValueError("direct aging_s must be >= 0")
        if self.backoff_s <= 0:
            raise ValueError("direct backoff_s must be positive")


class DirectClaimer:
    def __init__(
        self,
        ledger: DirectLedger,
        slots: Slots,
        start: Callable[[list[Claimed]], None],
        wake: asyncio.Event,
        *,
        queues: Sequence[str],
        worker_id: str,
        lease_s: float,
        config: DirectConfig,
        observer: Observer = NO_OBSERVER,
        kinds: frozenset[str] | None = None,
    ) -> None:
        self.ledger = ledger
        self.slots = slots
        self.start = start
        #: Set on every enqueue notification (and by :meth:`stop`).
        self.wake = wake
        self.queues = tuple(queues)
        #: The kinds it has handlers for (None: every kind; unit tests).
        self.kinds = kinds
        self.worker_id = worker_id
        self.lease_s = lease_s
        self.config = config
        self.observer = observer
        #: Failed claims (a lost database): one log line per outage, not per claim.
        self.outage = Outage("direct claim", log)
        self.batch = min(config.batch, slots.capacity)
        self.refill = max(1, self.batch // 4)
        self.claimed = 0
        self.claims = 0
        self._stopping = False
        self._loop: asyncio.Task[None] | None = None

    async def claim_once(self) -> tuple[int, int]:
        """Claim up to the free slots (at most a batch); return (asked, won)."""
        asked = min(self.slots.free, self.batch)
        if asked <= 0:
            return 0, 0
        self.slots.take(asked)
        try:
            won = await self.ledger.claim_due(
                self.queues,
                asked,
                self.worker_id,
                self.lease_s,
                aging_s=self.config.aging_s,
                kinds=self.kinds,
            )
        except Exception:
            self.slots.give(asked)
            raise
        self.claims += 1
        if len(won) < asked:
            self.slots.give(asked - len(won))
        if won:
            self.claimed += len(won)
            self.observer.claimed(len(won), 0)
            self.start([Claimed(task, None) for task in won])
        return asked, len(won)

    async def _idle(self) -> None:
        """Wait for a wake-up or the poll interval, whichever comes first."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.wake.wait(), self.config.poll_s)
        self.wake.clear()

    async def _slots(self) -> None:
        """Wait until ``refill`` slots are free (or stopping)."""
        while self.slots.free < self.refill and not self._stopping:
            self.slots.changed.clear()
            await self.slots.changed.wait()

    async def _run(self) -> None:
        while not self._stopping:
            await self._slots()
            if self._stopping:
                break
            try:
                asked, won = await self.claim_once()
            except Exception as exc:  # an outage: one line for all of it (ledger/outages.py)
                self.outage.failed(exc)
                await asyncio.sleep(self.config.backoff_s)
                continue
            self.outage.succeeded()
            if won < asked:  # nothing more due for us now
                await self._idle()

    def start_loop(self) -> None:
        self._stopping = False
        self._loop = asyncio.create_task(self._run(), name="ledgerq-direct")
        log.info("claiming straight from the ledger: %s", ", ".join(self.queues))

    @property
    def running(self) -> bool:
        return self._loop is not None and not self._loop.done()

    async def stop(self) -> None:
        """Finish the claim in flight, then claim no more."""
        self._stopping = True
        self.wake.set()
        self.slots.changed.set()
        if self._loop is not None:
            await asyncio.gather(self._loop, return_exceptions=True)


@dataclass(frozen=True)
class FallbackConfig:
    #: How long the broker connection must be down before the worker claims from
    #: the ledger itself (a blip, a broker restart of a few seconds, is waited out).
    after_s: float = 10.0
    #: How often the connection is looked at.
    check_s: float = 0.5

    def __post_init__(self) -> None:
        if not 0 < self.after_s <= 3600:
            raise ValueError(f"broker fallback must be in (0, 3600] seconds, got {self.after_s}")
        if self.check_s <= 0:
            raise ValueError("fallback check_s must be positive")


class Fallback:
    """Broker-down mode: while the broker connection has been down ``after_s``, the
    :class:`DirectClaimer` claims; once it is back, the claimer stops (the claim in
    flight finishes, its tasks run to the end and are written like any direct
    task) and the consumer's deliveries, which the relay publishes again, take over.

    The relay meanwhile fails to publish and marks nothing published, so the
    rows stay ``pending``, where the direct claim finds them. Messages published
    before the broker went away are delivered when it is back: the ones whose
    rows were claimed directly meanwhile are stale (the epoch moved) and acked
    unrun. ``run_once`` is the loop's step and says what it did."""

    def __init__(
        self, claimer: DirectClaimer, broker_up: Callable[[], bool], config: FallbackConfig
    ) -> None:
        self.claimer = claimer
        self.broker_up = broker_up
        self.config = config
        self.down_since: float | None = None
        self.fallbacks = 0
        self._stopping = asyncio.Event()
        self._loop: asyncio.Task[None] | None = None

    async def run_once(self, now: float) -> str:
        """One look at the connection: ``"fell back"``, ``"returned"`` or ``""``."""
        if self.broker_up():
            self.down_since = None
            if self.claimer.running:
                await self.claimer.stop()
                log.warning("broker back: consuming again, no more direct claims")
                return "returned"
            return ""
        if self.down_since is None:
            self.down_since = now
        if not self.claimer.running and now - self.down_since >= self.config.after_s:
            self.fallbacks += 1
            log.warning(
                "broker down for %.0fs: claiming straight from the ledger until it is back",
                now - self.down_since,
            )
            self.claimer.start_loop()
            return "fell back"
        return ""

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._stopping.is_set():
            try:
                await self.run_once(loop.time())
            except Exception:  # a bug of ours must not stop the watch
                log.exception("broker fallback check failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), self.config.check_s)

    def start(self) -> None:
        self._loop = asyncio.create_task(self._run(), name="ledgerq-fallback")

    async def stop(self) -> None:
        """Stop watching; the claimer (if it runs) is the worker's to stop."""
        self._stopping.set()
        if self._loop is not None:
            await asyncio.gather(self._loop, return_exceptions=True)
