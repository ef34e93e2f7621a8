"""What a handler is handed besides its payload.

``ctx.session`` is created on first use. It is the transaction that also writes
the task's terminal status: the worker commits the handler's writes and
``succeeded`` together, or neither. A handler that never touches it costs no
transaction of its own; its status is written with other such tasks' in one
statement (kinds marked ``group_commit`` share one: see consumers.group).

In the worker's batched commit (consumers.batch) the context is handed the
window's connection (``_bind``): the session then begins a SAVEPOINT on it at
first use, its commit releases the savepoint and its rollback undoes the
handler's writes alone, while the window's one COMMIT makes them durable with
the status.

``ctx.spawn(kind, payload, **options)`` enqueues a child of this task
(``parent_id``) through ``ctx.session``: the children are inserted in the
transaction (in a batched window, the savepoint) that writes this attempt's
``succeeded``, so they exist exactly when the attempt commits, and a failed,
timed-out or killed attempt leaves none. A spawning handler therefore always has
a transaction of its own, like any handler that uses ``ctx.session``.

``ctx.children(parent_id)`` reads a family's children, live and ended, a page
at a time in id order (status, result value, error): what an
``on_children_done`` callback needs to combine its children's results. It
reads through ``ctx.session``, so it sees what the handler's transaction sees.

A saved checkpoint counts as progress (:attr:`_Context._progress_at`): the
worker measures the attempt's timeout from the later of its start and its last
checkpoint (:class:`~ledgerq.consumers.deadline.Deadline`).

``ctx.cancel_requested`` turns true within one heartbeat of an operator's
``ledgerq tasks cancel`` (the heartbeat statement reads it back); the worker
flags it from its heartbeat task while the handler runs, and reads it once more
when the handler returns.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, Engine
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession
from sqlalchemy.orm import Session
from sqlalchemy.orm.session import JoinTransactionMode

from ledgerq.consumers.progress import Keeper, checkpoint_json, progress_json, refused
from ledgerq.ledger.model import ClaimedTask
from ledgerq.ledger.producer import aenqueue, enqueue
from ledgerq.ledger.task_result import TaskResult
from ledgerq.ledger.within import (
    acheckpoint_within,
    achildren_within,
    adependencies_within,
    checkpoint_within,
    children_within,
    dependencies_within,
)

#: ``ctx.checkpoint`` before this attempt saved one: the task's stored checkpoint.
_NOT_SAVED: Any = object()


@dataclass
class _Context:
    task: ClaimedTask
    worker: str
    #: Set when a heartbeat finds the fence gone (the task was rescued elsewhere), or
    #: when the attempt timed out:
    #: a long handler may check it and stop early; its writes would not commit anyway.
    lost: bool = False
    #: Set by the heartbeat when an operator asked this task to stop
    #: (``ledgerq tasks cancel``); read it through :attr:`cancel_requested`.
    _cancel_requested: bool = field(default=False, repr=False)
    #: The worker's lease keeping (set when it tracks this task): it stores
    #: checkpoints and carries progress reports to the heartbeat.
    _keeper: Keeper | None = field(default=None, repr=False)
    #: Whether the handler saved a checkpoint (its kind then leaves batched windows).
    _checkpointed: bool = field(default=False, repr=False)
    _saved: Any = field(default=_NOT_SAVED, repr=False)
    #: When (time.monotonic) this attempt last saved a checkpoint: its timeout runs
    #: from then (None: from the start).
    _progress_at: float | None = field(default=None, repr=False)
    #: Called on the worker's loop after each checkpoint (moves an async deadline).
    _on_progress: Callable[[], None] | None = field(default=None, repr=False)
    #: ``dependencies``, once read.
    _dependencies: dict[int, Any] | None = field(default=None, repr=False)

    @property
    def cancel_requested(self) -> bool:
        """True once an operator asked this task to stop (within one heartbeat of
        the request). The handler may return early or raise
        :class:`~ledgerq.Cancelled`; either way the task ends ``cancelled`` and
        the writes through ``ctx.session`` are rolled back."""
        return self._cancel_requested

    @property
    def id(self) -> int:
        return self.task.id

    @property
    def attempt(self) -> int:
        """1 on the first run, 2 on the first retry, ..."""
        return self.task.attempts

    @property
    def checkpoint(self) -> Any:
        """The last state saved with ``save_checkpoint``: by this attempt, else by an
        earlier one (None if none ever was)."""
        return self.task.checkpoint if self._saved is _NOT_SAVED else self._saved

    def report_progress(
        self, done: float, total: float | None = None, message: str | None = None
    ) -> None:
        """How far the task has got (``done`` of ``total``, and a line of text). Costs
        no statement: the next heartbeat stores the latest report, shown by
        ``ledgerq show``, ``ledgerq tasks list`` and the dashboard. ValueError for a
        negative or non-numeric figure."""
        report = progress_json(done, total, message)
        if self._keeper is not None:
            self._keeper.progress(self.task.fence, report)

    def _prepare_checkpoint(self, state: Any) -> str:
        text = checkpoint_json(state)
        self._checkpointed = True
        return text

    def _stored(self, held: bool, state: Any) -> None:
        if not held:
            self.lost = True
            raise refused(self.task.id)
        self._saved = state
        self._progress_at = time.monotonic()
        if self._on_progress is not None:
            self._on_progress()

    def _keeping(self) -> Keeper:
        if self._keeper is None:
            raise RuntimeError(
                "save_checkpoint needs a worker's lease keeping: it is not available to "
                "group_commit kinds, or outside a worker"
            )
        return self._keeper


@dataclass
class TaskContext(_Context):
    """Context for a sync handler: ``session`` is a ``Session``."""

    _engine: Engine | None = field(default=None, repr=False)
    _session: Session | None = field(default=None, repr=False)
    #: A batched window's connection: the session joins its transaction.
    _bind: Connection | None = field(default=None, repr=False)
    #: How the session joins ``_bind``'s transaction (see AsyncTaskContext).
    _join: JoinTransactionMode = field(default="create_savepoint", repr=False)

    @property
    def session(self) -> Session:
        if self._session is None and self._bind is not None:
            self._session = Session(self._bind, join_transaction_mode=self._join)
        if self._session is None:
            if self._engine is None:
                raise RuntimeError("this context has no database engine")
            self._session = Session(self._engine)
        return self._session

    def save_checkpoint(self, state: Any) -> None:
        """Store ``state`` (JSON) now, fenced by this attempt; the next attempt finds
        it in ``ctx.checkpoint``. :class:`~ledgerq.LeaseLostError` if this attempt no
        longer holds the task; ValueError if ``state`` is not JSON. See
        :mod:`ledgerq.consumers.progress`."""
        text = self._prepare_checkpoint(state)
        if self._bind is not None:  # a batched window holds the row: store it there
            held = checkpoint_within(self._bind, self.task.fence, text)
        else:
            keeper = self._keeping()
            assert keeper.loop is not None, "the lease keeping runs on the worker's loop"
            future = asyncio.run_coroutine_threadsafe(
                keeper.save(self.task.fence, text), keeper.loop
            )
            held = future.result()
        self._stored(held, state)

    @property
    def dependencies(self) -> dict[int, Any]:
        """The tasks this one was enqueued ``after``: {id: result value} (the value
        its handler returned; None for one that did not succeed, under
        ``after_policy="always"``). Read once, through ``ctx.session``."""
        if self._dependencies is None:
            self._dependencies = dependencies_within(self.session, self.task.id)
        return self._dependencies

    def spawn(self, kind: str, payload: Any = None, **options: Any) -> int:
        """Enqueue a child task (``parent_id`` this task) through ``ctx.session``, so
        it exists exactly when this attempt commits; its id. Options as
        :func:`~ledgerq.enqueue`; :class:`~ledgerq.InvalidTaskError` for bad ones."""
        return enqueue(self.session, kind, payload, parent_id=self.task.id, **options)

    def children(
        self, parent_id: int | None = None, *, after: int = 0, limit: int = 100
    ) -> list[TaskResult]:
        """The children of ``parent_id`` (None: this task), live and ended, in id
        order after ``after``, at most ``limit``: each one's status, result value and
        error. Read through ``ctx.session``. For the next page, pass the last id as
        ``after``; an ``on_children_done`` callback reads its family with
        ``ctx.children(payload["parent_id"])``."""
        family = self.task.id if parent_id is None else parent_id
        return children_within(self.session, family, after, limit)


@dataclass
class AsyncTaskContext(_Context):
    """Context for an async handler: ``session`` is an ``AsyncSession``."""

    _engine: AsyncEngine | None = field(default=None, repr=False)
    _session: AsyncSession | None = field(default=None, repr=False)
    #: A batched window's connection: the session joins its transaction.
    _bind: AsyncConnection | None = field(default=None, repr=False)
    #: How the session joins ``_bind``'s transaction: "rollback_only" in a window,
    #: which begins each handler's savepoint itself (consumers/window.py).
    _join: JoinTransactionMode = field(default="create_savepoint", repr=False)

    @property
    def session(self) -> AsyncSession:
        if self._session is None and self._bind is not None:
            self._session = AsyncSession(self._bind, join_transaction_mode=self._join)
        if self._session is None:
            if self._engine is None:
                raise RuntimeError("this context has no database engine")
            self._session = AsyncSession(self._engine)
        return self._session

    async def save_checkpoint(self, state: Any) -> None:
        """Store ``state`` (JSON) now, fenced by this attempt; the next attempt finds
        it in ``ctx.checkpoint``. :class:`~ledgerq.LeaseLostError` if this attempt no
        longer holds the task; ValueError if ``state`` is not JSON. See
        :mod:`ledgerq.consumers.progress`."""
        text = self._prepare_checkpoint(state)
        if self._bind is not None:  # a batched window holds the row: store it there
            held = await acheckpoint_within(self._bind, self.task.fence, text)
        else:
            held = await self._keeping().save(self.task.fence, text)
        self._stored(held, state)

    async def dependencies(self) -> dict[int, Any]:
        """``await ctx.dependencies()``: the tasks this one was enqueued ``after``,
        {id: result value}, as :attr:`TaskContext.dependencies` (an async handler
        cannot read a property through the database). Read once, through
        ``ctx.session``."""
        if self._dependencies is None:
            self._dependencies = await adependencies_within(self.session, self.task.id)
        return self._dependencies

    async def spawn(self, kind: str, payload: Any = None, **options: Any) -> int:
        """Enqueue a child task (``parent_id`` this task) through ``ctx.session``, so
        it exists exactly when this attempt commits; its id. Options as
        :func:`~ledgerq.aenqueue`; :class:`~ledgerq.InvalidTaskError` for bad ones."""
        return await aenqueue(self.session, kind, payload, parent_id=self.task.id, **options)

    async def children(
        self, parent_id: int | None = None, *, after: int = 0, limit: int = 100
    ) -> list[TaskResult]:
        """:meth:`TaskContext.children`, through the async ``ctx.session``."""
        family = self.task.id if parent_id is None else parent_id
        return await achildren_within(self.session, family, after, limit)


#: Either context; the worker's lease keeping flags ``lost`` on it.
HandlerContext = TaskContext | AsyncTaskContext
