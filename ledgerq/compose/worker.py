"""The worker, composed: :func:`open_worker` connects it (a broker connection,
or none with direct claims), gives it a pool of its own for its claims, finishes
and heartbeats (so they never queue behind handlers) and the handlers' engines,
per ledger shard; :func:`scheduling` writes the registry's rate limits, ordering
and fan-out callbacks into the ledger and runs the periodic enqueuer beside it;
:func:`serve_worker` is ``ledgerq worker``: one or more lanes until SIGTERM,
then a drain.

The stop signals are caught before anything connects, and the start-up runs
until it completes or a stop comes first (:func:`~ledgerq.runtime.unless_stopped`):
a SIGTERM while PostgreSQL or RabbitMQ does not answer yet, or during the
start-up registrations, abandons the start-up (what it opened is closed; a lane
already up drains as it closes) and the worker exits 0 at once, instead of after
the connect wait. Once up, a stop drains every lane within one grace, whatever
the broker and the database do meanwhile; outcomes that could not be written
within it end the process with one line and exit 69 (:class:`UndrainedError`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from typing import cast

from ledgerq.alerting.alerts import AlertHook
from ledgerq.broker.aio import AioConsumption, connect, is_connected
from ledgerq.compose.alerting import alert_hook
from ledgerq.compose.ledgers import topology, warn_if_no_autovacuum
from ledgerq.compose.monitoring import monitoring, stop_event, watch_readiness
from ledgerq.compose.storage import check_schema
from ledgerq.compose.worker_storage import WorkerHome, mysql_storage, pg_storage
from ledgerq.consumers.direct import DirectConfig, FallbackConfig
from ledgerq.consumers.periodic import CatchUp, PeriodicConfig, PeriodicEnqueuer
from ledgerq.consumers.registry import Registry
from ledgerq.consumers.sources import (
    BrokerSource,
    ClaimSource,
    Consume,
    DirectSource,
    FallbackSource,
    Feed,
    SourceFactory,
)
from ledgerq.consumers.worker import Worker, WorkerConfig
from ledgerq.core.config import Settings
from ledgerq.core.errors import LedgerqError
from ledgerq.faults import probe_from_env
from ledgerq.health import Health
from ledgerq.hooks import Hooks
from ledgerq.hooks.probes import Probe
from ledgerq.ledger.observer import NO_OBSERVER, Observer
from ledgerq.ledger.protocol import DirectLedger
from ledgerq.runtime import SchemaWatch, off_loop, unless_stopped

log = logging.getLogger("ledgerq")


@asynccontextmanager
async def scheduling(
    settings: Settings,
    ledger: WorkerHome,
    registry: Registry,
    watch: SchemaWatch | None = None,
) -> AsyncIterator[PeriodicEnqueuer | None]:
    """What a worker does for the other processes' scheduling: write its kinds' rate
    limits and ordering settings into the ledger (the relays meter and hold keys by
    them), and, if it has periodic kinds,
    run a :class:`PeriodicEnqueuer` beside it (every worker does; the ledger lets one
    task per period through) until the block ends. The enqueuer lives through a lost
    database; a lost schema ends it and, through ``watch``, stops the worker."""
    changed = await ledger.register_limits(registry.rate_limits())
    changed += await ledger.register_ordering(registry.orderings())
    changed += await ledger.register_sticky(registry.sticky_retries())
    changed += await ledger.register_children_done(registry.children_done())
    changed += await ledger.register_defaults(registry.defaults())
    if changed:
        log.info("scheduling settings written for %s", ", ".join(sorted(set(changed))))
    schedules = registry.schedules()
    if not schedules:
        yield None
        return
    catch_up = cast(CatchUp, settings.periodic_catch_up)  # validated by Settings
    enqueuer = PeriodicEnqueuer(ledger, schedules, PeriodicConfig(catch_up=catch_up))
    stop = asyncio.Event()

    async def run() -> None:
        with contextlib.nullcontext() if watch is None else watch.watching():
            await enqueuer.run(stop)

    loop = asyncio.create_task(run(), name="ledgerq-periodic")
    try:
        yield enqueuer
    finally:
        stop.set()
        await loop


def claim_source(
    settings: Settings,
    config: WorkerConfig,
    broker: tuple[Consume, Callable[[], bool]] | None,
    claims: DirectLedger,
    woken: asyncio.Event,
    direct: DirectConfig | None,
    fallback: FallbackConfig | None,
) -> tuple[SourceFactory, bool]:
    """Where the worker's claims come from (:mod:`ledgerq.consumers.sources`), and
    whether it claims from the ledger at all (so it LISTENs for enqueues): with
    no ``broker`` (its consume, and whether its connection is up), the ledger
    (``--direct``); else the broker, with a fallback to the ledger while it is
    down, unless ``fallback`` is None or the worker serves some kinds or shards
    only (it would claim the others directly:
    docs/guarantees.md, broker-down mode)."""
    if broker is None:
        chosen = direct or DirectConfig()
        return (lambda feed: DirectSource(feed, claims, woken, chosen)), True
    consume, up = broker
    if fallback is None or config.kinds or config.shards or config.auto_shards:

        def consumed(feed: Feed) -> ClaimSource:
            return BrokerSource(feed, consume)

        return consumed, False
    # No LISTEN on MySQL / MariaDB: the fallback's claims poll there, as --direct's do.
    poll_s = DirectConfig.default_poll_s(mysql=settings.on_mysql)
    checked = DirectConfig(aging_s=settings.priority_aging_s, poll_s=poll_s)
    after = fallback
    return (lambda feed: FallbackSource(feed, consume, claims, woken, checked, up, after)), True


@asynccontextmanager
async def open_worker(
    settings: Settings,
    registry: Registry,
    config: WorkerConfig | None = None,
    *,
    alert: AlertHook | None = None,
    probe: Probe | None = None,
    watch: SchemaWatch | None = None,
    observer: Observer = NO_OBSERVER,
    health: Health | None = None,
    direct: DirectConfig | None = None,
    fallback: FallbackConfig | None = FallbackConfig(),
) -> AsyncIterator[Worker]:
    """A started worker; on exit it drains (see :meth:`Worker.stop`) and disconnects.
    With ``direct`` it takes no broker connection and claims straight from the
    ledger, woken by LISTEN (consumers/direct.py); without, ``fallback`` (None: never)
    says when it claims from the ledger while the broker is away (broker-down mode).
    On MySQL / MariaDB both paths run the same way, the direct claims polling."""
    config = config or WorkerConfig()
    hooks = Hooks(alert or alert_hook(settings), probe or probe_from_env(), observer)
    await off_loop(partial(check_schema, settings))  # the loop hears SIGTERM meanwhile
    connection = (
        None
        if direct is not None
        else await connect(
            settings.amqp_url,
            wait_s=settings.connect_wait_s,
            name=f"ledgerq-{config.worker_id}",
            ssl_context=settings.amqp_ssl_context(),
        )
    )
    woken = asyncio.Event()
    storage = (
        mysql_storage(settings, config, watch)
        if settings.on_mysql
        else pg_storage(settings, config, watch, woken)
    )
    handlers_sync, handlers_async = storage.engines[0]
    broker = (
        None
        if connection is None
        else (
            partial(AioConsumption.consume, connection, topology(settings)),
            partial(is_connected, connection),
        )
    )
    source, woken_used = claim_source(
        settings, config, broker, storage.claims, woken, direct, fallback
    )
    worker = Worker(
        storage.worker_ledger,
        registry,
        config,
        source=source,
        sync_engine=handlers_sync,
        async_engine=handlers_async,
        hooks=hooks,
        shard_engines=storage.engines if len(storage.engines) > 1 else (),
        routing=storage.routing,
        windows=storage.windows,
    )
    try:
        if woken_used:
            for wakeup in storage.wakeups:
                wakeup.start()
        await worker.start()
        await warn_if_no_autovacuum(storage.ledger)
        watch_readiness(
            health,
            storage.ledger,
            connection,
            lambda: None if worker.consuming else "not consuming",
            database_url=settings.database_url,
        )
        async with scheduling(settings, storage.ledger, registry, watch):
            yield worker
    finally:
        if health is not None:
            health.stopping()
        await worker.stop()
        for wakeup in storage.wakeups:
            await wakeup.stop()
        if connection is not None:
            await connection.close()
        for claimer in storage.claimers:
            await claimer.dispose()
        for handlers_sync, handlers_async in storage.engines:
            await handlers_async.dispose()
            handlers_sync.dispose()
        await storage.ledger.dispose()


class UndrainedError(LedgerqError):
    """A stopped worker could not write some outcomes (the database stayed away past
    the grace): their leases lapse and the reconciler retries them. Exit 69."""

    exit_code = 69  # EX_UNAVAILABLE (ledgerq.cli.group)


@dataclass(frozen=True)
class Drained:
    """How a worker's stop went: what a clean exit could not settle."""

    #: Sync handlers whose thread is still running (past their timeout or the grace).
    threads_running: int = 0
    #: Outcomes the finishers gave back unwritten (their leases lapse; retried).
    unwritten: int = 0

    def problem(self) -> UndrainedError | None:
        if not self.unwritten:
            return None
        return UndrainedError(
            f"stopped with {self.unwritten} outcomes not written (the database did not "
            "answer within the grace): their leases lapse and `ledgerq reconcile` retries "
            "those tasks"
        )


