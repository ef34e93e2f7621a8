"""What every MySQL / MariaDB operation shares: the engine, the translation of
driver errors into the seam's types, and the conversions between the ledger's
columns and the seam's values.

Errors are told apart by MySQL's error number (PyMySQL's ``args[0]``, the same
under aiomysql): a missing table or column is
:class:`~ledgerq.core.errors.SchemaMissingError` (services stop on it), a denied
privilege :class:`~ledgerq.core.errors.PrivilegeMissingError`; a lost or killed
connection, a lock wait that timed out (1205), a deadlock (1213, InnoDB rolled
the transaction back), a statement that outran ``max_statement_time`` or a pool
with no connection to give are transient; anything else (bad data) is a plain
:class:`~ledgerq.core.errors.StorageError`.

Timestamps are ``DATETIME(6)`` in UTC (:mod:`.engines`): read back naive, they
are made aware here (:func:`aware`); JSON columns come back as text (MariaDB's
JSON is a checked LONGTEXT, and neither driver decodes MySQL's) and are decoded
here (:func:`decoded`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import pymysql
from sqlalchemy import Row, TextClause
from sqlalchemy import exc as sa_exc
from sqlalchemy.ext.asyncio import AsyncEngine

from ledgerq.core.errors import (
    PrivilegeMissingError,
    SchemaMissingError,
    StorageError,
    TransientStorageError,
    first_line,
)
from ledgerq.ledger.mysql.engines import autocommit_engine

#: ER_NO_SUCH_TABLE, ER_BAD_FIELD_ERROR: the statement names what the database lacks.
UNDEFINED_OBJECT = frozenset({1146, 1054})
#: ER_DBACCESS_DENIED, ER_TABLEACCESS_DENIED, ER_COLUMNACCESS_DENIED, ER_PROCACCESS_DENIED.
INSUFFICIENT_PRIVILEGE = frozenset({1044, 1142, 1143, 1370})
#: Lock wait timeout, deadlock, statement time limits (MariaDB 1969, MySQL 3024),
#: too many connections, server shutting down, connection killed (MariaDB 1927).
TRANSIENT = frozenset({1205, 1213, 1969, 3024, 1040, 1053, 1927, 2003, 2006, 2013})
GRANTS = "grant the login the ledger's rights (docs/security.md, 'On MySQL and MariaDB')"


def error_number(exc: BaseException | None) -> int | None:
    """MySQL's error number of a driver error (PyMySQL's and aiomysql's ``args[0]``)."""
    args = getattr(exc, "args", ())
    return args[0] if args and isinstance(args[0], int) else None


@contextmanager
def translated() -> Iterator[None]:
    """Re-raise driver errors as :class:`StorageError` or one of its subclasses."""
    try:
        yield
    except sa_exc.DBAPIError as exc:
        reason = first_line(exc.orig if exc.orig is not None else exc)
        number = error_number(exc.orig)
        if number in UNDEFINED_OBJECT:
            raise SchemaMissingError(
                f"{reason}: the ledger schema is missing or outdated; run `ledgerq migrate`"
            ) from exc
        if number in INSUFFICIENT_PRIVILEGE:
            raise PrivilegeMissingError(f"{reason}: {GRANTS}") from exc
        if (
            number in TRANSIENT
            or exc.connection_invalidated
            or isinstance(exc, sa_exc.OperationalError | sa_exc.InterfaceError)
        ):
            raise TransientStorageError(reason) from exc
        raise StorageError(reason) from exc
    except (pymysql.err.OperationalError, pymysql.err.InterfaceError) as exc:
        # the driver's own, not wrapped by SQLAlchemy: a connection lost while the
        # pool switched it to autocommit at checkout (an engine_connect event)
        raise TransientStorageError(first_line(exc)) from exc
    except (sa_exc.TimeoutError, sa_exc.PendingRollbackError, OSError) as exc:
        # PendingRollbackError: a connection that died inside its transaction, used
        # again before the rollback; lost with its connection, as a lost query is
        raise TransientStorageError(first_line(exc)) from exc


def aware(value: datetime | None) -> datetime | None:
    """A ``DATETIME(6)`` read back (naive UTC) as an aware timestamp."""
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=UTC)


def decoded(value: Any) -> Any:
    """A JSON column as read back (text, or bytes) decoded; None stays None."""
    if isinstance(value, bytes | bytearray):
        value = value.decode()
    return json.loads(value) if isinstance(value, str) else value


def micros(seconds: float) -> int:
    """Seconds as the whole microseconds an ``INTERVAL ... MICROSECOND`` takes."""
    return round(float(seconds) * 1_000_000)


class MyBase:
    """``engine`` (aiomysql) carries every statement of the ledger's own."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self._autocommit_engine: AsyncEngine | None = None

    @property
    def _autocommit(self) -> AsyncEngine:
        """The ledger's autocommit engine (:func:`~.engines.autocommit_engine`), made
        at first use: only the reconciler's lock and retention's DDL need it."""
        if self._autocommit_engine is None:
            self._autocommit_engine = autocommit_engine(self.engine)
        return self._autocommit_engine

    async def _rows(self, statement: TextClause, params: Mapping[str, Any]) -> Sequence[Row[Any]]:
        """Run one statement in a transaction of its own and return its rows.

        Not on the AUTOCOMMIT connection: switching a pooled connection to
        autocommit costs a round trip at checkout and another at return, and a
        connection lost in that switch was left to the garbage collector
        instead of being returned to the pool (a killed connection under the
        worker's liveness beat showed it). The statement and its COMMIT are two
        round trips (PyMySQL begins implicitly)."""
        with translated():
            async with self.engine.begin() as conn:
                result = await conn.execute(statement, params)
                return result.all() if result.returns_rows else []

    async def dispose(self) -> None:
        await self.engine.dispose()
        if self._autocommit_engine is not None:
            await self._autocommit_engine.dispose()
