"""LISTEN/NOTIFY as a wake-up signal, never as the queue.

Notifications arrive only on commit, are lost with their connection, and do not
cross transaction-pooling proxies, so whoever waits on a :class:`Wakeup` also
polls. Behind a transaction pooler the listener uses the direct URL
(``LEDGERQ_DIRECT_DATABASE_URL``); without one it does not listen, and polling
alone finds the work. The listener reconnects with backoff and sets the event after every
reconnect, because anything may have committed while it was away; a lost
connection is logged once per outage, by the rule every loop shares
(:mod:`ledgerq.ledger.outages`).
"""

from __future__ import annotations

import asyncio
import logging

import psycopg
from psycopg import sql

from ledgerq.core.config import Settings
from ledgerq.ledger.outages import Outage
from ledgerq.ledger.pg.engines import libpq_url

log = logging.getLogger("ledgerq.ledger.notify")

CHANNEL = "ledgerq_enqueued"


class Wakeup:
    """An event set whenever a task is enqueued (and after each reconnect)."""

    def __init__(self, settings: Settings, event: asyncio.Event | None = None) -> None:
        """``event``: one to share with other wake-ups (a worker's, one per ledger shard)."""
        url = settings.session_database_url
        self._url = libpq_url(url) if url else None
        self.event = event or asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        #: Lost LISTEN connections, logged once per outage (polling goes on meanwhile).
        self.outage = Outage("LISTEN connection (polling meanwhile)", log)

    def start(self) -> None:
        if self._url is None:
            log.info(
                "LEDGERQ_DATABASE_POOLER is transaction and LEDGERQ_DIRECT_DATABASE_URL is "
                "unset: no LISTEN (it needs a session), polling only"
            )
            return
        self._task = asyncio.create_task(self._listen_forever(self._url), name="ledgerq-listen")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for a wake-up; return whether one came."""
        try:
            await asyncio.wait_for(self.event.wait(), timeout)
        except TimeoutError:
            return False
        self.event.clear()
        return True

    async def _listen_forever(self, url: str) -> None:
        while True:
            try:
                await self._listen_once(url)
            except (psycopg.Error, OSError) as exc:  # the connection, never our data
                await asyncio.sleep(self.outage.failed(exc, expected=True))

    async def _listen_once(self, url: str) -> None:
        async with await psycopg.AsyncConnection.connect(
            url, autocommit=True, connect_timeout=5
        ) as conn:
            await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(CHANNEL)))
            self.outage.succeeded()
            self.event.set()
            async for _ in conn.notifies():
                self.event.set()