async def serve_worker(
    settings: Settings,
    registry: Registry,
    config: WorkerConfig | Sequence[WorkerConfig],
    metrics_port: int = 0,
    direct: DirectConfig | None = None,
    fallback: FallbackConfig | None = FallbackConfig(),
) -> Drained:
    """``ledgerq worker``: run handlers until SIGTERM, then drain. Returns how the
    drain went (:class:`Drained`: sync handlers' threads still running, outcomes
    that could not be written). Raises :class:`SchemaMissingError` after draining
    if the schema was lost.
    With a metrics port (else the setting's), metrics and health are served on it.
    Several configs (``--queues fast=50,slow=2``) run as lanes of one process, each
    a worker of its own (claims, slots, prefetch, broker channel), sharing the
    metrics; readiness follows the first lane.

    SIGTERM in every state (docs/howto.md, "Shut down gracefully"): during start-up
    (PostgreSQL or RabbitMQ not answering yet, its registrations) the start-up is
    abandoned and the worker exits at once; once up, every lane drains within one
    grace whatever the broker and the database do meanwhile."""
    configs = [config] if isinstance(config, WorkerConfig) else list(config)
    watch = SchemaWatch()
    async with (
        monitoring(metrics_port or settings.metrics_port, "worker") as (observer, health),
        contextlib.AsyncExitStack() as lanes,
    ):
        # The stop signals are caught before anything connects: a SIGTERM while the
        # worker waits for a server, or registers, abandons the start-up.
        stop = stop_event(*([health.stopping] if health else []))
        watch.on_loss(stop.set)

        async def start() -> list[Worker]:
            return [
                await lanes.enter_async_context(
                    open_worker(
                        settings,
                        registry,
                        lane,
                        watch=watch,
                        observer=observer,
                        health=health if index == 0 else None,
                        direct=direct,
                        fallback=fallback,
                    )
                )
                for index, lane in enumerate(configs)
            ]

        started = await unless_stopped(stop, start())
        if started is None:
            log.info("stop requested during start-up; exiting")
            return Drained()
        workers = started
        await stop.wait()
        log.info("stop requested; draining")
        # Every lane drains at once: a stop takes one grace, not one per lane.
        await asyncio.gather(*(worker.stop() for worker in workers))
    watch.raise_if_lost()
    return Drained(
        threads_running=sum(worker.threads_running for worker in workers),
        unwritten=sum(worker.finisher.unwritten for worker in workers),
    )
