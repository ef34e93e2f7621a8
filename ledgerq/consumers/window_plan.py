"""A batched window as a plan, written once: what it does and in which order,
with no I/O (:mod:`.window` runs it, on the loop for async handlers and in a pool
thread for sync ones; :mod:`ledgerq.core.plans` drives it).

A plan is a generator. It yields a step (lock the rows, open the handlers'
savepoints, run one handler, write the successes, end the transaction; for a
handler: mark, call, flush, undo) and is sent the step's answer, or has the
step's error raised where it asked, so its ``try`` blocks read as straight-line
code. The order of statements, savepoints and commits, and how each handler's
outcome is decided, are here alone; the runners only map steps to the sync or
async driver calls. :mod:`.window`'s docstring states the window's contract and
races.
"""

from __future__ import annotations

import contextvars
import logging
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from ledgerq.consumers.context import HandlerContext
from ledgerq.consumers.deadline import handler_timeout
from ledgerq.consumers.execute import TaskRunner, _returned
from ledgerq.consumers.window_items import (
    NOT_LOCKED,
    Item,
    Ran,
    SelfRolledBackError,
    WindowState,
    check_own,
    emptied,
    successes,
    unflushed,
)
from ledgerq.core.logs import current_task
from ledgerq.ledger.model import ClaimedTask, Fence

if TYPE_CHECKING:
    from ledgerq.consumers.worker_config import BatchConfig
    from ledgerq.ledger.within import AsyncHandlerMarks, HandlerMarks

log = logging.getLogger("ledgerq.worker")
_Started = tuple[float, contextvars.Token[tuple[int, str, int] | None]]


# -- what a plan asks its runner to do (answers: Locked, Ran, the won fences) -----
@dataclass(frozen=True, slots=True)
class Lock:
    fences: tuple[Fence, ...]


@dataclass(frozen=True, slots=True)
class Handle:
    item: Item


@dataclass(frozen=True, slots=True)
class Succeed:
    fences: tuple[Fence, ...]
    results: tuple[str | None, ...]


@dataclass(frozen=True, slots=True)
class End:
    commit: bool


OPEN_MARKS, CLOSE_MARKS = object(), object()  # the window's savepoints
MARK, CALL, FLUSH, UNDO = object(), object(), object(), object()  # one handler's steps


class TimedOut(Exception):
    """An async handler's answer when it was cancelled at its timeout."""


def never(started: float) -> bool:
    return False


def orm_session(session: Session | AsyncSession | None) -> Session | None:
    """The ORM session whose state the window inspects (an async one's sync half)."""
    return session.sync_session if isinstance(session, AsyncSession) else session


@dataclass
class WindowPlan:
    """The window's plans and the bookkeeping around each handler."""

    runner: TaskRunner
    config: BatchConfig
    demote: Callable[[str], None]

    def window_plan(self, items: list[Item], state: WindowState) -> Generator[Any, Any, bool]:
        """The window: lock, each admitted handler under its savepoint, one finish,
        one COMMIT (or ROLLBACK when a fence was lost or the window abandoned)."""
        held = yield Lock(tuple(i.task.fence for i in items))
        state.holder = held.holder
        yield OPEN_MARKS
        for item in self.admitted(items, held.ids, state):
            state.done((yield Handle(item)))
        yield CLOSE_MARKS
        ok = successes(state.taken, state.ran)
        won = yield Succeed(tuple(t.fence for t, _ in ok), tuple(r for _, r in ok))
        with state.lock:
            committed = len(won) == len(ok) and not state.abandoned
        yield End(commit=committed)
        return committed

    def handler_plan(
        self,
        item: Item,
        ctx: HandlerContext,
        state: WindowState,
        marks: HandlerMarks | AsyncHandlerMarks,
        *,
        overran: Callable[[float], bool],
    ) -> Generator[Any, Any, Ran]:
        """One handler in the window: its savepoint is begun here and never released
        (a round trip saved; ``max_tasks`` keeps them under 64). The session joins the
        window's transaction ("rollback_only": its commit only flushes, its rollback
        ends the window: :class:`SelfRolledBackError`). ``overran(started)``: whether
        the handler outlived its timeout (a sync one cannot be interrupted, so it is
        checked once it returns; an async one is cancelled at its timeout and
        answers :class:`TimedOut`)."""
        task, handler = item.task, item.handler
        timeout = handler_timeout(task, handler, self.runner.default_timeout_s)
        yield MARK
        state.session = None
        started = self.begin(task, ctx)
        try:
            try:
                result = _returned((yield CALL), ctx)
                session = orm_session(ctx._session)
                if session is not None and unflushed(session):
                    yield FLUSH  # ORM objects; no COMMIT, no RELEASE
                check_own(marks)
                if timeout is not None and overran(started[0]):
                    yield UNDO
                    return self.runner._timed_out(task, timeout, ctx)
                if session is not None:
                    emptied(session)
                    state.session = ctx._session
                return result
            except TimedOut:
                check_own(marks)
                yield UNDO
                return self.runner._timed_out(task, timeout, ctx)
            except SelfRolledBackError:
                raise
            except Exception as exc:
                check_own(marks)
                yield UNDO
                return self.runner._failed(task, exc, ctx)
        finally:
            # No session.close(): "rollback_only" leaves the connection alone, and a
            # session that is not handed on holds nothing else worth closing.
            self.end(task, started, ctx)

    def admitted(self, items: list[Item], held: set[int], state: WindowState) -> Iterator[Item]:
        """The items to run in this window, in order, until it closes (``window_s``
        after it opened, or abandoned). Each item it takes goes to ``state.taken``
        (and becomes ``state.running``); one whose row the window did not lock is
        recorded NOT_LOCKED instead of run."""
        opened = time.monotonic()
        for item in items:
            with state.lock:
                late = bool(state.taken) and time.monotonic() - opened > self.config.window_s
                if late or state.abandoned:
                    return
                state.taken.append(item)
                if item.task.id not in held:
                    state.ran.append(NOT_LOCKED)
                    continue
                state.running = (item, time.monotonic())
            yield item

    def begin(self, task: ClaimedTask, ctx: HandlerContext) -> _Started:
        """Before a handler: the lease keeping sees its context; log lines name it."""
        self.runner._notify(task, ctx)
        self.runner.probe("worker.mid_handler")
        return time.perf_counter(), current_task.set((task.id, task.kind, task.attempts))

    def end(self, task: ClaimedTask, started: _Started, ctx: HandlerContext) -> None:
        current_task.reset(started[1])
        if ctx._checkpointed:
            self.runner.checkpoint_kinds.add(task.kind)
        took = time.perf_counter() - started[0]
        self.runner.observer.ran(task.kind, took, task.waited_s)
        if took > self.config.slow_s:
            log.info("kind %s took %.0f ms in a batched window", task.kind, took * 1000)
            self.demote(task.kind)
