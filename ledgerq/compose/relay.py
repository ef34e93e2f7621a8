"""The relay, composed: :func:`open_relay` builds one for one database of the
ledger (its broker connection, its ledger with the relay's planner settings, its
publisher with confirms); :func:`serve_relay` is ``ledgerq relay``: one relay
loop per ledger shard in one process, each woken by LISTEN on its database,
until SIGTERM or until the schema is lost (then :class:`SchemaMissingError`
after the loops have stopped). On MySQL / MariaDB (no LISTEN) each shard's loop
polls (:class:`Polled`), every :data:`MYSQL_POLL_S` at most.

The stop signals are caught before anything connects: a SIGTERM while
PostgreSQL or RabbitMQ does not answer yet abandons the start-up and exits 0 at
once. A running relay stops within its grace whatever state it is in (a batch
in hand, a back-off after a failed batch, a wait for work)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from functools import partial
from typing import TYPE_CHECKING, Any

from ledgerq.broker.aio import AioPublisher, connect
from ledgerq.compose.ledgers import (
    one_shard,
    schema_watched,
    topology,
    warn_if_no_autovacuum,
)
from ledgerq.compose.monitoring import monitoring, stop_event, watch_readiness
from ledgerq.compose.storage import check_schema
from ledgerq.core.config import Settings
from ledgerq.faults import probe_from_env
from ledgerq.health import Health
from ledgerq.hooks import Hooks
from ledgerq.hooks.probes import Probe
from ledgerq.ledger.observer import NO_OBSERVER, Observer
from ledgerq.ledger.pg import PgLedger
from ledgerq.ledger.pg.engines import RELAY_SESSION, async_engine
from ledgerq.ledger.pg.notify import Wakeup
from ledgerq.ledger.protocol import RelayLedger
from ledgerq.relay.service import Relay, RelayConfig
from ledgerq.runtime import SchemaWatch, off_loop, unless_stopped

if TYPE_CHECKING:
    from ledgerq.ledger.mysql import MyLedger

log = logging.getLogger("ledgerq")

#: Seconds a stopping relay gives the batch in hand (``ledgerq relay --grace``).
GRACE_S = 10.0
#: On MySQL / MariaDB, the longest a relay waits between batches (no LISTEN there:
#: an enqueue or a claim that frees window room is found by the next poll).
MYSQL_POLL_S = 0.1


class Polled:
    """The relay's wake-up where the database cannot notify (MySQL / MariaDB): set
    only by a stop; :meth:`wait` returns after :data:`MYSQL_POLL_S` at most (or
    the relay's own poll interval, if shorter), so the relay polls."""

    def __init__(self) -> None:
        self.event = asyncio.Event()

    def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass

    async def wait(self, timeout: float) -> bool:
        try:
            await asyncio.wait_for(self.event.wait(), min(timeout, MYSQL_POLL_S))
        except TimeoutError:
            return False
        self.event.clear()
        return True


def _relay_ledger(database: Settings) -> PgLedger | MyLedger:
    """The relay's ledger on ``database`` (the MySQL modules imported only for a
    MySQL URL: a PostgreSQL relay never loads them)."""
    if database.on_mysql:
        from ledgerq.ledger.mysql import MyLedger  # a MySQL URL only
        from ledgerq.ledger.mysql import engines as my_engines

        return MyLedger(my_engines.async_engine(database, "ledgerq-relay", pool_size=2))
    return PgLedger(async_engine(database, "ledgerq-relay", pool_size=2, planner=RELAY_SESSION))


@asynccontextmanager
async def open_relay(
    settings: Settings,
    config: RelayConfig | None = None,
    *,
    probe: Probe | None = None,
    watch: SchemaWatch | None = None,
    observer: Observer = NO_OBSERVER,
    health: Health | None = None,
    shard: int | None = None,
    checked: bool = False,
) -> AsyncIterator[Relay]:
    """A relay of ledger shard ``shard`` (or of the only database) ready to run; with
    ``health``, its readiness is watched from now on. ``checked``: the caller has
    checked the schema already."""
    database = one_shard(settings, shard, "a relay (pass its ledger shard)")
    if not checked:
        await off_loop(partial(check_schema, settings))
    connection = await connect(
        settings.amqp_url,
        wait_s=settings.connect_wait_s,
        name="ledgerq-relay" if shard is None else f"ledgerq-relay-{shard}",
        ssl_context=settings.amqp_ssl_context(),
    )
    ledger = _relay_ledger(database)
    publisher = AioPublisher(connection, topology(settings))
    relay_ledger: RelayLedger = schema_watched(ledger, watch)
    try:
        relay = Relay(
            relay_ledger,
            publisher,
            config or RelayConfig(),
            Hooks(probe=probe or probe_from_env(), observer=observer),
        )
        await warn_if_no_autovacuum(ledger)
        watch_readiness(
            health,
            ledger,
            connection,
            lambda: "the last publish batch failed" if relay.failing else None,
            database_url=database.database_url,
        )
        yield relay
    finally:
        await publisher.close()
        await connection.close()
        await ledger.dispose()


async def serve_relay(
    settings: Settings,
    config: RelayConfig,
    metrics_port: int = 0,
    shards: Sequence[int] | None = None,
    grace_s: float = GRACE_S,
) -> None:
    """``ledgerq relay``: publish due rows until SIGTERM (or until the schema is lost:
    then :class:`SchemaMissingError`). With a metrics port (else the setting's),
    metrics and health are served on it. ``shards``: the ledger shards to serve, one
    relay loop each in this process (default: every shard).

    SIGTERM in every state (docs/howto.md, "Shut down gracefully"): during start-up
    (PostgreSQL or RabbitMQ not answering yet) the start-up is abandoned and the
    relay exits at once; in a back-off after a failed batch it exits at once; a
    batch in hand gets ``grace_s`` to finish (publish, confirms, mark), then is
    abandoned: its transaction rolls back and its rows stay ``pending`` (a message
    confirmed meanwhile is published again later: a duplicate delivery, which the
    claim's fence makes harmless)."""
    count = settings.ledger_shard_count
    served = list(range(count)) if shards is None else list(shards)
    for shard in served:
        settings.ledger_shard(shard)  # a ConfigError for a shard the list lacks
    watch = SchemaWatch()
    async with (
        monitoring(metrics_port or settings.metrics_port, "relay") as (observer, health),
        contextlib.AsyncExitStack() as stack,
    ):
        wakeups: list[Wakeup | Polled] = [
            Polled() if settings.on_mysql else Wakeup(settings.ledger_shard(shard))
            for shard in served
        ]
        # The stop signals are caught before anything connects.
        stop = stop_event(*(w.event.set for w in wakeups), *([health.stopping] if health else []))
        watch.on_loss(stop.set)

        async def start() -> list[Relay]:
            await off_loop(partial(check_schema, settings))  # the loop hears SIGTERM meanwhile
            return [
                await stack.enter_async_context(
                    open_relay(
                        settings,
                        config,
                        watch=watch,
                        observer=observer,
                        health=health,
                        shard=shard if count > 1 else None,
                        checked=True,
                    )
                )
                for shard in served
            ]

        relays = await unless_stopped(stop, start())
        if relays is None:
            log.info("stop requested during start-up; exiting")
            return
        for wakeup in wakeups:
            watch.on_loss(wakeup.event.set)
            wakeup.start()
        try:
            loops = asyncio.gather(
                *(relay.run(stop, wakeup) for relay, wakeup in zip(relays, wakeups, strict=True))
            )
            await _within_grace(loops, stop, grace_s)
        finally:
            for wakeup in wakeups:
                await wakeup.stop()
    watch.raise_if_lost()


async def _within_grace(loops: asyncio.Future[Any], stop: asyncio.Event, grace_s: float) -> None:
    """Wait for the relay loops; once ``stop`` is set, for ``grace_s`` more at most,
    then cancel them (the batch in hand rolls back)."""

    async def grace_over() -> None:
        await stop.wait()
        await asyncio.sleep(grace_s)

    timer: asyncio.Future[Any] = asyncio.ensure_future(grace_over())
    try:
        await asyncio.wait({loops, timer}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        timer.cancel()
    if not loops.done():
        log.warning(
            "the batch in hand did not finish within the grace (%gs); abandoned: its rows "
            "stay pending and are published again",
            grace_s,
        )
        loops.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await loops
        return
    loops.result()  # a loop's error (a lost schema, a configuration error) is raised
