"""What every PostgreSQL operation shares: the engine, autocommit for single
statements, and the translation of driver errors into the seam's two types.

Single-statement operations run in autocommit: one round trip, no
BEGIN/COMMIT, and the statement is still atomic. Driver errors are classified
here, once (procrastinate's ``wrap_exceptions``): a failed connection, a
server shutting down, a terminated backend, a pool that had no connection to
give, a deadlock or a statement timeout are transient; a missing table or
column is :class:`SchemaMissingError` (the schema was dropped, never migrated,
or is older than this code: services stop on it rather than retry); anything
else (bad data) is a plain :class:`StorageError`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, cast

import psycopg
from psycopg.rows import namedtuple_row
from sqlalchemy import Dialect, Row, TextClause
from sqlalchemy import exc as sa_exc
from sqlalchemy.ext.asyncio import AsyncEngine

from ledgerq.core.errors import (
    PrivilegeMissingError,
    SchemaMissingError,
    StorageError,
    TransientStorageError,
)
from ledgerq.core.errors import first_line as first_line  # the adapters import it from here

#: SQLSTATEs of a statement that names a table or column the database lacks.
UNDEFINED_OBJECT = frozenset({"42P01", "42703"})  # undefined_table, undefined_column
INSUFFICIENT_PRIVILEGE = "42501"
GRANTS = "grant the login its ledgerq role (docs/security.md, 'Database roles')"


def _classified(driver_error: BaseException, transient: bool) -> StorageError:
    """The seam's error for a driver's: by SQLSTATE first, then transient or not."""
    reason = first_line(driver_error)
    sqlstate = getattr(driver_error, "sqlstate", None)
    if sqlstate in UNDEFINED_OBJECT:
        return SchemaMissingError(
            f"{reason}: the ledger schema is missing or outdated; run `ledgerq migrate`"
        )
    if sqlstate == INSUFFICIENT_PRIVILEGE:
        return PrivilegeMissingError(f"{reason}: {GRANTS}")
    return TransientStorageError(reason) if transient else StorageError(reason)


@contextmanager
def translated() -> Iterator[None]:
    """Re-raise driver errors as :class:`StorageError` or one of its subclasses:
    SQLAlchemy's wrapping of them, or psycopg's own (the hot path's, :meth:`PgBase._hot_rows`)."""
    try:
        yield
    except sa_exc.DBAPIError as exc:
        transient = exc.connection_invalidated or isinstance(
            exc, sa_exc.OperationalError | sa_exc.InterfaceError
        )
        raise _classified(exc.orig if exc.orig is not None else exc, transient) from exc
    except psycopg.Error as exc:
        transient = isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError)
        raise _classified(exc, transient) from exc
    except (sa_exc.TimeoutError, OSError) as exc:
        raise TransientStorageError(first_line(exc)) from exc


#: Each hot statement's text as psycopg takes it (``%(name)s`` parameters), compiled once.
_DRIVER_SQL: dict[int, tuple[TextClause, str]] = {}


def driver_sql(statement: TextClause, dialect: Dialect) -> str:
    """``statement`` compiled for psycopg once (SQLAlchemy renders the binds and
    escapes a literal ``%``); kept with the statement, whose id keys it."""
    cached = _DRIVER_SQL.get(id(statement))
    if cached is None or cached[0] is not statement:
        cached = _DRIVER_SQL[id(statement)] = (statement, str(statement.compile(dialect=dialect)))
    return cached[1]


class PgBase:
    """``engine`` carries every statement; ``sessions``, when given, is where what
    needs a session of its own (an advisory lock held across transactions) runs,
    because ``engine`` is a transaction pooler that hands each transaction whichever
    server connection is free."""

    def __init__(self, engine: AsyncEngine, *, sessions: AsyncEngine | None = None) -> None:
        self.engine = engine
        self.sessions = sessions or engine
        self._autocommit = engine.execution_options(isolation_level="AUTOCOMMIT")

    async def _rows(self, statement: TextClause, params: Mapping[str, Any]) -> Sequence[Row[Any]]:
        """Run one statement in autocommit and return its rows."""
        with translated():
            async with self._autocommit.connect() as conn:
                result = await conn.execute(statement, params)
                return result.all() if result.returns_rows else []

    async def _hot_rows(self, statement: TextClause, params: Mapping[str, Any]) -> Sequence[Any]:
        """What :meth:`_rows` does, for the statements every task runs (the relay's
        pass, the claim, the finish, the heartbeat): on a connection of the same pool,
        in autocommit, but executed by psycopg itself, each row a named tuple.
        SQLAlchemy's execute cost 0.3-0.5 ms of client time a statement on top of
        psycopg's (docs/performance.md); nothing it adds is needed for one
        statement of fixed text. A connection that broke is invalidated, so the
        pool never hands it out again, as SQLAlchemy does for its own errors."""
        sql = driver_sql(statement, self.engine.dialect)
        with translated():
            async with self._autocommit.connect() as conn:
                fairy = await conn.get_raw_connection()
                raw = cast(psycopg.AsyncConnection[Any], fairy.driver_connection)
                try:
                    async with raw.cursor(row_factory=namedtuple_row) as cursor:
                        await cursor.execute(sql, params)
                        return await cursor.fetchall() if cursor.description else []
                except psycopg.Error:
                    if raw.closed or raw.broken:
                        await conn.invalidate()
                    raise

    async def _scalar(self, statement: TextClause, params: Mapping[str, Any] | None = None) -> Any:
        rows = await self._rows(statement, params or {})
        return rows[0][0] if rows else None

    async def dispose(self) -> None:
        await self.engine.dispose()
        if self.sessions is not self.engine:
            await self.sessions.dispose()
