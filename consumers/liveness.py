"""The worker's liveness beat: how the reconciler tells a dead worker in seconds.

From its start to the end of its stop, the worker writes its row in
``ledgerq_workers`` every ``beat_s`` (``worker_alive``: one tiny upsert, apart
from the task leases' heartbeat). The row carries ``silence_s``, the silence
after which the worker is to be presumed dead. The reconciler rescues the
running tasks of a worker presumed dead at once, with the same fenced
``finish`` a lapsed lease gets (:mod:`ledgerq.relay.reconciler`, step 1), so a
SIGKILLed worker's tasks are back within its silence plus one reconciler pass,
not a lease. On a clean stop, once every outcome is written, the worker marks
itself gone (``worker_gone``): a task it still held (a sync handler that
outlived the grace) is rescued on the next pass.

Races: the judgment needs other workers' beats after the silence ran out, so
a PostgreSQL restart or failover (every worker silent at once) presumes nobody
dead. A worker alive but cut off from the database for longer than its
silence is presumed dead all the same: its tasks run again elsewhere, and its
own writes lose their fences (its leases' heartbeat then flags their
contexts ``lost``). A beat that fails is retried on the next one and logged
once per outage (:mod:`ledgerq.ledger.outages`). The first beat, at start,
raises if the ledger refuses it (a schema older than migration 0017).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from ledgerq.ledger.outages import Outage
from ledgerq.ledger.protocol import RoutingLedger

log = logging.getLogger("ledgerq.worker")

#: Beats per silence: a worker is presumed dead after this many missed beats.
BEATS_PER_SILENCE = 5
#: How long a stopping worker waits to mark itself gone.
GONE_WAIT_S = 2.0


class Liveness:
    def __init__(self, ledger: RoutingLedger, worker_id: str, silence_s: float) -> None:
        if silence_s <= 0:
            raise ValueError(f"liveness silence must be positive, got {silence_s}")
        self._ledger = ledger
        self._worker_id = worker_id
        self.silence_s = silence_s
        self.beat_s = silence_s / BEATS_PER_SILENCE
        self._task: asyncio.Task[None] | None = None
        #: Beats that failed (logged once per outage), for tests and health.
        self.failures = 0
        self.outage = Outage("the worker's liveness beat (its tasks may be rescued)", log)

    async def start(self) -> None:
        """Beat now (raising if the ledger refuses), then every ``beat_s`` in the background."""
        await self._ledger.alive(self._worker_id, self.silence_s)
        self._task = asyncio.create_task(self._loop(), name="ledgerq-liveness")

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.beat_s)
            try:
                await self._ledger.alive(self._worker_id, self.silence_s)
                self.outage.succeeded()
            except Exception as exc:  # the database away: the next beat tries again
                self.failures += 1
                self.outage.failed(exc)

    async def stop(self) -> None:
        """Stop beating and mark the worker gone (best effort: else it is presumed dead
        once its silence runs out)."""
        if self._task is None:
            return
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._task = None
        try:  # never holds up an exit for long (the database may be away)
            await asyncio.wait_for(self._ledger.gone(self._worker_id), GONE_WAIT_S)
        except Exception as exc:
            log.warning("marking the worker gone failed (%r); presumed dead later", exc)
