"""Run one claimed task's handler and decide its outcome.

The outcome is one of:

* ``Done(committed=True)`` - the handler used ``ctx.session``; its writes and the
  fenced ``succeeded`` were committed together (or the fence was lost and both
  rolled back: ``committed=False``). Nothing is left to write; ack.
* ``Done(committed=False, pending=True)`` - the handler succeeded without the
  session; the worker group-commits ``succeeded`` with other tasks, then acks.
* ``Failure`` - the handler raised or timed out, or no handler exists; the
  session (if any) was rolled back and the worker records a retry or ``dead``.
"""

from __future__ import annotations

import asyncio
import logging
import traceback
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.ext.asyncio import AsyncEngine

from consumers.context import AsyncTaskContext, TaskContext
from consumers.registry import Handler, Registry
from ledger.faults import crash_point
from ledger.store import ClaimedTask, Failure, acomplete_in_session, complete_in_session

log = logging.getLogger("consumers.execute")

MAX_ERROR_CHARS = 4000


@dataclass(frozen=True, slots=True)
class Done:
    """The handler returned. ``needs_write``: ``succeeded`` is still to be written."""

    needs_write: bool
    won: bool = True


Outcome = Done | Failure


class Abort(Exception):
    """Raise from a handler to end the task ``dead`` now, without more retries."""


def describe(exc: BaseException) -> str:
    """A recorded reason: the exception line plus the innermost frames."""
    lines = traceback.format_exception(exc, limit=-3)
    text = "".join(lines).strip()
    return text[-MAX_ERROR_CHARS:]


def failure(task: ClaimedTask, error: str, *, final: bool = False) -> Failure:
    delay = 0.0 if final else task.retry_delay()
    return Failure(task.id, task.epoch, error, delay=delay, final=final)


def _timeout(task: ClaimedTask, handler: Handler) -> float | None:
    limits = [t for t in (task.timeout_s, handler.timeout_s) if t]
    return min(limits) if limits else None


def _run_sync(handler: Handler, ctx: TaskContext) -> Done:
    """In a pool thread: run the handler, then commit its session with the status."""
    try:
        handler.fn(ctx.task.payload, ctx)
        if ctx._session is None:
            return Done(needs_write=True)
        won = complete_in_session(ctx._session, ctx.task.fence)
        if won:
            ctx._session.commit()
        else:
            ctx._session.rollback()
        return Done(needs_write=False, won=won)
    finally:
        if ctx._session is not None:
            ctx._session.close()


async def _run_async(handler: Handler, ctx: AsyncTaskContext) -> Done:
    session = None
    try:
        await handler.fn(ctx.task.payload, ctx)
        session = ctx._session
        if session is None:
            return Done(needs_write=True)
        won = await acomplete_in_session(session, ctx.task.fence)
        if won:
            await session.commit()
        else:
            await session.rollback()
        return Done(needs_write=False, won=won)
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
    on_context: Callable[[ClaimedTask, Any], None] | None = None

    async def run(self, task: ClaimedTask) -> Outcome:
        handler = self.registry.get(task.kind)
        if handler is None:
            msg = f"no handler registered for kind {task.kind!r} in worker {self.worker}"
            log.error("task %s: %s", task.id, msg)
            return failure(task, msg)
        timeout = _timeout(task, handler)
        crash_point("worker.mid_handler")
        try:
            if handler.is_async:
                actx = AsyncTaskContext(task, self.worker, _engine=self.async_engine)
                self._notify(task, actx)
                return await asyncio.wait_for(_run_async(handler, actx), timeout)
            sctx = TaskContext(task, self.worker, _engine=self.sync_engine)
            self._notify(task, sctx)
            loop = asyncio.get_running_loop()
            future = loop.run_in_executor(self.pool, _run_sync, handler, sctx)
            return await asyncio.wait_for(future, timeout)
        except TimeoutError:
            log.warning("task %s (%s) timed out after %ss", task.id, task.kind, timeout)
            return failure(task, f"timed out after {timeout} s")
        except Abort as exc:
            return failure(task, describe(exc), final=True)
        except Exception as exc:
            log.info("task %s (%s) attempt %d failed: %r", task.id, task.kind, task.attempts, exc)
            return failure(task, describe(exc))

    def _notify(self, task: ClaimedTask, ctx: Any) -> None:
        if self.on_context is not None:
            self.on_context(task, ctx)
