"""Batched commit: the default for handlers that write through ``ctx.session``.

A kind whose handler was seen using ``ctx.session`` (the first runs of a kind
take the ordinary path, :class:`~.execute.TaskRunner`, which learns it) has its
claimed tasks run in *windows*: one connection, one transaction per window.

How one window runs (locks, a savepoint per handler, one COMMIT, what happens
when it fails or hangs) is :mod:`.window`'s contract. This module schedules
windows.

Handlers of a window run one after another (async ones on the loop, sync ones
in one pool thread, one hand-off per window). Tasks wait in a queue per kind
of handler, and ``lanes`` windows take from it at once, each what is waiting,
up to ``max_tasks``. A window takes no new handler once ``window_s`` has passed
since it opened; the rest go back to the front of the queue. So a finished handler's commit
waits at most ``window_s`` plus the run of the one handler still running in
its window. A handler that runs longer than ``slow_s`` sends its kind back to
the ordinary path (its own transaction, run concurrently) for ``cooldown_s``:
a slow kind holds a window once, then leaves the batch.

Tasks with a trace context, or whose payload was refused, take the ordinary
path.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial

from sqlalchemy import Engine
from sqlalchemy.ext.asyncio import AsyncEngine

from ledgerq.consumers.execute import TaskRunner
from ledgerq.consumers.handoff import Result
from ledgerq.consumers.registry import Handler
from ledgerq.consumers.window import Windows
from ledgerq.consumers.window_items import Item, report_failed
from ledgerq.consumers.worker_config import BatchConfig as BatchConfig  # its home: the options
from ledgerq.ledger.model import ClaimedTask

log = logging.getLogger("ledgerq.worker")
Report = Callable[[int, Result], None]


@dataclass
class Batcher:
    runner: TaskRunner
    config: BatchConfig
    sync_engine: Engine | None
    async_engine: AsyncEngine | None
    _demoted: dict[str, float] = field(default_factory=dict)
    _windows: Windows = field(init=False)
    _queues: dict[bool, deque[Item]] = field(default_factory=dict)
    _events: dict[bool, asyncio.Event] = field(default_factory=dict)
    _lanes: dict[bool, list[asyncio.Task[None]]] = field(default_factory=dict)
    #: Kinds sent to the ordinary path for a while.
    demoted: int = 0

    def __post_init__(self) -> None:
        self._windows = Windows(
            runner=self.runner,
            config=self.config,
            demote=self._demote,
            sync_engine=self.sync_engine,
            async_engine=self.async_engine,
        )

    @property
    def batched(self) -> int:
        """Tasks run in windows so far."""
        return self._windows.batched

    def batchable(self, task: ClaimedTask, handler: Handler) -> bool:
        """Whether the task runs in a window (see the module docstring)."""
        if not self.config.enabled or task.kind not in self.runner.session_kinds:
            return False
        if task.kind in self.runner.checkpoint_kinds:  # long work: its own transactions
            return False
        if task.trace_context is not None or task.oversize_payload_bytes is not None:
            return False
        if (self.async_engine if handler.is_async else self.sync_engine) is None:
            return False
        until = self._demoted.get(task.kind)
        return until is None or until <= time.monotonic()

    async def run(
        self,
        batch: Sequence[tuple[ClaimedTask, Handler]],
        report: Report,
        fallback: Callable[[int], None],
    ) -> None:
        """Queue ``batch`` for the windows; return once each task was reported
        (``report(index, result)``, after its window committed or rolled back) or
        handed to ``fallback(index)`` (the ordinary path). If cancelled, the tasks no
        window took yet are dropped (the caller reports them)."""
        left = set(range(len(batch)))
        done = asyncio.Event()

        def reporter(index: int) -> Callable[[Result | None], None]:
            def reported(result: Result | None) -> None:
                if index in left:  # once (a window still running at shutdown may report late)
                    left.discard(index)
                    if result is None:
                        fallback(index)
                    else:
                        report(index, result)
                    if not left:
                        done.set()

            return reported

        items = []
        for index, (task, handler) in enumerate(batch):
            settle = reporter(index)
            items.append(Item(task, handler, settle, partial(settle, None)))
        for item in items:
            self._queue(item.handler.is_async).append(item)
        for is_async in {i.handler.is_async for i in items}:
            self._wake(is_async)
        try:
            await done.wait()
        finally:
            for item in items:
                item.dropped = True

    def _queue(self, is_async: bool) -> deque[Item]:
        return self._queues.setdefault(is_async, deque())

    def _wake(self, is_async: bool) -> None:
        event = self._events.setdefault(is_async, asyncio.Event())
        event.set()
        lanes = self._lanes.setdefault(is_async, [])
        if len(lanes) < self.config.lanes:
            name = f"ledgerq-batch-{'async' if is_async else 'sync'}-{len(lanes)}"
            lanes.append(asyncio.create_task(self._lane(is_async), name=name))

    async def _lane(self, is_async: bool) -> None:
        """Take what waits (up to ``max_tasks``) into a window; put back what it did not take."""
        queue, event = self._queue(is_async), self._events[is_async]
        window = self._windows.run_async if is_async else self._windows.run_sync
        while True:
            if not queue:
                event.clear()
                await event.wait()
                continue
            items = [queue.popleft() for _ in range(min(len(queue), self.config.max_tasks))]
            items = [i for i in items if not i.dropped]
            if not items:
                continue
            try:
                taken = await window(items)
            except Exception:  # a bug of ours must not stop the lane
                log.exception("a batched window failed unexpectedly")
                report_failed(items, "worker error in a batched window")
                taken = len(items)
            queue.extendleft(reversed(items[taken:]))

    async def close(self) -> None:
        """Stop the lanes (at shutdown, once the dispatcher has drained)."""
        lanes = [lane for group in self._lanes.values() for lane in group]
        for lane in lanes:
            lane.cancel()
        await asyncio.gather(*lanes, return_exceptions=True)
        self._lanes.clear()
        if self._windows.windows:
            log.info(
                "batched commit: %d windows, %d tasks in them, %d to their own transaction, "
                "%d kinds demoted",
                self._windows.windows,
                self._windows.batched,
                self._windows.fell_back,
                self.demoted,
            )

    def _demote(self, kind: str) -> None:
        """Send ``kind`` to the ordinary path (its own transactions) for ``cooldown_s``."""
        log.info("kind %s: its own transactions for %.0f s", kind, self.config.cooldown_s)
        self._demoted[kind] = time.monotonic() + self.config.cooldown_s
        self.demoted += 1
