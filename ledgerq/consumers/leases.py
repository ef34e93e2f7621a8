"""The tasks a worker is running, and the heartbeat that keeps their leases.

Each claimed task is tracked from its claim until its outcome is committed (or
given back). Every ``heartbeat_s`` one fenced statement extends the leases of
all of them. A task whose fence no longer holds was rescued by the reconciler
(its lease expired, perhaps while this process was stalled): its context is
flagged ``lost``, so a long handler can stop early, and its writes will not
commit whatever it does, because the commit is fenced too. The same statement
says which tasks an operator asked to stop: their context's
``cancel_requested`` turns true. It also carries the handlers' progress
reports (each beat stores the latest of each task) and stores their checkpoints
(consumers.progress).

A row another transaction holds locked is skipped, not waited for (SKIP LOCKED
in ``heartbeat``): above all the rows of the worker's own batched windows,
which stay locked until the window's COMMIT (consumers.window). Waiting for a
long window held up the one beat of every other task, whose leases then ran
out: the reconciler released them and they ran twice. A skipped row whose fence
still held is *busy*, not lost; while any is, the next beat comes within
``BUSY_RETRY_S``, so a window's rows get their leases extended about a second
after it commits. While a window holds a row nobody else can move it, however
old its lease.
"""

from __future__ import annotations

import asyncio
import json
import logging

from ledgerq.consumers.context import HandlerContext
from ledgerq.ledger.model import ClaimedTask, Fence
from ledgerq.ledger.outages import Outage
from ledgerq.ledger.protocol import WorkerLedger

log = logging.getLogger("ledgerq.worker")

#: How soon the next beat comes when the last one found rows busy (locked).
BUSY_RETRY_S = 1.0


class Leases:
    def __init__(self, ledger: WorkerLedger, lease_s: float, heartbeat_s: float) -> None:
        self.ledger = ledger
        self.lease_s = lease_s
        self.heartbeat_s = heartbeat_s
        self._running: dict[Fence, HandlerContext | None] = {}
        #: Progress reported since the last beat (JSON text), by fence.
        self._reported: dict[Fence, str] = {}
        self._loop: asyncio.Task[None] | None = None
        #: Failed beats, logged once per outage (:mod:`ledgerq.ledger.outages`).
        self.outage = Outage("heartbeat (leases may lapse meanwhile)", log)
        #: The worker's event loop, on which sync handlers' checkpoints are stored.
        self.loop: asyncio.AbstractEventLoop | None = None
        #: The last beat found rows locked by another transaction (not extended).
        self.busy = 0

    def track(self, task: ClaimedTask) -> None:
        self._running[task.fence] = None

    def attach(self, task: ClaimedTask, ctx: HandlerContext) -> None:
        """The handler's context, so a lost lease can be flagged on it."""
        if task.fence in self._running:
            self._running[task.fence] = ctx
            ctx._keeper = self

    def forget(self, fence: Fence) -> None:
        self._running.pop(fence, None)
        self._reported.pop(fence, None)

    def progress(self, fence: Fence, report: str) -> None:
        """A handler's progress report (any thread): the next beat stores it."""
        if fence in self._running:
            self._reported[fence] = report

    async def save(self, fence: Fence, state_json: str) -> bool:
        """Store a checkpoint now (autocommit, fenced); whether the fence held."""
        return await self.ledger.save_checkpoint(fence, json.loads(state_json))

    def __len__(self) -> int:
        return len(self._running)

    async def beat_once(self) -> int:
        """Extend every lease held; return how many tasks were found lost."""
        if not self._running:
            return 0
        snapshot = dict(self._running)
        reported = {f: r for f, r in list(self._reported.items()) if f in snapshot}
        held = await self.ledger.heartbeat(
            snapshot, self.lease_s, {f[0]: r for f, r in reported.items()}
        )
        for fence, report in reported.items():  # stored, unless a newer one came since
            if fence[0] in held and self._reported.get(fence) == report:
                self._reported.pop(fence, None)
        self.busy = len(held.busy)
        lost = 0
        for fence, ctx in snapshot.items():
            if fence[0] in held.cancelling and ctx is not None and not ctx.cancel_requested:
                log.info("task %s: an operator asked it to stop (ctx.cancel_requested)", fence[0])
                ctx._cancel_requested = True
            if fence[0] not in held and fence[0] not in held.busy and fence in self._running:
                lost += 1
                log.warning(
                    "task %s lost its lease (rescued by the reconciler); "
                    "its writes will not commit",
                    fence[0],
                )
                if ctx is not None:
                    ctx.lost = True
        return lost

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(
                min(self.heartbeat_s, BUSY_RETRY_S) if self.busy else self.heartbeat_s
            )
            try:
                await self.beat_once()
                self.outage.succeeded()
            except Exception as exc:  # the next beat tries again; a lost schema stops
                self.outage.failed(exc)  # the worker through its watched ledger

    def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        self._loop = asyncio.create_task(self._run(), name="ledgerq-heartbeat")

    async def stop(self) -> None:
        if self._loop is not None:
            self._loop.cancel()
            await asyncio.gather(self._loop, return_exceptions=True)
