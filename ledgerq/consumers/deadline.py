"""When an attempt times out (:class:`Deadline`): ``timeout`` seconds after the later
of its start and its last checkpoint, never later than ``max_runtime`` after its
start; and how the worker waits on it: an async handler's ``asyncio.timeout``
moved at each checkpoint (:func:`move_deadline`), a sync handler's future
awaited until the deadline, however often a checkpoint moves it
(:func:`wait_until`). Which timeout applies: :func:`handler_timeout`.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from ledgerq.consumers.context import HandlerContext
from ledgerq.consumers.handoff import Result
from ledgerq.consumers.registry import Handler
from ledgerq.ledger.model import ClaimedTask


def handler_timeout(task: ClaimedTask, handler: Handler, default: float | None) -> float | None:
    """The task's timeout (given at enqueue, else filled in by the claim from the
    kind's ``@task(timeout=...)``), else the handler's (a kind no worker registered
    a default for yet), else the worker's default: an enqueue overrides the kind."""
    return task.timeout_s or handler.timeout_s or default


@dataclass(frozen=True)
class Deadline:
    """When an attempt times out: ``timeout`` seconds after the later of its start
    and its last checkpoint, and never later than ``cap`` seconds after its start
    (times on ``time.monotonic``). None for both: never."""

    timeout: float | None
    cap: float | None
    started: float = field(default_factory=time.monotonic)

    def at(self, ctx: HandlerContext) -> float | None:
        ends = []
        if self.timeout is not None:
            ends.append((ctx._progress_at or self.started) + self.timeout)
        if self.cap is not None:
            ends.append(self.started + self.cap)
        return min(ends) if ends else None

    def remaining(self, ctx: HandlerContext) -> float | None:
        at = self.at(ctx)
        return None if at is None else at - time.monotonic()

    def on_loop(self, ctx: HandlerContext) -> float | None:
        """The deadline on the running loop's clock (for ``asyncio.timeout``)."""
        left = self.remaining(ctx)
        return None if left is None else asyncio.get_running_loop().time() + left

    def describe(self, ctx: HandlerContext) -> str:
        if self.cap is not None and self.at(ctx) == self.started + self.cap:
            return f"timed out after {self.cap:g} s (max_runtime)"
        # :g, so a limit of 1 reads "1 s" whether it came from @task or the row
        if ctx._progress_at is not None:
            return f"timed out after {self.timeout or 0:g} s without a checkpoint"
        return f"timed out after {self.timeout or 0:g} s"


def move_deadline(timer: asyncio.Timeout, deadline: Deadline, ctx: HandlerContext) -> None:
    """After a checkpoint: the async handler's timeout runs from now (unless it has
    already fired: the cancellation is on its way, and stands)."""
    if not timer.expired():
        timer.reschedule(deadline.on_loop(ctx))


async def wait_until(
    future: asyncio.Future[Result], deadline: Deadline, ctx: HandlerContext
) -> Result:
    """The sync handler's result, or TimeoutError once ``deadline`` passes with no
    checkpoint moving it. shield: a timeout or shutdown stops the wait, never the
    thread's commit-or-rollback (which the fence makes safe either way)."""
    while True:
        left = deadline.remaining(ctx)
        if left is not None and left <= 0:
            raise TimeoutError
        try:
            return await asyncio.wait_for(asyncio.shield(future), left)
        except TimeoutError:
            moved = deadline.remaining(ctx)
            if moved is None or moved <= 0:
                raise
