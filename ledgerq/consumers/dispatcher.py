"""Running handlers: one asyncio task per claimed task (group-commit kinds of one
claim together, and the kinds that write through ``ctx.session`` in batched
windows: :mod:`.batch`), each task ending in exactly one :class:`~.handoff.Ended`
for the finisher.

A handler slot is given back when the handler has really stopped (see
:class:`~.execute.TaskRunner`). On shutdown, handlers get the grace period; an
async one still running after it is cancelled and recorded as a failed attempt
(retried), because its work did not commit. A sync one still running in its
thread then (the runner's ``in_threads``) cannot be stopped: it ends
:class:`~.handoff.StillRunning`, nothing is written, and the task is retried
only after this process has exited and its lease has lapsed (:mod:`.hung`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from ledgerq.consumers.batch import Batcher
from ledgerq.consumers.claimer import Slots
from ledgerq.consumers.execute import TaskRunner, clean_error
from ledgerq.consumers.group import GroupCommitter
from ledgerq.consumers.handoff import Claimed, Committed, Ended, Result, StillRunning
from ledgerq.consumers.leases import Leases
from ledgerq.consumers.registry import Handler, Registry
from ledgerq.ledger.model import ClaimedTask, Outcome
from ledgerq.ledger.split.ids import split_by_shard

log = logging.getLogger("ledgerq.worker")

SHUTDOWN = "worker shut down before the handler finished (grace period over)"


class Dispatcher:
    def __init__(
        self,
        registry: Registry,
        runner: TaskRunner,
        group: GroupCommitter,
        batcher: Batcher,
        slots: Slots,
        leases: Leases,
        finish: Callable[[Ended], None],
    ) -> None:
        self.registry = registry
        self.runner = runner
        self.group = group
        self.batcher = batcher
        self.slots = slots
        self.leases = leases
        self.finish = finish
        self._handlers: set[asyncio.Task[None]] = set()

    def start(self, claimed: list[Claimed]) -> None:
        grouped: list[Claimed] = []
        batched: list[tuple[Claimed, Handler]] = []
        for item in claimed:
            self.leases.track(item.task)
            handler = self.registry.get(item.task.kind)
            # A task whose payload was refused goes the single way, which ends it dead.
            oversize = item.task.oversize_payload_bytes is not None
            if handler is not None and handler.group_commit and not oversize:
                grouped.append(item)
            elif handler is not None and self.batcher.batchable(item.task, handler):
                batched.append((item, handler))
            else:
                self._spawn(self._one(item))
        # One group per ledger shard: a transaction lives in one database.
        for part in split_by_shard(grouped, lambda item: item.task.id).values():
            self._spawn(self._group(part))
        if batched:
            self._spawn(self._batched(batched))

    def __len__(self) -> int:
        return len(self._handlers)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        handler_task = asyncio.create_task(coro)
        self._handlers.add(handler_task)
        handler_task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._handlers.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("handler task ended with %r", task.exception())

    async def _one(self, item: Claimed) -> None:
        result: Result
        try:
            result = await self.runner.run(item.task, self.slots.give)
        except asyncio.CancelledError:
            result = self._shut_down(item.task)
        except Exception as exc:  # a bug of ours: record it, never lose the task
            log.exception("running task %s failed unexpectedly", item.task.id)
            result = Outcome.failed(
                item.task.fence, clean_error(f"worker error: {exc!r}"), final=True
            )
        self.finish(Ended(item.task, result, item.delivery))

    async def _group(self, items: list[Claimed]) -> None:
        """Group-commit kinds: one transaction for the batch, else each on its own."""
        handlers = [self.registry.get(i.task.kind) for i in items]
        try:
            committed = await self.group.run(
                [(i.task, h) for i, h in zip(items, handlers, strict=True) if h is not None]
            )
        except asyncio.CancelledError:  # shutdown's grace ran out: nothing was committed
            for item in items:
                self.slots.give()
                self.finish(
                    Ended(item.task, Outcome.failed(item.task.fence, SHUTDOWN), item.delivery)
                )
            return
        except Exception:
            log.exception("group commit failed unexpectedly; running each task on its own")
            committed = False
        if not committed:
            await asyncio.gather(*(self._one(item) for item in items))
            return
        for item in items:
            self.slots.give()
            self.finish(Ended(item.task, Committed(True), item.delivery))

    async def _batched(self, items: list[tuple[Claimed, Handler]]) -> None:
        """Kinds that write through ``ctx.session``: batched windows (see consumers.batch)."""
        reported: set[int] = set()

        def report(index: int, result: Result | None) -> None:
            if index in reported:  # a window that outlived the grace: already recorded failed
                return
            reported.add(index)
            if result is None:  # the ordinary path runs it, and reports it
                self._spawn(self._one(items[index][0]))
                return
            self.slots.give()
            item = items[index][0]
            if isinstance(result, Committed):  # no lease to keep: a heartbeat must not
                self.leases.forget(item.task.fence)  # call the committed row lost
            self.finish(Ended(item.task, result, item.delivery))

        try:
            await self.batcher.run(
                [(i.task, h) for i, h in items],
                report,
                lambda index: report(index, None),
            )
        except asyncio.CancelledError:  # shutdown's grace ran out: the open window rolled back
            error = SHUTDOWN
        except Exception as exc:  # a bug of ours: record it, never lose the task
            log.exception("batched handlers failed unexpectedly")
            error = clean_error(f"worker error: {exc!r}")
        else:
            return
        for index, (item, _) in enumerate(items):
            if index not in reported:
                shut = self._shut_down(item.task) if error is SHUTDOWN else None
                report(index, shut or Outcome.failed(item.task.fence, error))

    def _shut_down(self, task: ClaimedTask) -> Outcome | StillRunning:
        """How a task still running when the grace ran out ends (module docstring)."""
        if task.fence not in self.runner.in_threads:
            return Outcome.failed(task.fence, SHUTDOWN)
        log.warning(
            "task %s (%s): its handler's thread still runs after the grace; no outcome is "
            "written: it is retried once this process has exited and its lease has lapsed",
            task.id,
            task.kind,
        )
        return StillRunning()

    async def drain(self, grace_s: float) -> None:
        """Wait up to ``grace_s`` for running handlers; cancel the rest."""
        if not self._handlers:
            return
        log.info("draining %d in-flight tasks (grace %.0fs)", len(self._handlers), grace_s)
        _, late = await asyncio.wait(set(self._handlers), timeout=grace_s)
        for task in late:
            task.cancel()
        await asyncio.gather(*late, return_exceptions=True)
