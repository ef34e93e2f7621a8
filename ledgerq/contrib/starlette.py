"""A Starlette / FastAPI lifespan: the application's async engine on the ledger's database.

::

    from fastapi import FastAPI, Request
    from ledgerq import aenqueue
    from ledgerq.contrib.starlette import lifespan

    app = FastAPI(lifespan=lifespan())  # LEDGERQ_DATABASE_URL, or lifespan("postgresql+psycopg://...")

    @app.post("/orders")
    async def place_order(request: Request) -> dict[str, int]:
        async with request.state.ledgerq.begin() as session:  # commits both, or neither
            ...
            return {"task_id": await aenqueue(session, "send_receipt", {"order_id": 7})}

At startup the lifespan creates a SQLAlchemy ``AsyncEngine`` (``create_async_engine``
with the given options) and puts a :class:`LedgerqState` in the lifespan state
(``request.state.ledgerq``); at shutdown it disposes the engine, closing its
connections. ``wrap`` runs the application's own lifespan inside it, its state
merged in. The URL is read and checked when :func:`lifespan` is called (a bad one
is a :class:`~ledgerq.core.errors.ConfigError` naming it), not at the first
request.

It uses Starlette's lifespan protocol only (a callable taking the app and returning
an async context manager that yields the state), so it imports neither Starlette
nor FastAPI, and works on any framework that speaks that protocol.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)

from ledgerq.core.config import ConfigError, Settings

#: The lifespan-state key (``request.state.ledgerq``).
STATE_KEY = "ledgerq"

#: An application's own lifespan (``wrap``): its state a mapping, or None.
Lifespan = Callable[[Any], AbstractAsyncContextManager[Mapping[str, Any] | None]]
#: The lifespan :func:`lifespan` returns: its state always a dict.
LedgerqLifespan = Callable[[Any], AbstractAsyncContextManager[dict[str, Any]]]


@dataclass(frozen=True)
class LedgerqState:
    """What the lifespan provides: the engine and a sessionmaker on it."""

    engine: AsyncEngine
    sessions: async_sessionmaker[AsyncSession]

    def begin(self) -> AbstractAsyncContextManager[AsyncSession]:
        """A new ``AsyncSession`` in a transaction, committed when the block ends
        (rolled back if it raises): ``async with state.begin() as session:``."""
        return self.sessions.begin()


def lifespan(
    database_url: str | None = None,
    *,
    wrap: Lifespan | None = None,
    state_key: str = STATE_KEY,
    **engine_options: Any,
) -> LedgerqLifespan:
    """A lifespan for ``Starlette(lifespan=...)`` or ``FastAPI(lifespan=...)``.

    ``database_url``: the ledger's database (``postgresql+psycopg://``; default
    ``LEDGERQ_DATABASE_URL``); one database: a ledger split across several
    (``ledgerq.Shards``) is refused. ``engine_options`` go to ``create_async_engine``
    (``pool_size``, ``echo``, ...). ``wrap``: the application's own lifespan, run
    inside this one (its engine is open for it), its state merged into this one's.
    """
    settings = Settings.from_env(database_url=database_url)
    if settings.ledger_shard_count > 1:
        raise ConfigError(
            "ledgerq.contrib.starlette.lifespan() opens one engine; the ledger is split "
            f"across {settings.ledger_shard_count} databases: enqueue through ledgerq.Shards"
        )
    url = settings.database_url

    @asynccontextmanager
    async def run(app: Any) -> AsyncIterator[dict[str, Any]]:
        engine = create_async_engine(url, **engine_options)
        ours = LedgerqState(engine, async_sessionmaker(engine, expire_on_commit=False))
        try:
            if wrap is None:
                yield {state_key: ours}
            else:
                async with wrap(app) as theirs:
                    yield {**(theirs or {}), state_key: ours}
        finally:
            await engine.dispose()

    return run
