"""Engines for the MySQL / MariaDB ledger, and the check every command makes first.

One URL names the ledger: ``mysql+pymysql://`` or ``mariadb+pymysql://``
(PyMySQL, for the sync paths: migrations, the producer's sync engine, the
handlers' sync sessions). The async paths (the services' own statements, async
handlers) run on aiomysql, whose URL is derived here by swapping the driver:
aiomysql is PyMySQL's protocol code under asyncio, so both paths raise the same
error classes with the same error numbers and convert values the same way
(docs/design.md, "MySQL and MariaDB").

Every connection ledgerq opens itself is set up the same way, once, on connect:

- ``time_zone = '+00:00'``: the ledger's timestamps are ``DATETIME(6)`` in UTC.
  The statements write ``UTC_TIMESTAMP(6)`` (never ``NOW()``), so a producer's
  connection in another time zone writes the same values, and every parameter
  is bound as naive UTC (:func:`utc`).
- ``READ COMMITTED`` (SQLAlchemy's ``isolation_level``): no gap locks, and
  each statement sees what committed before it (the claims' reasons are in
  :mod:`ledgerq.ledger.mysql.services`).
- ``innodb_lock_wait_timeout``: a statement waits at most that long for a row
  lock, then fails (error 1205, transient). On MariaDB also
  ``max_statement_time`` and ``idle_transaction_timeout`` (the equivalents of
  PostgreSQL's statement and idle-in-transaction timeouts, from the same
  settings); MySQL 8.0 has neither for writes, so there the lock wait is the
  only guard. The MariaDB-only part rides in a ``/*M! ... */`` comment, which
  MySQL skips.
- a strict ``sql_mode``: a value that does not fit fails instead of being cut.

:func:`check_server` is how every command first meets the server: it keeps
trying for ``Settings.connect_wait_s`` while the server cannot be reached, and
fails at once when it answers "no" (refused credentials, no such database) or
is too old (:class:`~ledgerq.core.errors.UnsupportedServerError`: MariaDB
before 10.6, MySQL before 8.0, which lack ``FOR UPDATE SKIP LOCKED`` or
``JSON_TABLE``).
"""

from __future__ import annotations

import logging
import re
import time
import weakref
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pymysql
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from ledgerq.core.config import Settings
from ledgerq.core.errors import (
    CredentialsRefusedError,
    SchemaError,
    ServiceUnavailableError,
    UnsupportedServerError,
    first_line,
)
from ledgerq.core.masking import mask_text, mask_url, secrets_of

log = logging.getLogger("ledgerq")

SERVICE = "MySQL"
#: The oldest servers with ``FOR UPDATE SKIP LOCKED`` and ``JSON_TABLE``.
MIN_MARIADB = (10, 6)
MIN_MYSQL = (8, 0)
#: MySQL's error numbers for a server that answered "no".
ACCESS_DENIED = frozenset({1045, 1044, 1698})
UNKNOWN_DATABASE = 1049
#: Seconds between attempts while the server cannot be reached.
RETRY_EVERY_S = 0.5
#: Read committed, for every connection ledgerq opens (see the module docstring).
ISOLATION = "READ COMMITTED"
_VERSION = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+))?")


def async_url(database_url: str) -> str:
    """The aiomysql URL of a PyMySQL one (``mysql+pymysql://`` -> ``mysql+aiomysql://``)."""
    url = make_url(database_url)
    return url.set(drivername=f"{url.get_backend_name()}+aiomysql").render_as_string(
        hide_password=False
    )


def utc(value: datetime | None) -> datetime | None:
    """A timestamp as the ledger binds it: naive, in UTC (``DATETIME(6)``)."""
    if value is None or value.tzinfo is None:
        return value
    return value.astimezone(UTC).replace(tzinfo=None)


