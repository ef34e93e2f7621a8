"""A row the worker keeps fresh in the ledger, on a beat.

:class:`Beat` is what the worker's subscriptions (:mod:`.subscriber`) and its
liveness row (:mod:`.liveness`) share: the first write at start raises if the
ledger refuses it (a schema too old, a missing grant: the worker must not run
unseen), then a background loop writes again every ``every_s``. A write that
fails there (the database away) is retried on the next beat and logged once
per outage (:mod:`ledgerq.ledger.outages`); ``failures`` counts them. On stop the
loop ends first, then :meth:`Beat.farewell` runs once, best effort: what it
would have said expires by itself anyway.
"""

from __future__ import annotations

import asyncio
import contextlib

from ledgerq.ledger.outages import Outage


class Beat:
    """Subclasses write their row in :meth:`beat` and may say goodbye in :meth:`farewell`."""

    def __init__(self, every_s: float, outage: Outage) -> None:
        self.every_s = every_s
        self.outage = outage
        #: Beats that failed (logged once per outage), for tests and health.
        self.failures = 0
        self._task: asyncio.Task[None] | None = None

    async def beat(self) -> None:
        raise NotImplementedError

    async def farewell(self) -> None:
        """After the last beat, on stop (best effort: never raises)."""

    async def start(self) -> None:
        """Beat now (raising if the ledger refuses), then every ``every_s`` in the background."""
        await self.beat()
        self._task = asyncio.create_task(self._loop(), name=f"ledgerq-{type(self).__name__}")

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.every_s)
            try:
                await self.beat()
                self.outage.succeeded()
            except Exception as exc:  # the database away: the next beat tries again
                self.failures += 1
                self.outage.failed(exc)

    async def stop(self) -> None:
        """Stop beating, then say goodbye (once; nothing if never started)."""
        if self._task is None:
            return
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._task = None
        await self.farewell()
