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
import logging

from ledgerq.consumers.beat import Beat
from ledgerq.ledger.outages import Outage
from ledgerq.ledger.protocol import RoutingLedger

log = logging.getLogger("ledgerq.worker")

#: Beats per silence: a worker is presumed dead after this many missed beats.
BEATS_PER_SILENCE = 5
#: How long a stopping worker waits to mark itself gone.
GONE_WAIT_S = 2.0


class Liveness(Beat):
    def __init__(self, ledger: RoutingLedger, worker_id: str, silence_s: float) -> None:
        if silence_s <= 0:
            raise ValueError(f"liveness silence must be positive, got {silence_s}")
        super().__init__(
            silence_s / BEATS_PER_SILENCE,
            Outage("the worker's liveness beat (its tasks may be rescued)", log),
        )
        self._ledger = ledger
        self._worker_id = worker_id
        self.silence_s = silence_s

    @property
    def beat_s(self) -> float:
        return self.every_s

    async def beat(self) -> None:
        await self._ledger.alive(self._worker_id, self.silence_s)

    async def farewell(self) -> None:
        """Mark the worker gone (else it is presumed dead once its silence runs out)."""
        try:  # never holds up an exit for long (the database may be away)
            await asyncio.wait_for(self._ledger.gone(self._worker_id), GONE_WAIT_S)
        except Exception as exc:
            log.warning("marking the worker gone failed (%r); presumed dead later", exc)
