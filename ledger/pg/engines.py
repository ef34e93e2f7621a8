"""Engines for the connections ledgerq opens itself, and a reachability check.

No pre-ping on checkout (it would cost a round trip per statement): a pooled
connection that died fails its next statement, SQLAlchemy discards it, and the
caller's retry (every service loop has one) gets a fresh one.

Producers bring their own engine; these are for the relay, the consumers, the
reconciler and the CLI. Every connection carries a statement timeout and an
idle-in-transaction timeout, so a stuck client cannot hold locks or stop vacuum.
"""

from __future__ import annotations

from typing import Any

import psycopg
from sqlalchemy import Engine, create_engine
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from ledgerq.ledger.config import Settings
from ledgerq.ledger.errors import ServiceUnavailableError
from ledgerq.ledger.pg.base import first_line


def _engine_options(settings: Settings, application_name: str, pool_size: int) -> dict[str, Any]:
    """A pool of at most ``pool_size`` connections (callers past that wait for one),
    each with the server-side guards set."""
    options = (
        f"-c statement_timeout={int(settings.statement_timeout_ms)} "
        f"-c idle_in_transaction_session_timeout={int(settings.idle_in_transaction_timeout_ms)}"
    )
    return {
        "pool_size": pool_size,
        "max_overflow": 0,
        "connect_args": {
            "options": options,
            "application_name": application_name,
            "connect_timeout": 5,
        },
    }


def sync_engine(settings: Settings, application_name: str, pool_size: int = 5) -> Engine:
    return create_engine(
        settings.database_url, **_engine_options(settings, application_name, pool_size)
    )


def async_engine(settings: Settings, application_name: str, pool_size: int = 5) -> AsyncEngine:
    return create_async_engine(
        settings.database_url, **_engine_options(settings, application_name, pool_size)
    )


def libpq_url(database_url: str) -> str:
    """The SQLAlchemy URL as a plain libpq URL, for raw psycopg connections."""
    return make_url(database_url).set(drivername="postgresql").render_as_string(hide_password=False)


def display_url(database_url: str) -> str:
    return make_url(database_url).render_as_string(hide_password=True)


def check_database(settings: Settings) -> None:
    """Raise :class:`ServiceUnavailableError` unless PostgreSQL answers."""
    try:
        with psycopg.connect(libpq_url(settings.database_url), connect_timeout=5) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        raise ServiceUnavailableError(
            "PostgreSQL", display_url(settings.database_url), first_line(exc)
        ) from exc