def init_command(settings: Settings) -> str:
    """The session settings every connection ledgerq opens runs once, on connect."""
    lock_s = max(1, int(settings.statement_timeout_ms // 1000))
    statement_s = settings.statement_timeout_ms / 1000
    idle_s = max(1, int(settings.idle_in_transaction_timeout_ms // 1000))
    return (
        "SET time_zone = '+00:00', "
        "sql_mode = 'STRICT_TRANS_TABLES,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION', "
        f"innodb_lock_wait_timeout = {lock_s}"
        f" /*M!100300 , max_statement_time = {statement_s:g}, "
        f"idle_transaction_timeout = {idle_s} */"
    )


def _options(settings: Settings, pool_size: int) -> dict[str, Any]:
    return {
        "pool_size": pool_size,
        "max_overflow": 0,
        "isolation_level": ISOLATION,
        "connect_args": {"init_command": init_command(settings), "connect_timeout": 5},
    }


def sync_engine(settings: Settings, application_name: str, pool_size: int = 5) -> Engine:
    """A PyMySQL engine on the ledger (``application_name`` is PostgreSQL's; MySQL
    has no such connection attribute through PyMySQL, so it is not sent)."""
    del application_name
    return create_engine(settings.database_url, **_options(settings, pool_size))


def async_engine(settings: Settings, application_name: str, pool_size: int = 5) -> AsyncEngine:
    """An aiomysql engine on the ledger (the URL's driver swapped: :func:`async_url`)."""
    del application_name
    engine = create_async_engine(async_url(settings.database_url), **_options(settings, pool_size))
    _SETTINGS[engine] = settings
    return engine


#: The settings each engine of :func:`async_engine` was made from, for its
#: autocommit sibling (:func:`autocommit_engine`).
_SETTINGS: weakref.WeakKeyDictionary[AsyncEngine, Settings] = weakref.WeakKeyDictionary()


def autocommit_engine(engine: AsyncEngine) -> AsyncEngine:
    """A small engine of its own, in autocommit from each connection's start, beside
    ``engine`` (made by :func:`async_engine`): for a session's named lock
    (``GET_LOCK``) and DDL, which must not sit inside a transaction.

    Not ``engine.execution_options(isolation_level="AUTOCOMMIT")``: that switches a
    pooled connection to autocommit at each checkout and back at its return, and
    a connection killed during either switch was left to the garbage collector
    ("non-checked-in connection", an ERROR line) instead of going back to the
    pool invalidated. Here no switch happens: the pool's connections are made in
    autocommit and stay so."""
    settings = _SETTINGS.get(engine)
    if settings is None:
        raise TypeError("autocommit_engine() takes an engine made by async_engine()")
    options = _options(settings, pool_size=1)
    options.update(max_overflow=1, isolation_level="AUTOCOMMIT")
    return create_async_engine(engine.url, **options)


@dataclass(frozen=True)
class Server:
    """What answered: ``mariadb`` or ``mysql``, and its version."""

    product: str
    version: tuple[int, int]
    text: str

    @classmethod
    def parse(cls, version_text: str) -> Server:
        match = _VERSION.match(version_text)
        numbers = (int(match[1]), int(match[2])) if match else (0, 0)
        product = "mariadb" if "mariadb" in version_text.lower() else "mysql"
        return cls(product, numbers, version_text)

    @property
    def minimum(self) -> tuple[int, int]:
        return MIN_MARIADB if self.product == "mariadb" else MIN_MYSQL

    @property
    def name(self) -> str:
        return "MariaDB" if self.product == "mariadb" else "MySQL"

    def check(self, url: str) -> None:
        """Raise :class:`UnsupportedServerError` if this server is too old."""
        if self.version < self.minimum:
            need = ".".join(map(str, self.minimum))
            raise UnsupportedServerError(
                f"{mask_url(url)} is {self.name} {self.text}; ledgerq needs {self.name} "
                f"{need} or later (FOR UPDATE SKIP LOCKED, JSON_TABLE): upgrade the server, "
                "or fix LEDGERQ_DATABASE_URL / --database-url"
            )


def server_url(database_url: str) -> URL:
    """The URL without its database (to create it, or to ask the version before it exists)."""
    return make_url(database_url)._replace(database=None)


def _refusal(exc: pymysql.MySQLError, url: str) -> Exception | None:
    """The error for a server that answered "no", or None if it did not answer."""
    number = exc.args[0] if exc.args and isinstance(exc.args[0], int) else None
    reason = mask_text(first_line(exc), secrets_of(url))
    if number in ACCESS_DENIED:
        return CredentialsRefusedError(SERVICE, url, reason)
    if number == UNKNOWN_DATABASE:
        return SchemaError(
            f"the database {make_url(url).database!r} does not exist at {mask_url(url)}: run "
            "`ledgerq migrate` (it creates the database), or fix LEDGERQ_DATABASE_URL / "
            "--database-url"
        )
    return None


def connect_waiting(settings: Settings, url: str | None = None) -> pymysql.Connection[Any]:
    """A PyMySQL connection to ``url`` (default: the ledger's database), tried for up to
    ``settings.connect_wait_s`` seconds while the server cannot be reached."""
    target = url or settings.database_url
    parts = make_url(target)
    deadline = time.monotonic() + settings.connect_wait_s
    waited = False
    while True:
        try:
            return pymysql.connect(
                host=parts.host or "127.0.0.1",
                port=parts.port or 3306,
                user=parts.username or "root",
                password=parts.password or "",
                database=parts.database,
                connect_timeout=5,
                init_command=init_command(settings),
                autocommit=True,
            )
        except pymysql.MySQLError as exc:
            refusal = _refusal(exc, target)
            if refusal is not None:
                raise refusal from exc
            reason = mask_text(first_line(exc), secrets_of(target))
            if time.monotonic() + RETRY_EVERY_S > deadline:
                if settings.connect_wait_s:
                    reason += f" (tried for {settings.connect_wait_s:g} s)"
                raise ServiceUnavailableError(SERVICE, target, reason) from exc
            if not waited:
                log.info(
                    "%s at %s does not answer yet (%s); trying for up to %g s",
                    SERVICE,
                    mask_url(target),
                    reason,
                    settings.connect_wait_s,
                )
            waited = True
        time.sleep(RETRY_EVERY_S)


def server_of(conn: pymysql.Connection[Any]) -> Server:
    with conn.cursor() as cursor:
        cursor.execute("SELECT VERSION()")
        row = cursor.fetchone()
    return Server.parse(str(row[0]) if row else "")


def check_server(settings: Settings, url: str | None = None) -> Server:
    """The server behind ``url`` (default: the ledger's), reachable and recent enough;
    else the one-line error (see the module docstring)."""
    target = url or settings.database_url
    with connect_waiting(settings, target) as conn:
        server = server_of(conn)
    server.check(target)
    return server


def engine_server(engine: Engine) -> Server:
    """The server an open engine reaches (for tests and tools that hold one)."""
    with engine.connect() as conn:
        return Server.parse(str(conn.execute(text("SELECT VERSION()")).scalar_one()))
