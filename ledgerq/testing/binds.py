"""Which database a test's ``bind`` points at, and the engines the helpers use there.

A ``bind`` is anything :func:`~ledgerq.enqueue` or :func:`~ledgerq.aenqueue`
accepts (a SQLAlchemy ``Session``, ``scoped_session``, ``Connection``,
``AsyncSession``, ``async_scoped_session`` or ``AsyncConnection``, a psycopg 3
connection, Django's connection) or an ``Engine`` / ``AsyncEngine``.

:func:`~ledgerq.testing.drain` and :func:`~ledgerq.testing.advance` act as a
worker does, on connections of their own, so they see what is committed. They
reuse the caller's own engines where they can (so the handlers' ``ctx.session``
opens where the application's sessions do) and otherwise open engines on the
bind's URL (password included; the driver is psycopg 3 on PostgreSQL, PyMySQL
and aiomysql on MySQL / MariaDB, as ledgerq's own), which they dispose of before
returning. On MySQL the engines they open run at READ COMMITTED, as ledgerq's
own connections do (the direct claim reads its candidates, then locks them).
:func:`~ledgerq.testing.enqueued` reads through the bind itself, in the caller's
transaction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import URL, Connection, Engine, create_engine, make_url
from sqlalchemy.ext.asyncio import (
    AsyncConnection,
    AsyncEngine,
    AsyncSession,
    async_scoped_session,
    create_async_engine,
)
from sqlalchemy.orm import Session, scoped_session
from sqlalchemy.pool import NullPool

from ledgerq.core.urls import psycopg_url
from ledgerq.ledger.binds import MYSQL_DIALECTS
from ledgerq.ledger.results import mysql_url

ACCEPTED = (
    "a SQLAlchemy Engine, Connection, Session or scoped_session, their async "
    "counterparts, a psycopg 3 or PyMySQL connection or Django's connection"
)
#: The isolation of the engines the helpers open on MySQL (ledgerq's own level).
MYSQL_ISOLATION = "READ COMMITTED"


@dataclass(frozen=True)
class Target:
    """The database a bind points at: its URL (the sync driver ledgerq uses there:
    psycopg 3, or PyMySQL), and the caller's engines when the bind has them (None:
    the helper opens its own on ``url``)."""

    url: URL
    sync_engine: Engine | None = None
    async_engine: AsyncEngine | None = None

    @property
    def mysql(self) -> bool:
        return self.url.get_backend_name() in MYSQL_DIALECTS

    def _options(self) -> dict[str, Any]:
        return {"isolation_level": MYSQL_ISOLATION} if self.mysql else {}

    def open_sync(self) -> tuple[Engine, bool]:
        """A sync engine on the database, and whether the caller must dispose of it."""
        if self.sync_engine is not None:
            return self.sync_engine, False
        return create_engine(self.url, poolclass=NullPool, **self._options()), True

    def open_async(self, *, reuse: bool) -> tuple[AsyncEngine, bool]:
        """An async engine on the database (psycopg 3, or aiomysql: the caller's when
        ``reuse`` and it runs on that driver), and whether the caller must dispose of it."""
        driver = "aiomysql" if self.mysql else "psycopg"
        mine = self.async_engine
        if reuse and mine is not None and mine.dialect.driver == driver:
            return mine, False
        url = self.url.set(drivername=f"{self.url.get_backend_name()}+{driver}")
        return create_async_engine(url, poolclass=NullPool, **self._options()), True


def _sync_url(url: URL) -> URL:
    backend = url.get_backend_name()
    if backend in MYSQL_DIALECTS:
        return url.set(drivername=f"{backend}+pymysql")
    return url.set(drivername="postgresql+psycopg")


def _unwrap(bind: object) -> object:
    if isinstance(bind, scoped_session | async_scoped_session):
        return bind()
    if type(bind).__module__.startswith("django.") and callable(
        getattr(bind, "ensure_connection", None)
    ):  # Django's connection: its driver's connection (Django is never imported)
        wrapper: Any = bind
        wrapper.ensure_connection()
        return wrapper.connection
    return bind


def resolve(bind: object, caller: str) -> Target:
    """The :class:`Target` of ``bind``; TypeError naming what is accepted."""
    bind = _unwrap(bind)
    if isinstance(bind, Session):
        bind = bind.get_bind()
    if isinstance(bind, AsyncSession):
        bind = bind.bind if bind.bind is not None else bind.sync_session.get_bind()
    if isinstance(bind, Connection):
        bind = bind.engine
    if isinstance(bind, AsyncConnection):
        bind = bind.engine
    if isinstance(bind, Engine):
        sync = None if bind.dialect.is_async else bind
        return Target(_sync_url(bind.url), sync_engine=sync)
    if isinstance(bind, AsyncEngine):
        return Target(_sync_url(bind.url), async_engine=bind)
    if type(bind).__module__.startswith("psycopg") and hasattr(bind, "info"):
        info: Any = getattr(bind, "info")  # psycopg is not imported here
        return Target(psycopg_url(info))
    on_mysql = mysql_url(bind)  # a PyMySQL connection (Django's on PyMySQL unwrapped above)
    if on_mysql is not None:
        return Target(make_url(on_mysql))
    kind = type(bind)
    raise TypeError(f"{caller}() takes {ACCEPTED}; got {kind.__module__}.{kind.__qualname__}")


def in_transaction(bind: object) -> bool:
    """Whether ``bind`` (a transaction-level handle) has a transaction open now."""
    bind = _unwrap(bind)
    if isinstance(bind, Session | Connection | AsyncSession | AsyncConnection):
        return bind.in_transaction()
    status = getattr(getattr(bind, "info", None), "transaction_status", None)
    return status is not None and int(status) != 0  # psycopg's TransactionStatus.IDLE
