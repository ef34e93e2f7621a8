"""What an admin function acts on, and how it opens it.

Every function of :mod:`ledgerq.admin` takes a *target* first: the
:class:`~ledgerq.core.config.Settings` the CLI builds (``Settings.from_env()``,
every shard of a split ledger), or a *bind* that names one database: a
SQLAlchemy ``Engine``/``AsyncEngine``, a ``Connection``/``AsyncConnection`` or
a ``Session``/``AsyncSession`` bound to one, a psycopg 3 connection (sync or
async), or a database URL string. A bind
is read for its URL only (password included; the driver becomes psycopg 3, or,
for a MySQL / MariaDB bind, PyMySQL);
the function opens its own short-lived connections through the composition
root (:func:`ledgerq.compose.open_operator_ledger`), exactly as the CLI does,
and commits its own work: to act inside a transaction you hold, use
:func:`ledgerq.act` and :func:`ledgerq.list_tasks` instead. The other settings
(connect wait, retention) come from the environment, as for the CLI.

The composition root is imported when a function runs, not when this module is
imported, so ``import ledgerq`` still loads no broker client.

Each async function has a sync twin that runs it on a fresh event loop; called
from a thread whose loop is running, the twin runs it on a worker thread
instead of failing (prefer the ``a``-prefixed function there).
"""

from __future__ import annotations

import asyncio
import functools
import getpass
from collections.abc import AsyncIterator, Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, ParamSpec, TypeAlias, TypeVar

from sqlalchemy import URL, Connection, Engine, make_url
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession
from sqlalchemy.orm import Session

from ledgerq.core.config import Settings
from ledgerq.core.urls import psycopg_url

if TYPE_CHECKING:
    import psycopg

    from ledgerq.ledger.split.ledger import OperatorLedger

#: What an admin function takes: settings, or one database's bind or URL (psycopg
#: is named for the type checker only: the driver is imported by the ledger alone).
Target: TypeAlias = (
    "Settings | Engine | AsyncEngine | Connection | AsyncConnection | Session | AsyncSession"
    " | psycopg.Connection[Any] | psycopg.AsyncConnection[Any] | str"
)

#: The ``application_name`` the admin API's connections carry (pg_stat_activity).
APPLICATION_NAME = "ledgerq-admin"

T = TypeVar("T")
P = ParamSpec("P")


def _url(bind: object) -> URL:
    if isinstance(bind, Session):
        bind = bind.get_bind()
    if isinstance(bind, AsyncSession):
        bind = bind.bind if bind.bind is not None else bind.sync_session.get_bind()
    if isinstance(bind, Connection | AsyncConnection):
        bind = bind.engine
    if isinstance(bind, Engine | AsyncEngine):
        return bind.url
    if isinstance(bind, str):
        return make_url(bind)
    if type(bind).__module__.startswith("psycopg") and hasattr(bind, "info"):
        return psycopg_url(getattr(bind, "info"))  # psycopg is not imported here
    raise TypeError(
        "target: expected Settings, a database URL, a psycopg connection, or a SQLAlchemy "
        "Engine, AsyncEngine, Connection, AsyncConnection, Session or AsyncSession; got "
        f"{type(bind).__name__}"
    )


def settings_of(target: Target) -> Settings:
    """The settings an admin function runs with: ``target`` itself, or the
    environment's with ``target``'s database URL."""
    if isinstance(target, Settings):
        return target
    url = _url(target)
    backend = url.get_backend_name()
    if backend in ("mysql", "mariadb"):  # the MySQL ledger, on its driver (PyMySQL)
        url = url.set(drivername=f"{backend}+pymysql")
    elif backend == "postgresql":
        url = url.set(drivername="postgresql+psycopg")
    else:
        raise TypeError(f"target: ledgerq's ledger is PostgreSQL, MySQL or MariaDB, not {backend}")
    return Settings.from_env(database_url=url.render_as_string(hide_password=False))


@asynccontextmanager
async def operator_ledger(target: Target) -> AsyncIterator[OperatorLedger]:
    """Every shard of the target's ledger, opened by the composition root (the schema
    checked first: :class:`~ledgerq.core.errors.SchemaError` if it is not at head)."""
    from ledgerq.compose import open_operator_ledger

    async with open_operator_ledger(settings_of(target), APPLICATION_NAME, 1) as ledger:
        yield ledger


def run_sync(work: Coroutine[Any, Any, T]) -> T:
    """Run ``work`` to its end from sync code (a running loop: on a worker thread)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(work)
    with ThreadPoolExecutor(1, thread_name_prefix="ledgerq-admin") as pool:
        return pool.submit(asyncio.run, work).result()


def sync_twin(work: Callable[P, Coroutine[Any, Any, T]]) -> Callable[P, T]:
    """The sync twin of admin coroutine function ``work`` (``apurge`` -> ``purge``):
    the same parameters, run through :func:`run_sync`."""

    @functools.wraps(work)
    def twin(*args: P.args, **kwargs: P.kwargs) -> T:
        return run_sync(work(*args, **kwargs))

    twin.__name__ = twin.__qualname__ = work.__name__.removeprefix("a")
    twin.__doc__ = f":func:`{work.__name__}`, from sync code."
    return twin


def os_user() -> str:
    """Who acts when no ``actor`` is given: the OS user (``unknown`` if none)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"
