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
from typing import Any

from sqlalchemy import Row, TextClause
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


@contextmanager
def translated() -> Iterator[None]:
    """Re-raise driver errors as :class:`StorageError` or one of its subclasses."""
    try:
        yield
    except sa_exc.DBAPIError as exc:
        reason = first_line(exc.orig if exc.orig is not None else exc)
        sqlstate = getattr(exc.orig, "sqlstate", None)
        if sqlstate in UNDEFINED_OBJECT:
            raise SchemaMissingError(
                f"{reason}: the ledger schema is missing or outdated; run `ledgerq migrate`"
            ) from exc
        if sqlstate == INSUFFICIENT_PRIVILEGE:
            raise PrivilegeMissingError(f"{reason}: {GRANTS}") from exc
        if exc.connection_invalidated or isinstance(
            exc, sa_exc.OperationalError | sa_exc.InterfaceError
        ):
            raise TransientStorageError(reason) from exc
        raise StorageError(reason) from exc
    except (sa_exc.TimeoutError, OSError) as exc:
        raise TransientStorageError(first_line(exc)) from exc


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

    async def _scalar(self, statement: TextClause, params: Mapping[str, Any] | None = None) -> Any:
        rows = await self._rows(statement, params or {})
        return rows[0][0] if rows else None

    async def dispose(self) -> None:
        await self.engine.dispose()
        if self.sessions is not self.engine:
            await self.sessions.dispose()
