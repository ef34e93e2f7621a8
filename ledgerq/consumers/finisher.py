"""Finishing and acking: outcomes in, one fenced ``finish`` statement per batch,
then the acks, and only then.

Every claimed task reaches the finisher exactly once, as an
:class:`~.handoff.Ended`. Those whose handler committed in its own transaction
need no write, nor those whose handler's thread still ran when the worker
stopped (:class:`~.handoff.StillRunning`: their delivery is acked, their lease
kept until the heartbeat stops, then left to lapse); the rest are written
together, in one round trip. A transient
storage error (the database away for a moment) is retried every second; any
other error, or a transient one that lasts past the shutdown grace, gives the
batch back: its leases are no longer renewed (they lapse, and the reconciler
retries the tasks) and its deliveries are requeued.

Tasks that end ``dead`` raise an alert in the background
(:class:`~ledgerq.alerting.alerts.AlertSender`: bounded concurrency, a total
deadline per alert): a slow webhook holds up neither the loop (heartbeats) nor
later outcomes (acks). At shutdown, alerts get what is left of the grace;
those still running then are abandoned with a log line.
"""

from __future__ import annotations

import asyncio
import logging
import time

from ledgerq.alerting.alerts import AlertHook, AlertSender, log_alert
from ledgerq.consumers.acker import Acker
from ledgerq.consumers.handoff import Committed, Ended, StillRunning
from ledgerq.consumers.leases import Leases
from ledgerq.core.errors import TransientStorageError
from ledgerq.hooks.probes import Probe, no_probe
from ledgerq.ledger.model import Finished, Outcome
from ledgerq.ledger.observer import NO_OBSERVER, Observer
from ledgerq.ledger.protocol import FinishingLedger

log = logging.getLogger("ledgerq.worker")

#: The outcome an observer is told, by the status the finish statement wrote.
OUTCOMES = {"pending": "failed"}


class Finisher:
    def __init__(
        self,
        ledger: FinishingLedger,
        acker: Acker,
        leases: Leases,
        *,
        max_batch: int,
        grace_s: float,
        alert: AlertHook = log_alert,
        probe: Probe = no_probe,
        observer: Observer = NO_OBSERVER,
    ) -> None:
        self.ledger = ledger
        self.observer = observer
        self.acker = acker
        self.leases = leases
        self.max_batch = max_batch
        self.grace_s = grace_s
        self.alert = alert
        self.probe = probe
        self.succeeded = self.retried = self.dead = self.cancelled = 0
        #: Outcomes given back unwritten (their leases lapse; the reconciler retries them).
        self.unwritten = 0
        self._outbox: list[Ended] = []
        self._wake = asyncio.Event()
        self._closing = False
        self._stop_started: float | None = None
        self.alerts = AlertSender(alert)
        self._loop: asyncio.Task[None] | None = None

    def put(self, ended: Ended) -> None:
        self._outbox.append(ended)
        self._wake.set()

    async def finish_batch(self, batch: list[Ended]) -> None:
        """Write what needs writing, then ack every delivery of the batch."""
        outcomes = [e.result for e in batch if isinstance(e.result, Outcome)]
        while True:
            try:
                finished = await self.ledger.finish(outcomes)
                break
            except TransientStorageError as exc:
                if self._past_grace():
                    log.error("writing %d outcomes failed past the grace (%s)", len(batch), exc)
                    await self._give_back(batch)
                    return
                log.warning("writing %d outcomes failed (%s); retrying", len(batch), exc)
                await asyncio.sleep(1.0)
            except Exception:
                log.exception(
                    "writing %d outcomes failed and will not succeed now; returning them to "
                    "the broker: their leases lapse and the reconciler retries them",
                    len(batch),
                )
                await self._give_back(batch)
                return
        self.probe("worker.after_commit")
        self._count(batch, finished)
        for ended in batch:
            if not isinstance(ended.result, StillRunning):  # heartbeats go on to the end
                self.leases.forget(ended.task.fence)
        await self.acker.finished([e.delivery for e in batch if e.delivery is not None])

    def _count(self, batch: list[Ended], finished: list[Finished]) -> None:
        for ended in batch:
            if isinstance(ended.result, Committed):
                if ended.result.won:
                    self.succeeded += 1
                    self.observer.ended(ended.task.kind, "succeeded")
                else:
                    log.warning(
                        "task %s: fence lost before commit; the handler's writes were rolled back",
                        ended.task.id,
                    )
        for row in finished:
            self.observer.ended(row.kind, OUTCOMES.get(row.status, row.status))
            if row.status == "succeeded":
                self.succeeded += 1
            elif row.status == "dead":
                self.dead += 1
                self._alert_later(row)
            elif row.status == "cancelled":
                self.cancelled += 1
            else:
                self.retried += 1

    def _past_grace(self) -> bool:
        started = self._stop_started
        return started is not None and time.monotonic() - started > self.grace_s

    async def _give_back(self, batch: list[Ended]) -> None:
        self.unwritten += sum(isinstance(e.result, Outcome) for e in batch)
        for ended in batch:
            self.leases.forget(ended.task.fence)
        await self.acker.reject([e.delivery for e in batch if e.delivery is not None], requeue=True)

    def _alert_later(self, row: Finished) -> None:
        self.alerts.submit(row)

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._outbox:
                batch = self._outbox[: self.max_batch]
                del self._outbox[: len(batch)]
                try:
                    await self.finish_batch(batch)
                except Exception:  # a bug of ours must not stop the finisher
                    log.exception("finishing %d outcomes failed unexpectedly", len(batch))
                    await self._give_back(batch)
            if self._closing and not self._outbox:
                return

    def start(self) -> None:
        self._loop = asyncio.create_task(self._run(), name="ledgerq-finisher")

    @property
    def closing(self) -> bool:
        """Shutdown began (see :meth:`stopping`)."""
        return self._stop_started is not None or self._closing

    def stopping(self) -> None:
        """Shutdown began: the grace for retrying writes runs from now."""
        self._stop_started = time.monotonic()

    async def close(self) -> None:
        """No more outcomes will come: write and ack what is left, then stop."""
        self._closing = True
        self._wake.set()
        if self._loop is not None:
            await self._loop
        started = self._stop_started
        left = self.grace_s if started is None else self.grace_s - (time.monotonic() - started)
        await self.alerts.close(left)
