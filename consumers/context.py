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

``ctx.cancel_requested`` turns true within one heartbeat of an operator's
``ledgerq tasks cancel`` (the heartbeat statement reads it back); the worker
flags it from its heartbeat task while the handler runs, and reads it once more
when the handler returns.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, Engine
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession
from sqlalchemy.orm import Session
from sqlalchemy.orm.session import JoinTransactionMode

from ledgerq.ledger.model import ClaimedTask


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
        return self.task.checkpoint


@dataclass
class TaskContext(_Context):
    """Context for a sync handler: ``session`` is a ``Session``."""

    _engine: Engine | None = field(default=None, repr=False)
    _session: Session | None = field(default=None, repr=False)
    #: The batched commit's connection: the session is a savepoint on it.
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


@dataclass
class AsyncTaskContext(_Context):
    """Context for an async handler: ``session`` is an ``AsyncSession``."""

    _engine: AsyncEngine | None = field(default=None, repr=False)
    _session: AsyncSession | None = field(default=None, repr=False)
    #: The batched commit's connection: the session is a savepoint on it.
    _bind: AsyncConnection | None = field(default=None, repr=False)
    #: How the session joins ``_bind``'s transaction: "rollback_only" when the
    #: window began the handler's savepoint itself (the session's rollback undoes it).
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


#: Either context; the worker's lease keeping flags ``lost`` on it.
HandlerContext = TaskContext | AsyncTaskContext
