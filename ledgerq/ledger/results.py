"""How a task ended, for whoever waits for it: :class:`TaskResult`, :func:`result`, :func:`aresult`.

``result(bind, task_id, timeout=30)`` returns once the task is terminal
(``succeeded``, ``dead`` or ``cancelled``), with the handler's JSON return value
(``value``), the error of its last attempt and its times; ``aresult`` is the
same for async code. Neither waits inside the caller's transaction: ``bind``
only says which database holds the task, and the wait runs on connections of
its own, so an open transaction is never held for it (and a task enqueued in
a transaction that has not committed yet is not found: commit first).

``bind`` is anything ``enqueue`` takes (a Session, a Connection, a psycopg
connection, Django's connection) or an ``Engine``/``AsyncEngine``, an
``AsyncSession``/``AsyncConnection``, a database URL, or a
:class:`~ledgerq.ledger.split.router.Shards` router: with ledger shards, the task's
id names its shard (:mod:`ledgerq.ledger.split.ids`) and the router's database
for it is read.

On MySQL and MariaDB (a bind of a MySQL dialect, a PyMySQL connection,
Django's connection on its MySQL backend) there is no NOTIFY: the waiter polls
its task on a connection of its own, at first every 10 ms and up to every
``poll_s`` (:mod:`ledgerq.ledger.mysql.results`).

Waiting (PostgreSQL): the waiter registers with its database's registry
(:mod:`ledgerq.ledger.pg.waiters`: one per database per process, one listening
connection and one reading connection however many wait), then reads the task
once. Every statement that ends tasks sends one ``NOTIFY ledgerq_ended`` with
their ids on commit (the ``finish`` and ``cancel_queued`` statements, and
``ledgerq_release`` for the dependents it cancels: migration 0022); the
registry reads the ended ones of its waiters in one statement and hands each
its result. Notifications are a wake-up, not a record (lost with a connection,
absent behind PgBouncer's transaction pooling), so the registry also reads all
its waiters every ``poll_s`` (one statement for all of them).

Races: the waiter registers *before* its first read, so a task ending between
the two is either seen by the read or notified after it. A task that an operator
retries from history is live again: a waiter that has not returned yet keeps
waiting. An id in neither table (never committed, rolled back, or purged by
retention, before or during the wait) raises
:class:`~ledgerq.core.errors.TaskNotFoundError` at once, never a hang.
"""

from __future__ import annotations

import asyncio
from typing import Any

from sqlalchemy import URL, Connection, Engine, make_url
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession
from sqlalchemy.orm import Session, scoped_session

from ledgerq.ledger.split.ids import shard_of_id
from ledgerq.ledger.task_result import TaskResult as TaskResult
from ledgerq.ledger.task_result import not_found

#: How often a registry reads all its waiters when no notification comes (seconds).
DEFAULT_POLL_S = 1.0


def conninfo(bind: Any, task_id: int) -> str:
    """A libpq connection string (password included) for the database ``bind``
    names for ``task_id``; TypeError naming what is accepted for anything else."""
    from ledgerq.ledger.pg import raw
    from ledgerq.ledger.pg.engines import libpq_url
    from ledgerq.ledger.split.router import Shards

    if isinstance(bind, Shards):
        shard = shard_of_id(task_id)
        if shard >= bind.count:
            raise not_found(task_id)
        return libpq_url(bind.urls[shard])
    if isinstance(bind, str | URL):
        return libpq_url(make_url(bind).render_as_string(hide_password=False))
    if isinstance(bind, scoped_session):
        bind = bind()
    if isinstance(bind, Session):
        bind = bind.get_bind()
    if isinstance(bind, AsyncSession):
        bind = bind.bind
    if isinstance(bind, Connection | AsyncConnection | AsyncEngine | Engine):
        return libpq_url(bind.engine.url.render_as_string(hide_password=False))

    found = raw.connection_url(bind)
    if found is None:
        kind = type(bind)
        raise TypeError(
            "result() takes what enqueue() takes (a SQLAlchemy Session, Connection or "
            "AsyncSession, a psycopg connection, Django's connection), an Engine or "
            "AsyncEngine, a database URL, or a ledgerq.Shards router; got "
            f"{kind.__module__}.{kind.__qualname__}"
        )
    return found


def mysql_url(bind: Any) -> str | None:
    """The URL (password included) of the MySQL / MariaDB database ``bind`` is on, or
    None when it is not on one: a SQLAlchemy bind or URL of a MySQL dialect, a
    PyMySQL connection, or Django's connection on its MySQL backend (on PyMySQL)."""
    from ledgerq.ledger.binds import MYSQL_DIALECTS

    if isinstance(bind, str | URL):
        url = make_url(bind)
        backend = url.get_backend_name()
        if backend not in MYSQL_DIALECTS:
            return None
        # the waiter opens its own connections, sync (PyMySQL) or async (aiomysql)
        return url.set(drivername=f"{backend}+pymysql").render_as_string(False)
    engine: Any = bind
    if isinstance(engine, scoped_session):
        engine = engine()
    if isinstance(engine, Session):
        engine = engine.get_bind()
    if isinstance(engine, AsyncSession):
        engine = engine.bind
    if isinstance(engine, Connection | AsyncConnection | AsyncEngine | Engine):
        return mysql_url(engine.engine.url)
    return _raw_mysql_url(bind)


def _raw_mysql_url(bind: Any) -> str | None:
    """:func:`mysql_url` of a raw connection: PyMySQL's, or Django's on PyMySQL."""
    if type(bind).__module__.startswith("django.") and getattr(bind, "vendor", None) == "mysql":
        bind.ensure_connection()
        bind = bind.connection
    if not type(bind).__module__.startswith("pymysql."):
        return None
    from ledgerq.ledger.mysql.results import connection_url

    return connection_url(bind)


def _check_timeout(timeout: float | None) -> float | None:
    if timeout is not None and not timeout >= 0:
        raise ValueError(f"result(timeout=...) is seconds, 0 or more, or None; got {timeout!r}")
    return timeout


def result(
    bind: Any, task_id: int, *, timeout: float | None = 30.0, poll_s: float = DEFAULT_POLL_S
) -> TaskResult:
    """Wait until task ``task_id`` is terminal and return how it ended.

    ``timeout`` seconds (None: no limit) then :class:`TimeoutError`;
    :class:`~ledgerq.core.errors.TaskNotFoundError` if the task is not in the
    ledger; ``poll_s``: how often the registry reads when no notification comes
    (the first waiter on a database sets it)."""
    limit = _check_timeout(timeout)
    on_mysql = mysql_url(bind)
    if on_mysql is not None:
        from ledgerq.core.config import Settings
        from ledgerq.ledger.mysql.results import wait

        return wait(Settings(database_url=on_mysql), task_id, limit, poll_s)
    from ledgerq.ledger.pg.waiters import registry

    return registry(conninfo(bind, task_id), poll_s).wait(task_id, limit)


async def aresult(
    bind: Any, task_id: int, *, timeout: float | None = 30.0, poll_s: float = DEFAULT_POLL_S
) -> TaskResult:
    """:func:`result` for async code: the event loop is never blocked."""
    limit = _check_timeout(timeout)
    on_mysql = mysql_url(bind)
    if on_mysql is not None:
        from ledgerq.core.config import Settings
        from ledgerq.ledger.mysql.results import await_result

        return await await_result(Settings(database_url=on_mysql), task_id, limit, poll_s)
    from ledgerq.ledger.pg.waiters import registry

    waiters = registry(conninfo(bind, task_id), poll_s)
    return await waiters.await_result(task_id, limit, asyncio.get_running_loop())
