"""What ``enqueue`` runs its statements on: the caller's open transaction, from any stack.

A producer hands ``enqueue`` (or ``aenqueue``) the handle of its own transaction.
Accepted, and nothing else:

- by ``enqueue`` and ``enqueue_many``: a SQLAlchemy ``Session`` (or a
  ``scoped_session``, such as Flask-SQLAlchemy's ``db.session``: its current
  Session) or ``Connection``, or a psycopg 3 ``psycopg.Connection`` (a plain
  psycopg application's), or Django's connection (``django.db.connection`` or
  ``connections[alias]``, on its PostgreSQL backend over psycopg 3: its open
  psycopg connection is used, in whatever ``transaction.atomic()`` block it is in);
- by ``aenqueue`` and ``aenqueue_many``: a SQLAlchemy ``AsyncSession`` (or an
  ``async_scoped_session``) or ``AsyncConnection``, or a ``psycopg.AsyncConnection``.

On the MySQL ledger (a MySQL-dialect Session or Connection, or a MySQL driver's
connection: :mod:`ledgerq.ledger.binds` tells), :mod:`ledgerq.ledger.mysql.plans`
takes the executor instead: the SQLAlchemy ones, a PyMySQL or mysqlclient
(``MySQLdb``) connection or Django's connection on its MySQL backend
(:mod:`ledgerq.ledger.mysql.raw`), and an aiomysql connection for ``aenqueue``.

Each becomes a *runner*: one statement and its parameters in, the rows out as
tuples. A runner never begins, commits or rolls back, so the task joins the
caller's transaction whatever the stack. Anything else is a ``TypeError`` that
names what is accepted, raised before any statement runs.

psycopg is imported (with :mod:`ledgerq.ledger.pg.raw`) only when the executor
is not a SQLAlchemy one, so ``import ledgerq`` does not pay for it and the
driver stays inside ``ledger/pg/``. Django is never imported: its connection is
recognised by its module and unwrapped through its own attributes
(``ensure_connection()``, then ``.connection``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

from sqlalchemy import Connection, TextClause
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession, async_scoped_session
from sqlalchemy.orm import Session, scoped_session

if TYPE_CHECKING:
    from psycopg import AsyncConnection as PsycopgAsyncConnection
    from psycopg import Connection as PsycopgConnection


class DBAPIConnection(Protocol):
    """A PEP 249 connection, as the MySQL ledger takes one raw (PyMySQL's,
    mysqlclient's: :mod:`ledgerq.ledger.mysql.raw`); typed by shape, so no driver is
    imported here."""

    @property
    def cursor(self) -> Callable[..., Any]: ...

    def commit(self) -> None: ...  # (an async connection's returns a coroutine)

    def rollback(self) -> None: ...


Executor: TypeAlias = (
    "Session | scoped_session[Any] | Connection | PsycopgConnection[Any] | DBAPIConnection"
)
AsyncExecutor: TypeAlias = (
    "AsyncSession | async_scoped_session[Any] | AsyncConnection | PsycopgAsyncConnection[Any]"
)

Rows = Sequence[Sequence[Any]]
Runner = Callable[[TextClause, Mapping[str, Any]], Rows]
AsyncRunner = Callable[[TextClause, Mapping[str, Any]], Awaitable[Rows]]

SYNC_ACCEPTED = (
    "a SQLAlchemy Session, scoped_session or Connection, or a psycopg.Connection (psycopg 3)"
)
ASYNC_ACCEPTED = (
    "a SQLAlchemy AsyncSession, async_scoped_session or AsyncConnection, "
    "or a psycopg.AsyncConnection (psycopg 3)"
)
_DJANGO_HINT = ": with Django, pass django.db.connection inside transaction.atomic()"
_DJANGO_ASYNC_HINT = (
    ": Django's database connections are sync: call enqueue() (from async code, through "
    "asgiref's sync_to_async)"
)
_PSYCOPG2_HINT = ": ledgerq takes psycopg 3 (Django 4.2+ uses it when it is installed)"


def _rejected(caller: str, executor: object, accepted: str, hint: str = "") -> TypeError:
    kind = type(executor)
    if not hint and (executor is None or kind.__module__.startswith("django.")):
        hint = _DJANGO_HINT  # the wrapper itself, or its connection before it opened
    return TypeError(
        f"{caller}() takes {accepted} in an open transaction; "
        f"got {kind.__module__}.{kind.__qualname__}{hint}"
    )


def _is_django_connection(executor: object) -> bool:
    """``django.db.connection`` (a ``ConnectionProxy``) or ``connections[alias]`` (a
    ``DatabaseWrapper``), recognised without importing Django."""
    return type(executor).__module__.startswith("django.") and callable(
        getattr(executor, "ensure_connection", None)
    )


def _django_psycopg(executor: Any, caller: str) -> object:
    """The psycopg connection under Django's ``executor``, opened if it was not yet (in
    autocommit, as Django opens it outside ``atomic()``). Inside ``transaction.atomic()``
    Django has already turned autocommit off on it, so the task joins the block's
    transaction (and its savepoint, in a nested block)."""
    if executor.vendor != "postgresql":
        kind = type(executor)
        raise TypeError(
            f"{caller}() takes Django's PostgreSQL connection; got {kind.__module__}."
            f"{kind.__qualname__} on Django's {executor.vendor!r} backend (the ledger is "
            "in PostgreSQL)"
        )
    executor.ensure_connection()
    return executor.connection


def runner(executor: object, caller: str) -> Runner:
    """How ``caller`` (``enqueue``, ``enqueue_many``) runs a statement on ``executor``."""
    if isinstance(executor, scoped_session):
        executor = executor()
    if _is_django_connection(executor):
        executor = _django_psycopg(executor, caller)
    if isinstance(executor, Session | Connection):
        sa_executor = executor

        def run(statement: TextClause, params: Mapping[str, Any]) -> Rows:
            return sa_executor.execute(statement, params).all()

        return run
    if isinstance(executor, AsyncSession | AsyncConnection | async_scoped_session):
        raise _rejected(caller, executor, SYNC_ACCEPTED, f": use a{caller}() for it")
    from ledgerq.ledger.pg import raw

    if raw.is_connection(executor):
        return partial(raw.rows, executor)
    if raw.is_async_connection(executor):
        raise _rejected(caller, executor, SYNC_ACCEPTED, f": use a{caller}() for it")
    if type(executor).__module__.startswith("psycopg2"):
        raise _rejected(caller, executor, SYNC_ACCEPTED, _PSYCOPG2_HINT)
    raise _rejected(caller, executor, SYNC_ACCEPTED)


def async_runner(executor: object, caller: str) -> AsyncRunner:
    """How ``caller`` (``aenqueue``, ``aenqueue_many``) runs a statement on ``executor``."""
    if isinstance(executor, async_scoped_session):
        executor = executor()
    if isinstance(executor, AsyncSession | AsyncConnection):
        sa_executor = executor

        async def run(statement: TextClause, params: Mapping[str, Any]) -> Rows:
            return (await sa_executor.execute(statement, params)).all()

        return run
    sync_name = caller.removeprefix("a")
    if isinstance(executor, Session | Connection | scoped_session):
        raise _rejected(caller, executor, ASYNC_ACCEPTED, f": use {sync_name}() for it")
    if _is_django_connection(executor):
        raise _rejected(caller, executor, ASYNC_ACCEPTED, _DJANGO_ASYNC_HINT)
    from ledgerq.ledger.pg import raw

    if raw.is_async_connection(executor):
        return partial(raw.arows, executor)
    if raw.is_connection(executor):
        raise _rejected(caller, executor, ASYNC_ACCEPTED, f": use {sync_name}() for it")
    raise _rejected(caller, executor, ASYNC_ACCEPTED)
