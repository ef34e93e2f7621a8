"""The producer's statements on a raw psycopg 3 connection, in the caller's transaction.

Django (whose PostgreSQL backend runs on psycopg 3) and plain-psycopg applications
hold a ``psycopg.Connection`` or ``psycopg.AsyncConnection``, not a SQLAlchemy one.
``enqueue`` hands such a connection here (through :mod:`ledgerq.ledger.executors`),
and the same named ``text()`` clauses from ``queries.sql`` run on it.

Contract:

- Nothing here begins, commits or rolls back. The statements join whatever the
  connection is in: inside the caller's transaction (Django's
  ``transaction.atomic()``, psycopg's ``conn.transaction()``, or the implicit one
  of a connection that is not in autocommit), the task exists exactly when that
  transaction commits. A connection in autocommit mode commits each statement
  at once, as it does for any statement run on it.
- A clause's ``:name`` placeholders become psycopg's ``%(name)s`` by compiling
  the clause once with SQLAlchemy's own psycopg dialect (which also doubles a
  literal ``%``). The result is cached per statement. Values travel as bound
  parameters; no SQL is built from them.
- The caller's connection settings are left alone: its cursor factory
  (Django's client-side binding cursors work as well as server-side ones) and
  its row factory (rows are read as tuples on a cursor of our own).
- Driver errors reach the caller as psycopg raised them: it is the caller's
  transaction, and the caller's driver.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeGuard

import psycopg
from psycopg.rows import tuple_row
from sqlalchemy import TextClause
from sqlalchemy.dialects.postgresql.psycopg import PGDialect_psycopg

Rows = list[tuple[Any, ...]]

_DIALECT = PGDialect_psycopg()  # type: ignore[no-untyped-call]  # (untyped in SQLAlchemy)
_COMPILED: dict[TextClause, str] = {}


def psycopg_sql(statement: TextClause) -> str:
    """``statement`` in psycopg's ``%(name)s`` parameter style, compiled once."""
    compiled = _COMPILED.get(statement)
    if compiled is None:
        compiled = _COMPILED[statement] = statement.compile(dialect=_DIALECT).string
    return compiled


def is_connection(obj: object) -> TypeGuard[psycopg.Connection[Any]]:
    return isinstance(obj, psycopg.Connection)


def is_async_connection(obj: object) -> TypeGuard[psycopg.AsyncConnection[Any]]:
    return isinstance(obj, psycopg.AsyncConnection)


def rows(conn: psycopg.Connection[Any], statement: TextClause, params: Mapping[str, Any]) -> Rows:
    """Run ``statement`` on ``conn`` without committing; return its rows as tuples."""
    with conn.cursor(row_factory=tuple_row) as cursor:
        cursor.execute(psycopg_sql(statement), params)
        return cursor.fetchall() if cursor.description is not None else []


async def arows(
    conn: psycopg.AsyncConnection[Any], statement: TextClause, params: Mapping[str, Any]
) -> Rows:
    """:func:`rows` on an ``AsyncConnection``."""
    async with conn.cursor(row_factory=tuple_row) as cursor:
        await cursor.execute(psycopg_sql(statement), params)
        return await cursor.fetchall() if cursor.description is not None else []


def connection_url(obj: object) -> str | None:
    """A libpq connection string for the database of ``obj``, a psycopg connection
    (sync or async) or Django's PostgreSQL connection (for result(): it waits on
    connections of its own); None for anything else."""
    if type(obj).__module__.startswith("django.") and callable(
        getattr(obj, "ensure_connection", None)
    ):
        obj.ensure_connection()  # type: ignore[attr-defined]
        obj = obj.connection  # type: ignore[attr-defined]
    if not isinstance(obj, psycopg.Connection | psycopg.AsyncConnection):
        return None
    params = obj.info.get_parameters()
    if obj.info.password:
        params["password"] = obj.info.password
    return psycopg.conninfo.make_conninfo(**params)
