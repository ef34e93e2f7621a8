"""Which implementation of the seam's transaction-scoped part serves a caller's
transaction: PostgreSQL's (:mod:`ledgerq.ledger.pg.tx`) or MySQL's
(:mod:`ledgerq.ledger.mysql.tx`), told by the dialect the caller's SQLAlchemy
Session or Connection is bound to, or by the driver of a raw DB-API connection: a
PyMySQL, mysqlclient (``MySQLdb``) or aiomysql connection, or Django's connection
on its MySQL backend (``vendor == "mysql"``, MariaDB's too), is MySQL's, told by
the module of its class (no driver, nor Django, is imported here). Anything else
(a raw psycopg connection, Django's on PostgreSQL) is PostgreSQL's, which
accepts or refuses it.

The producer's ``enqueue``, the worker's writes in a handler's transaction
(:mod:`ledgerq.ledger.within`) and the operator's in-transaction API
(:mod:`ledgerq.ledger.operations`) ask here; neither implementation is imported
until a caller needs it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection
from sqlalchemy.exc import UnboundExecutionError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession, async_scoped_session
from sqlalchemy.orm import Session, scoped_session

if TYPE_CHECKING:
    from ledgerq.ledger.protocol import AsyncTxLedger, TxLedger

MYSQL_DIALECTS = frozenset({"mysql", "mariadb"})
#: The modules of the raw MySQL drivers' connections (PyMySQL, mysqlclient, aiomysql).
MYSQL_DRIVER_MODULES = ("pymysql.", "MySQLdb.", "aiomysql.")


def dialect_name(executor: object) -> str | None:
    """The dialect a SQLAlchemy executor is bound to; None for anything else (or a
    Session bound to nothing yet)."""
    target: Any = executor
    if isinstance(target, scoped_session | async_scoped_session):
        target = target()
    try:
        if isinstance(target, Connection | AsyncConnection):
            return str(target.dialect.name)
        if isinstance(target, Session | AsyncSession):
            return str(target.get_bind().dialect.name)
    except UnboundExecutionError:
        return None
    return None


def on_mysql(executor: object) -> bool:
    """Whether ``executor`` is on a MySQL / MariaDB database: a SQLAlchemy executor of
    a MySQL dialect, a raw MySQL driver's connection, or Django's on its MySQL
    backend."""
    if dialect_name(executor) in MYSQL_DIALECTS:
        return True
    module = type(executor).__module__
    if module.startswith(MYSQL_DRIVER_MODULES):
        return True
    return module.startswith("django.") and getattr(executor, "vendor", None) == "mysql"


def tx_for(executor: object, caller: str) -> TxLedger:
    """The transaction-scoped part on the caller's sync ``executor``."""
    if on_mysql(executor):
        from ledgerq.ledger.mysql.tx import MyTx

        return MyTx(executor, caller)
    from ledgerq.ledger.pg.tx import PgTx

    return PgTx(executor, caller)  # type: ignore[arg-type]


def atx_for(executor: object, caller: str) -> AsyncTxLedger:
    """The transaction-scoped part on the caller's async ``executor``."""
    if on_mysql(executor):
        from ledgerq.ledger.mysql.tx import MyAsyncTx

        return MyAsyncTx(executor, caller)
    from ledgerq.ledger.pg.tx import PgAsyncTx

    return PgAsyncTx(executor, caller)  # type: ignore[arg-type]
