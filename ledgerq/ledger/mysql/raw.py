"""The MySQL ledger's plans on a raw DB-API connection, in the caller's transaction.

Django (whose MySQL backend runs on mysqlclient's ``MySQLdb``, or on PyMySQL
installed as ``MySQLdb``) and plain-driver applications hold a DB-API connection,
not a SQLAlchemy one. ``enqueue`` hands such a connection here (through
:func:`ledgerq.ledger.mysql.plans.runner`), and the same named ``text()`` clauses
of ``queries.sql`` run on it. Accepted:

- sync: a PyMySQL ``pymysql.connections.Connection``, or a mysqlclient
  ``MySQLdb.connections.Connection`` (recognised by its module: MySQLdb is never
  imported here), or Django's connection on its MySQL backend (unwrapped by
  :mod:`ledgerq.ledger.mysql.plans`: ``ensure_connection()``, then ``.connection``);
- async: an aiomysql ``Connection`` (recognised by its module).

Contract:

- Nothing here begins, commits or rolls back. The statements join whatever the
  connection is in: inside the caller's transaction (Django's
  ``transaction.atomic()``, ``conn.begin()``, or the implicit one of a connection
  not in autocommit) the task exists exactly when that transaction commits; on a
  connection in autocommit each statement commits at once, as any statement run
  on it does (PyMySQL and mysqlclient connect with autocommit off; Django turns
  it on outside ``atomic()``).
- A clause's ``:name`` placeholders become the drivers' ``%s`` (DB-API
  ``format`` style) by compiling the clause once with SQLAlchemy's own PyMySQL
  dialect (which also doubles a literal ``%``); the compiled form is cached per
  statement. An expanding IN list (``t.id IN :ids``) becomes one placeholder per
  item at each run, as SQLAlchemy does it on its own connections
  (``construct_expanded_state``). Values travel as bound parameters; no SQL is
  built from them.
- What a plan needs of an answer comes from the cursor: its rows (as tuples,
  whatever cursor class the connection defaults to: the cursor is our own, of the
  driver's plain class), ``rowcount`` and ``lastrowid``. A connection opened with
  ``CLIENT.FOUND_ROWS`` (Django's is) counts matched rather than changed rows: the
  producer's statements report the same either way (queries.sql, insert_task).
- Driver errors reach the caller as its driver raised them: it is the caller's
  transaction, and the caller's driver.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

import pymysql
from pymysql.cursors import Cursor
from sqlalchemy import TextClause
from sqlalchemy.dialects.mysql.pymysql import MySQLDialect_pymysql
from sqlalchemy.sql.compiler import Compiled

from ledgerq.ledger.mysql.answer import Answer

_DIALECT = MySQLDialect_pymysql()
_COMPILED: dict[TextClause, Compiled] = {}
#: The module of a mysqlclient connection (recognised without importing MySQLdb).
_MYSQLCLIENT = "MySQLdb."
_AIOMYSQL = "aiomysql."


def driver_sql(statement: TextClause, params: Mapping[str, Any]) -> tuple[str, tuple[Any, ...]]:
    """``statement`` in the drivers' ``%s`` style, its IN lists expanded for ``params``,
    and the positional values."""
    compiled = _COMPILED.get(statement)
    if compiled is None:
        compiled = _COMPILED[statement] = statement.compile(dialect=_DIALECT)
    state = compiled.construct_expanded_state(dict(params))  # type: ignore[attr-defined]
    return str(state.statement), tuple(state.positional_parameters)


def is_connection(obj: object) -> bool:
    """A sync DB-API connection to MySQL this module runs on (PyMySQL, mysqlclient)."""
    if isinstance(obj, pymysql.connections.Connection):
        return True
    return type(obj).__module__.startswith(_MYSQLCLIENT) and callable(getattr(obj, "cursor", None))


def is_async_connection(obj: object) -> bool:
    """An aiomysql connection."""
    return type(obj).__module__.startswith(_AIOMYSQL) and callable(getattr(obj, "cursor", None))


def is_django(obj: object) -> bool:
    """``django.db.connection`` (a ``ConnectionProxy``) or ``connections[alias]`` (a
    ``DatabaseWrapper``), recognised without importing Django."""
    return type(obj).__module__.startswith("django.") and callable(
        getattr(obj, "ensure_connection", None)
    )


def django_connection(obj: object, caller: str) -> object:
    """The DB-API connection under Django's connection ``obj``, opened if it was not
    yet (in autocommit, as Django opens it outside ``atomic()``; inside
    ``transaction.atomic()`` Django has turned autocommit off on it, so the task joins
    the block's transaction, and its savepoint in a nested block); anything else
    unchanged. Django on another backend than MySQL is refused."""
    if not is_django(obj):
        return obj
    vendor = getattr(obj, "vendor", None)
    if vendor != "mysql":
        kind = type(obj)
        raise TypeError(
            f"{caller}() takes Django's MySQL connection here; got {kind.__module__}."
            f"{kind.__qualname__} on Django's {vendor!r} backend (the ledger is in MySQL)"
        )
    obj.ensure_connection()  # type: ignore[attr-defined]
    return obj.connection  # type: ignore[attr-defined]


def _tuple_cursor_class(conn: object) -> Any:
    """The driver's plain cursor class (rows as tuples, whatever class the connection
    defaults to), taken from the module that made ``conn``: loaded, since it did."""
    if isinstance(conn, pymysql.connections.Connection):
        return Cursor
    package = type(conn).__module__.split(".", 1)[0]  # MySQLdb or aiomysql
    return sys.modules[f"{package}.cursors"].Cursor


def answer(conn: Any, statement: TextClause, params: Mapping[str, Any]) -> Answer:
    """Run ``statement`` on ``conn`` without committing: its rows, count and new id."""
    sql, values = driver_sql(statement, params)
    cursor = conn.cursor(_tuple_cursor_class(conn))
    try:
        cursor.execute(sql, values)
        rows = [tuple(r) for r in cursor.fetchall()] if cursor.description else []
        return Answer(rows, int(cursor.rowcount), int(cursor.lastrowid or 0) or None)
    finally:
        cursor.close()


async def aanswer(conn: Any, statement: TextClause, params: Mapping[str, Any]) -> Answer:
    """:func:`answer` on an aiomysql connection."""
    sql, values = driver_sql(statement, params)
    cursor = await conn.cursor(_tuple_cursor_class(conn))
    try:
        await cursor.execute(sql, values)
        rows = [tuple(r) for r in await cursor.fetchall()] if cursor.description else []
        return Answer(rows, int(cursor.rowcount), int(cursor.lastrowid or 0) or None)
    finally:
        await cursor.close()
