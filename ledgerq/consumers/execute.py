"""Run one claimed task's handler and decide how its attempt ended.

The result is one of:

* ``Committed(won)`` - the handler used ``ctx.session``; its writes and the
  fenced ``succeeded`` were committed together (``won``), or the fence was lost
  and both rolled back (``won=False``). Nothing is left to write; ack.
* ``Outcome.succeeded`` - the handler succeeded without the session; the
  finisher writes ``succeeded`` with other tasks' outcomes, then acks.
* ``Outcome.cancelled`` - an operator asked the task to stop and the handler
  returned, raised or timed out (or it raised :class:`Cancelled`); the session
  was rolled back (see :mod:`.results`);
* ``Outcome.failed`` - the handler raised or timed out, or no handler exists;
  the session (if any) was rolled back and the finisher records a retry or
  ``dead``. A task whose payload the claim refused to load (larger than
  :data:`~ledgerq.ledger.validation.MAX_CLAIM_PAYLOAD_BYTES`) is not run: it ends
  ``dead`` with the reason "payload too large".

The timeout (the task's ``timeout``, the handler's, else the worker's default)
bounds an attempt that makes no progress: it runs from the later of the
attempt's start and its last saved checkpoint (:class:`Deadline`), so a task that
keeps checkpointing is never judged hung, and one that stops checkpointing times
out ``timeout`` seconds after its last checkpoint. ``@task(max_runtime=...)``
caps the attempt however often it checkpoints. In a batched window
(consumers.batch) the timeout runs from the start: a kind that checkpoints leaves
batched windows after its first run.

``release`` is called exactly once, when the handler has really stopped: for a
sync handler that outlived its timeout that is when its thread returns, so a
worker never runs more threads than its concurrency.

An attempt's code never overlaps its retry's. An async handler is cancelled at
its timeout, and the timeout is reported only once the cancellation has run
through the handler (its ``finally`` blocks and ``except CancelledError`` ran:
``asyncio.timeout`` raises when the handler's coroutine has ended). A sync
handler cannot be stopped: at its timeout ``ctx.lost`` turns true and the
attempt keeps its lease while the runner waits for the thread; the timed-out
outcome (the retry) is returned only once the thread has returned, and a
thread that runs :attr:`~.hung.HungThreads.limit_s` past its timeout ends the
worker process (:mod:`.hung`). If the worker stops while such a thread still
runs, the result is :class:`~.handoff.StillRunning`: nothing is written.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.ext.asyncio import AsyncEngine

from ledgerq.consumers.context import AsyncTaskContext, HandlerContext, TaskContext
from ledgerq.consumers.deadline import Deadline, handler_timeout, move_deadline, wait_until
from ledgerq.consumers.handoff import Committed, Result
from ledgerq.consumers.hung import HungThreads
from ledgerq.consumers.registry import Handler, Registry
from ledgerq.consumers.results import (
    CANCELLED_ON_REQUEST,
    Cancelled,
    ResultNotJSONError,
    encode_result,
)
from ledgerq.core.errors import LedgerqError
from ledgerq.core.logs import current_task
from ledgerq.hooks.probes import Probe, no_probe
from ledgerq.ledger import tracing
from ledgerq.ledger.model import ClaimedTask, Fence, Outcome
from ledgerq.ledger.observer import NO_OBSERVER, Observer
from ledgerq.ledger.split.ids import shard_of_id
from ledgerq.ledger.validation import MAX_CLAIM_PAYLOAD_BYTES
from ledgerq.ledger.within import asucceed_within, succeed_within

log = logging.getLogger("ledgerq.worker")

MAX_ERROR_CHARS = 4000


class Abort(Exception):
    """Raise from a handler to end the task ``dead`` now, without more retries."""


def clean_error(text: str) -> str:
    """An error text PostgreSQL will store: no NUL bytes, bounded length."""
    return text.replace("\x00", "\\x00")[-MAX_ERROR_CHARS:]


def describe(exc: BaseException) -> str:
    """A recorded reason: the exception line plus the innermost frames."""
    return clean_error("".join(traceback.format_exception(exc, limit=-3)).strip())


def failure(task: ClaimedTask, error: str, *, final: bool = False) -> Outcome:
    """A failed attempt; a retry policy that cannot be read makes the failure final."""
    delay = 0.0
    if not final:
        try:
            delay = task.retry_delay()
        except LedgerqError as exc:
            error += f"\n(and the task's retry policy is unreadable: {exc})"
            final = True
    return Outcome.failed(task.fence, clean_error(error), delay=delay, final=final)


def _returned(value: Any, ctx: HandlerContext) -> str | None:
    """The result to store, or raise: Cancelled if a cancel was requested meanwhile,
    ResultNotJSONError if the value cannot be stored."""
    if ctx.cancel_requested:
        raise Cancelled(CANCELLED_ON_REQUEST)
    return encode_result(value)


def _run_sync(handler: Handler, ctx: TaskContext) -> Result:
    """In a pool thread: run the handler, then commit its session with the status."""
    try:
        result = _returned(handler.fn(ctx.task.payload, ctx), ctx)
        if ctx._session is None:
            return Outcome.succeeded(ctx.task.fence, result)
        won = not ctx.lost and succeed_within(ctx._session, ctx.task.fence, result)
        if won:
            ctx._session.commit()
        else:
            ctx._session.rollback()
        return Committed(won)
    finally:
        if ctx._session is not None:
            ctx._session.close()


async def _run_async(handler: Handler, ctx: AsyncTaskContext) -> Result:
    try:
        result = _returned(await handler.fn(ctx.task.payload, ctx), ctx)
        session = ctx._session
        if session is None:
            return Outcome.succeeded(ctx.task.fence, result)
        won = bool(await asucceed_within(session, [ctx.task.fence], [result]))
        if won:
            await session.commit()
        else:
            await session.rollback()
        return Committed(won)
    finally:
        if ctx._session is not None:
            await ctx._session.close()


@dataclass
class TaskRunner:
    """Runs handlers: async ones on the loop, sync ones in ``pool``."""

    registry: Registry
    worker: str
    pool: Executor
    sync_engine: Engine | None
    async_engine: AsyncEngine | None
    on_context: Callable[[ClaimedTask, HandlerContext], None] | None = None
    default_timeout_s: float | None = None
    probe: Probe = no_probe
    observer: Observer = NO_OBSERVER
    #: Sync handlers whose thread is still running (one that timed out included).
    threads_running: int = 0
    #: Tasks whose handler code runs in a pool thread now (here or in a batched
    #: window): at shutdown they end :class:`~.handoff.StillRunning`.
    in_threads: set[Fence] = field(default_factory=set)
    #: Watchdogs over timed-out threads: the hard cap (consumers.hung).
    hung: HungThreads = field(default_factory=HungThreads)
    #: Kinds whose handler was seen using ``ctx.session`` (they run batched: consumers.batch).
    session_kinds: set[str] = field(default_factory=set)
    #: Kinds whose handler was seen saving a checkpoint (long work: never batched).
    checkpoint_kinds: set[str] = field(default_factory=set)
    #: With ledger shards: (sync, async) handler engines of each shard; a task's
    #: ``ctx.session`` opens on its own shard's (``sync_engine``/``async_engine`` unused).
    shard_engines: Sequence[tuple[Engine | None, AsyncEngine | None]] = ()

    def _engines(self, task: ClaimedTask) -> tuple[Engine | None, AsyncEngine | None]:
        if self.shard_engines:
            return self.shard_engines[shard_of_id(task.id)]
        return self.sync_engine, self.async_engine

    async def run(self, task: ClaimedTask, release: Callable[[], None]) -> Result:
        """Run the task's handler (log lines meanwhile name the task); tell the observer."""
        token = current_task.set((task.id, task.kind, task.attempts))
        started = time.perf_counter()
        try:
            if task.trace_context is None:
                return await self._run(task, release)
            with tracing.handler_span(task) as span:  # the producer's trace continues
                result = await self._run(task, release)
                if isinstance(result, Outcome) and result.error is not None:
                    tracing.failed(span, result.error)
                return result
        finally:
            self.observer.ran(task.kind, time.perf_counter() - started, task.waited_s)
            current_task.reset(token)

    async def _run(self, task: ClaimedTask, release: Callable[[], None]) -> Result:
        if task.oversize_payload_bytes is not None:
            release()
            msg = (
                f"payload too large: {task.oversize_payload_bytes} bytes, over the workers' "
                f"limit of {MAX_CLAIM_PAYLOAD_BYTES}; it was not loaded and the task not run"
            )
            log.error("task %s (%s): %s", task.id, task.kind, msg)
            return failure(task, msg, final=True)
        handler = self.registry.get(task.kind)
        if handler is None:
            release()
            msg = f"no handler registered for kind {task.kind!r} in worker {self.worker}"
            log.error("task %s: %s", task.id, msg)
            return failure(task, msg)
        self.probe("worker.mid_handler")
        if handler.is_async:
            try:
                return await self._run_async(task, handler)
            finally:
                release()
        return await self._run_sync(task, handler, release)

    async def _run_async(self, task: ClaimedTask, handler: Handler) -> Result:
        deadline = Deadline(
            handler_timeout(task, handler, self.default_timeout_s), handler.max_runtime
        )
        ctx = AsyncTaskContext(task, self.worker, _engine=self._engines(task)[1])
        self._notify(task, ctx)
        try:
            # asyncio.timeout_at, not wait_for: no extra task per handler run. A
            # checkpoint moves it (ctx._on_progress runs on this loop).
            async with asyncio.timeout_at(deadline.on_loop(ctx)) as timer:
                ctx._on_progress = lambda: move_deadline(timer, deadline, ctx)
                return await _run_async(handler, ctx)
        except TimeoutError:
            return self._timed_out(task, deadline, ctx)
        except Exception as exc:
            return self._failed(task, exc, ctx)
        finally:
            self._learn(task, ctx)

    async def _run_sync(
        self, task: ClaimedTask, handler: Handler, release: Callable[[], None]
    ) -> Result:
        deadline = Deadline(
            handler_timeout(task, handler, self.default_timeout_s), handler.max_runtime
        )
        ctx = TaskContext(task, self.worker, _engine=self._engines(task)[0])
        self._notify(task, ctx)
        # The thread runs in a copy of this context: its log lines name the task too.
        future = asyncio.get_running_loop().run_in_executor(
            self.pool, contextvars.copy_context().run, _run_sync, handler, ctx
        )
        self.threads_running += 1
        self.in_threads.add(task.fence)

        def thread_done(_: object) -> None:
            self.threads_running -= 1
            self.in_threads.discard(task.fence)
            release()

        future.add_done_callback(thread_done)
        try:
            return await wait_until(future, deadline, ctx)
        except TimeoutError:
            ctx.lost = True  # the thread may look; its writes will not commit
            timed_out = self._timed_out(task, deadline, ctx)
        except Exception as exc:
            return self._failed(task, exc, ctx)
        finally:
            self._learn(task, ctx)
        await self._thread_returned(task, future)
        return timed_out

    async def _thread_returned(self, task: ClaimedTask, future: asyncio.Future[Result]) -> None:
        """After a sync handler's timeout: wait for its thread, under the hard cap
        (module docstring). Cancelled (the shutdown's grace is over) while it still
        runs: the caller ends the task :class:`~.handoff.StillRunning`."""
        if future.done():
            _log_late_exception(future)
            return
        log.warning(
            "task %s (%s): its thread still runs; the attempt keeps its lease and its "
            "retry waits for it (the worker exits if it runs %g s more)",
            task.id,
            task.kind,
            self.hung.limit_s,
        )
        self.hung.watch(task, future)
        since = time.monotonic()
        await asyncio.wait({future})  # cancellable; the thread's future is left alone
        log.info(
            "task %s (%s): its timed-out thread returned %.1f s after the timeout",
            task.id,
            task.kind,
            time.monotonic() - since,
        )
        _log_late_exception(future)

    def _timed_out(
        self, task: ClaimedTask, deadline: Deadline | float | None, ctx: HandlerContext
    ) -> Outcome:
        if not isinstance(deadline, Deadline):
            deadline = Deadline(deadline, None)
        reason = deadline.describe(ctx)
        log.warning("task %s (%s) %s", task.id, task.kind, reason)
        if ctx.cancel_requested:
            return Outcome.cancelled(task.fence, f"{CANCELLED_ON_REQUEST}; timed out")
        return failure(task, reason)

    def _failed(self, task: ClaimedTask, exc: Exception, ctx: HandlerContext) -> Outcome:
        if isinstance(exc, Cancelled) or ctx.cancel_requested:
            log.info("task %s (%s) cancelled: %s", task.id, task.kind, exc)
            return Outcome.cancelled(task.fence, describe(exc))
        if isinstance(exc, ResultNotJSONError):
            log.error("task %s (%s): %s", task.id, task.kind, exc)
            return failure(task, str(exc), final=True)
        if isinstance(exc, Abort):
            return failure(task, describe(exc), final=True)
        log.info("task %s (%s) attempt %d failed: %r", task.id, task.kind, task.attempts, exc)
        return failure(task, describe(exc))

    def _learn(self, task: ClaimedTask, ctx: HandlerContext) -> None:
        """What the run showed about its kind: it writes through ``ctx.session``
        (batch it), it saves checkpoints (never batch it)."""
        if ctx._session is not None:
            self.session_kinds.add(task.kind)
        if ctx._checkpointed:
            self.checkpoint_kinds.add(task.kind)

    def _notify(self, task: ClaimedTask, ctx: HandlerContext) -> None:
        if self.on_context is not None:
            self.on_context(task, ctx)


def _log_late_exception(future: asyncio.Future[Result]) -> None:
    if not future.cancelled() and future.exception() is not None:
        log.info("a timed-out sync handler finished later with %r", future.exception())
