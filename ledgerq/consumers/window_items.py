"""What a batched window is made of, and how its tasks' endings are reported
(:mod:`.window` runs it).

An :class:`Item` is a claimed task waiting for a window: its ``report`` is called
exactly once, with how the task ended, or its ``fallback`` sends it to the
ordinary path, which reports it itself. :class:`WindowState` is one window's
record, shared by a sync window's pool thread and the event loop under one lock
(the loop may abandon a window whose handler outlived its timeout while the
thread still runs it). A window's successes are reported
:class:`~ledgerq.consumers.handoff.Committed` only if its COMMIT happened
(:func:`report_all`); a task whose row it could not lock (:data:`NOT_LOCKED`)
takes the ordinary path.

A handler's ``ctx.session`` is handed on to the next handler in a window only
after it has been flushed (:func:`unflushed`) and emptied (:func:`emptied`), and
only while the window's savepoints are intact (:func:`check_own`: a handler that
rolled the session back itself ended the window's transaction).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from ledgerq.consumers.execute import failure
from ledgerq.consumers.handoff import Committed, Result
from ledgerq.consumers.registry import Handler
from ledgerq.ledger.model import ClaimedTask, Outcome
from ledgerq.ledger.within import AsyncHandlerMarks, HandlerMarks

log = logging.getLogger("ledgerq.worker")


class NotLocked:
    """The window could not lock the task's row: it was not run there."""


NOT_LOCKED = NotLocked()


#: How a handler in a window ended: its JSON result (succeeded), or an outcome,
#: or NOT_LOCKED (it takes the ordinary path).
Ran = str | None | Outcome | NotLocked


@dataclass(eq=False)
class Item:
    """A task waiting for a window; ``report`` is called once, with how it ended."""

    task: ClaimedTask
    handler: Handler
    report: Callable[[Result | None], None]
    #: Run it on the ordinary path instead (which reports it itself).
    fallback: Callable[[], None]
    #: Its claimed batch stopped waiting (shutdown): no window takes it.
    dropped: bool = False


@dataclass
class WindowState:
    """One window's record, shared by a sync window's thread and the loop. Under
    ``lock`` the thread takes each task (``taken``) and notes the one it is
    running (``running``); under the same lock the loop abandons the window, so
    the two agree on which tasks it took. ``ran`` holds how each ended, in order."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    taken: list[Item] = field(default_factory=list)
    ran: list[Ran] = field(default_factory=list)
    #: The task whose handler runs now, and since when (``time.monotonic()``).
    running: tuple[Item, float] | None = None
    #: The context of the latest handler started (flagged ``lost`` if abandoned).
    ctx: Any = None
    #: The transaction holding the window's row locks (``lock_within``).
    holder: tuple[int, datetime] | None = None
    #: The handlers' ``ctx.session``, handed from one handler to the next while
    #: they succeed (emptied between them); a failure drops it, and the next
    #: handler gets a new one (a failed flush leaves a session unusable).
    session: Any = None
    abandoned: bool = False

    def done(self, result: Ran) -> None:
        with self.lock:
            self.ran.append(result)
            self.running = None


def successes(taken: list[Item], ran: list[Ran]) -> list[tuple[ClaimedTask, str | None]]:
    return [
        (item.task, r)
        for item, r in zip(taken, ran, strict=True)
        if not isinstance(r, Outcome | NotLocked)
    ]


def report_all(taken: list[Item], ran: list[Ran], committed: bool) -> None:
    for item, r in zip(taken, ran, strict=True):
        if isinstance(r, NotLocked):
            item.fallback()
        elif isinstance(r, Outcome):
            item.report(r)
        elif committed:
            item.report(Committed(True))
        else:  # cannot happen (the rows were locked): nothing of the window was committed
            log.error("task %s: a locked fence was lost in a batched window", item.task.id)
            item.report(failure(item.task, "the batched commit lost a fence; retried"))


def report_failed(items: Sequence[Item], error: str) -> None:
    log.warning("batched window of %d failed: %s", len(items), error)
    for item in items:
        item.report(failure(item.task, error))


class SelfRolledBackError(Exception):
    """A handler in a window rolled ``ctx.session`` back itself, and with it the
    window's transaction (the others' writes and the row locks). The whole window
    is rolled back, and its tasks run again on the ordinary path."""


def unflushed(session: Session) -> bool:
    """Whether the handler left ORM changes to flush (checked without building the
    dirty set when the session holds no objects: the usual Core-only handler)."""
    return bool(session.new or session.deleted) or (
        len(session.identity_map) > 0 and bool(session.dirty)
    )


def emptied(session: Session) -> None:
    """Detach what the handler loaded, before the session serves the next one."""
    if len(session.identity_map) > 0 or session.new:
        session.expunge_all()


def check_own(marks: HandlerMarks | AsyncHandlerMarks) -> None:
    if not marks.intact:
        raise SelfRolledBackError("a handler rolled back ctx.session itself in a batched window")
