"""The terminal status, written inside a transaction the handler owns.

A handler that writes through ``ctx.session`` has its writes and its
``succeeded`` committed together: the worker runs the same fenced ``finish``
statement as everyone else, on the handler's own session, before the commit. A
lost fence returns nothing, and the caller rolls the handler's writes back.

The worker's batched commit (``consumers/batch.py``) first locks the rows it
will finish (:func:`lock_within`), so none of its fences can be lost before its
COMMIT, and finishes a window of tasks in one statement.

These are the worker's names for the seam's transaction-scoped part
(:class:`~ledgerq.ledger.protocol.TxLedger`, on PostgreSQL
:mod:`ledgerq.ledger.pg.tx`, on MySQL :mod:`ledgerq.ledger.mysql.tx`: the caller's
bind picks, :mod:`ledgerq.ledger.binds`), which runs the statements; the handler savepoints
(:class:`HandlerMarks`) and :func:`end_window` are the window's own plumbing, whose
statements each server names for itself (queries.sql on PostgreSQL; on MySQL and
MariaDB :mod:`ledgerq.ledger.mysql.window`, which also says how a MySQL window's
transaction is told apart for ``end_window``).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Protocol

from sqlalchemy import Connection, Engine, TextClause
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
from sqlalchemy.orm import Session

from ledgerq.ledger.binds import MYSQL_DIALECTS, atx_for, tx_for
from ledgerq.ledger.model import Fence
from ledgerq.ledger.protocol import Locked
from ledgerq.ledger.sql import Q
from ledgerq.ledger.task_result import TaskResult


def succeed_within(session: Session | Connection, fence: Fence, result: str | None = None) -> bool:
    """running -> succeeded (with the handler's JSON ``result``) in the caller's (sync)
    transaction; whether the fence held."""
    return bool(tx_for(session, "succeed_within").succeed([fence], [result]))


def lock_within(session: Session | Connection, fences: Sequence[Fence]) -> Locked:
    """Lock the rows still running under ``fences`` for the caller's transaction."""
    return tx_for(session, "lock_within").lock_running(fences)


async def alock_within(session: AsyncSession | AsyncConnection, fences: Sequence[Fence]) -> Locked:
    """:func:`lock_within`, async."""
    return await atx_for(session, "alock_within").lock_running(fences)


class MarkStatements(Protocol):
    """The four savepoint statements of a window's handlers, as a server names them."""

    @property
    def open_handlers(self) -> TextClause: ...
    @property
    def close_handlers(self) -> TextClause: ...
    @property
    def mark_handler(self) -> TextClause: ...
    @property
    def undo_handler(self) -> TextClause: ...


def mark_statements(conn: Connection | AsyncConnection) -> MarkStatements:
    """The savepoint statements for ``conn``'s server."""
    if conn.dialect.name in MYSQL_DIALECTS:
        from ledgerq.ledger.mysql.window import WQ  # only on MySQL: no driver otherwise

        return WQ
    return Q


class HandlerMarks:
    """The savepoints of a sync batched window's handlers, sent on the driver's
    connection (``open_handlers`` ... ``close_handlers``, ``mark_handler``,
    ``undo_handler``): SQLAlchemy's ``begin_nested`` compiles and executes a new
    ``SAVEPOINT sa_savepoint_N`` per task, a sixth of a window's CPU. Opened once
    the rows are locked; closed (all released) before the window's finish, which
    must run in the transaction that locked them. The window's transaction itself
    is SQLAlchemy's, so a handler that rolls ``ctx.session`` back ends it, which
    :attr:`intact` tells; a savepoint the handler left open in SQLAlchemy's books
    is rolled back there first, so the books match the server's."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._root = conn.get_transaction()
        self._sql = mark_statements(conn)
        driver: Any = conn.connection.driver_connection
        self._cursor = driver.cursor()  # one for the window: a fifth cheaper per statement
        self._run(self._sql.open_handlers)

    def _run(self, statement: TextClause) -> None:
        self._cursor.execute(statement.text)

    @property
    def intact(self) -> bool:
        """The window's transaction was not rolled back by a handler."""
        return self._root is not None and self._root.is_active

    def mark(self) -> None:
        self._run(self._sql.mark_handler)

    def undo(self) -> None:
        while (nested := self._conn.get_nested_transaction()) is not None:
            nested.rollback()
        self._run(self._sql.undo_handler)

    def close(self) -> None:
        self._run(self._sql.close_handlers)


class AsyncHandlerMarks:
    """:class:`HandlerMarks` for an async window, on the driver's async connection
    (psycopg's or aiomysql's: no greenlet hop); open it with :meth:`open` once the
    rows are locked."""

    def __init__(self, conn: AsyncConnection, cursor: Any) -> None:
        self._conn = conn
        self._cursor = cursor
        self._root = conn.get_transaction()
        self._sql = mark_statements(conn)

    @classmethod
    async def open(cls, conn: AsyncConnection) -> AsyncHandlerMarks:
        driver: Any = (await conn.get_raw_connection()).driver_connection
        cursor = driver.cursor()
        if inspect.isawaitable(cursor):  # aiomysql's cursor() is a coroutine
            cursor = await cursor
        marks = cls(conn, cursor)
        await marks._run(marks._sql.open_handlers)
        return marks

    async def _run(self, statement: TextClause) -> None:
        await self._cursor.execute(statement.text)

    @property
    def intact(self) -> bool:
        """The window's transaction was not rolled back by a handler."""
        return self._root is not None and self._root.is_active

    async def mark(self) -> None:
        await self._run(self._sql.mark_handler)

    async def undo(self) -> None:
        while (nested := self._conn.get_nested_transaction()) is not None:
            await nested.rollback()
        await self._run(self._sql.undo_handler)

    async def close(self) -> None:
        await self._run(self._sql.close_handlers)


def end_window(engine: Engine, holder: tuple[int, datetime]) -> bool:
    """End (roll back, unlock) the transaction ``holder`` names, from a connection of
    ``engine``; whether it was still there to end. On MySQL and MariaDB: ``KILL`` of
    its connection, if it is still in that transaction (:mod:`ledgerq.ledger.mysql.window`)."""
    pid, began = holder
    if engine.dialect.name in MYSQL_DIALECTS:
        from ledgerq.ledger.mysql import window

        with engine.connect() as conn:
            return window.end_window(conn, pid, began)
    with engine.connect() as conn:
        ended = conn.execute(Q.end_window, {"pid": pid, "began": began}).scalar()
        conn.commit()
    return bool(ended)


def succeed_many_within(
    session: Session | Connection, fences: Sequence[Fence], results: Sequence[str | None]
) -> set[int]:
    """running -> succeeded for ``fences`` in the caller's (sync) transaction; the ids won."""
    return tx_for(session, "succeed_many_within").succeed(fences, results)


async def asucceed_within(
    session: AsyncSession | AsyncConnection,
    fences: Sequence[Fence],
    results: Sequence[str | None] | None = None,
) -> set[int]:
    """running -> succeeded for ``fences`` (with each handler's JSON result, in the
    same order) in the caller's (async) transaction; the ids whose fence held."""
    return await atx_for(session, "asucceed_within").succeed(fences, results)


def checkpoint_within(session: Session | Connection, fence: Fence, state_json: str) -> bool:
    """Store a running task's checkpoint in the caller's (sync) transaction, fenced:
    for a handler in a batched window, whose row the window holds locked until its
    COMMIT (another connection's write would wait for it). Whether the fence held."""
    return tx_for(session, "checkpoint_within").save_checkpoint(fence, state_json)


async def acheckpoint_within(
    session: AsyncSession | AsyncConnection, fence: Fence, state_json: str
) -> bool:
    """:func:`checkpoint_within`, async."""
    return await atx_for(session, "acheckpoint_within").save_checkpoint(fence, state_json)


def dependencies_within(session: Session | Connection, task_id: int) -> dict[int, Any]:
    """``ctx.dependencies`` read in the handler's transaction: each ended dependency
    of ``task_id`` and its result (migration 0020)."""
    return tx_for(session, "ctx.dependencies").dependency_results(task_id)


async def adependencies_within(
    session: AsyncSession | AsyncConnection, task_id: int
) -> dict[int, Any]:
    """:func:`dependencies_within` on an async session."""
    return await atx_for(session, "ctx.dependencies").dependency_results(task_id)


def children_within(
    session: Session | Connection, parent_id: int, after: int, limit: int
) -> list[TaskResult]:
    """``ctx.children``: a page of ``parent_id``'s children, where each stands, read
    in the handler's transaction."""
    return tx_for(session, "ctx.children").child_results(parent_id, after, limit)


async def achildren_within(
    session: AsyncSession | AsyncConnection, parent_id: int, after: int, limit: int
) -> list[TaskResult]:
    """:func:`children_within` on an async session."""
    return await atx_for(session, "ctx.children").child_results(parent_id, after, limit)
