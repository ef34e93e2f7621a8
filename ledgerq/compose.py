"""The composition root: every service built from :class:`Settings`, in one place.

The CLI, the demo, the benchmark and the tests all build the relay, the worker
and the reconciler through these factories, so the tests run the production
wiring. Each ``open_*`` is an async context manager that checks the services
it needs are reachable (one line of error if not), connects, builds the parts,
and on exit closes everything it opened, in order. Each ``serve_*`` is what a
``ledgerq`` command runs: the service's loop until SIGTERM.

Every ``open_*`` first checks the schema (:func:`check_schema`: PostgreSQL
reachable within the connect wait, the schema at this ledgerq's head), so a
service never starts on a ledger it cannot use. A running relay or worker whose
tables disappear meets :class:`SchemaMissingError` on its next statement; the
``serve_*`` functions watch for it (:class:`~ledgerq.runtime.SchemaWatch`), stop the service as
SIGTERM would, and raise it, so the process ends with one line ("run `ledgerq
migrate`") instead of retrying forever.

This is the one package that sees every other one (pgqueuer's "composition
root" exception to the layers).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from functools import partial
from typing import cast

from ledgerq.consumers.direct import DirectConfig, FallbackConfig
from ledgerq.consumers.periodic import CatchUp, PeriodicConfig, PeriodicEnqueuer
from ledgerq.consumers.registry import Registry
from ledgerq.consumers.worker import DirectSource, Worker, WorkerConfig
from ledgerq.faults import probe_from_env
from ledgerq.health import Health
from ledgerq.ledger.alerting.dotted import callable_channel
from ledgerq.ledger.alerting.email import SmtpConfig, email_channel
from ledgerq.ledger.alerting.webhook import webhook_channel
from ledgerq.ledger.alerts import AlertHook, Channel, fan_out
from ledgerq.ledger.config import Settings
from ledgerq.ledger.errors import ConfigError
from ledgerq.ledger.observer import NO_OBSERVER, Observer
from ledgerq.ledger.pg import PgLedger
from ledgerq.ledger.pg.base import first_line
from ledgerq.ledger.pg.engines import (
    DIRECT_PLANNER,
    RECONCILER_PLANNER,
    RELAY_PLANNER,
    WORKER_PLANNER,
    async_engine,
    session_engine,
    sync_engine,
)
from ledgerq.ledger.pg.migrate import check_schema
from ledgerq.ledger.pg.notify import Wakeup
from ledgerq.ledger.protocol import (
    DirectLedger,
    InspectionLedger,
    RelayLedger,
    RoutingLedger,
    SchedulingLedger,
    WorkerLedger,
)
from ledgerq.ledger.sharded import (
    OperatorLedger,
    ShardedDirectLedger,
    ShardedLedger,
    ShardedRouting,
    ShardedWorkerLedger,
)
from ledgerq.relay.broker.aio import (
    AioConsumption,
    AioPublisher,
    AmqpConnection,
    connect,
    is_connected,
)
from ledgerq.relay.broker.blocking import ThreadedPublisher
from ledgerq.relay.broker.topology import Topology
from ledgerq.relay.probes import Probe
from ledgerq.relay.reconciler import ReconcileCounts, Reconciler, ReconcilerConfig
from ledgerq.relay.retention import Retention, RetentionConfig
from ledgerq.relay.rollup import Rollup
from ledgerq.relay.service import Relay, RelayConfig
from ledgerq.runtime import SchemaWatch, WatchedLedger, on_stop_signal

log = logging.getLogger("ledgerq")


def alert_hook(settings: Settings) -> AlertHook:
    """The dead-task alert of a worker or reconciler: the log line, plus each channel
    the settings configure (checked now: a bad one is an AlertConfigError, exit 78)."""
    channels: list[Channel] = []
    if settings.alert_webhook:
        channels.append(webhook_channel(settings.alert_webhook))
    if settings.smtp_host and settings.alert_email_from:
        smtp = SmtpConfig(
            host=settings.smtp_host,
            sender=settings.alert_email_from,
            recipients=settings.alert_email_to,
            port=settings.smtp_port,
            tls=settings.smtp_tls,
            ca_file=settings.smtp_ca_file,
            user=settings.smtp_user,
            password=settings.smtp_password,
        )
        channels.append(email_channel(smtp))
    if settings.alert_callable:
        channels.append(callable_channel(settings.alert_callable))
    return fan_out(channels)


def _watched(ledger: PgLedger, watch: SchemaWatch | None) -> PgLedger | WatchedLedger:
    return ledger if watch is None else WatchedLedger(ledger, watch)


def one_shard(settings: Settings, shard: int | None, what: str) -> Settings:
    """The settings of ledger shard ``shard``; with None, of the only database, or a
    one-line :class:`ConfigError` naming ``what`` when the ledger is split."""
    if shard is None:
        if settings.ledger_shard_count > 1:
            raise ConfigError(
                f"{what} works on one ledger database, and LEDGERQ_DATABASE_URL lists "
                f"{settings.ledger_shard_count} (ledger shards): not supported yet with a "
                "split ledger (docs/howto.md, 'Split the ledger across databases')"
            )
        shard = 0
    return settings.ledger_shard(shard)


@asynccontextmanager
async def open_ledger(
    settings: Settings,
    application_name: str = "ledgerq",
    pool_size: int = 2,
    *,
    check: bool = True,
    shard: int | None = None,
    planner: tuple[str, ...] = (),
) -> AsyncIterator[PgLedger]:
    """The ledger of one database on its own (demo, benchmark, dashboard, tests):
    ledger shard ``shard``, or the only one. With ``check=False`` the schema is not
    checked first (tools that look at a broken ledger on purpose); ``planner``: a
    service's planner settings (ledger/pg/engines.py), for a tool that runs its
    statements."""
    database = one_shard(settings, shard, f"`{application_name}`")
    if check:
        check_schema(settings)
    ledger = PgLedger(
        async_engine(database, application_name, pool_size=pool_size, planner=planner)
    )
    try:
        yield ledger
    finally:
        await ledger.dispose()


@asynccontextmanager
async def open_operator_ledger(
    settings: Settings, application_name: str = "ledgerq", pool_size: int = 1
) -> AsyncIterator[OperatorLedger]:
    """What the operator's commands (``tasks``, ``stats``, ``show``, ``pause``, ``kinds``)
    act on: the ledger, every shard of it when it is split (:class:`ShardedLedger`)."""
    check_schema(settings)
    shards = [
        PgLedger(async_engine(database, application_name, pool_size=pool_size))
        for database in settings.ledger_shards()
    ]
    ledger: OperatorLedger = shards[0] if len(shards) == 1 else ShardedLedger(shards)
    try:
        yield ledger
    finally:
        await ledger.dispose()


async def warn_if_no_autovacuum(ledger: InspectionLedger) -> None:
    """Every service says, once it has started (so a start that fails prints only
    its one line), when autovacuum will not clean the hot table:
    without it each claim and finish leaves a dead tuple, and the table bloats
    (docs/performance.md § The hot table under churn)."""
    for reason in await ledger.autovacuum_off():
        log.warning(
            "%s: the hot table will bloat under churn; turn autovacuum on "
            "(see docs/performance.md, 'The hot table under churn')",
            reason,
        )


async def _readiness(
    ledger: InspectionLedger, connection: AmqpConnection | None, service: Callable[[], str | None]
) -> str | None:
    """Why a relay or worker is not ready (None: it is): see :mod:`ledgerq.health`.
    A direct worker (``connection`` None) needs only the ledger."""
    if connection is not None and not is_connected(connection):
        return "RabbitMQ: not connected (reconnecting)"
    try:
        if not await ledger.ping():
            return "PostgreSQL: the ledger's tables are missing (run `ledgerq migrate`)"
    except Exception as exc:
        return f"PostgreSQL: {first_line(exc)}"
    return service()


def _watch_readiness(
    health: Health | None,
    ledger: InspectionLedger,
    connection: AmqpConnection | None,
    service: Callable[[], str | None],
) -> None:
    if health is not None:
        health.watch(partial(_readiness, ledger, connection, service))


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
        check_schema(settings)
    connection = await connect(
        settings.amqp_url,
        wait_s=settings.connect_wait_s,
        name="ledgerq-relay" if shard is None else f"ledgerq-relay-{shard}",
        ssl_context=settings.amqp_ssl_context(),
    )
    ledger = PgLedger(async_engine(database, "ledgerq-relay", pool_size=2, planner=RELAY_PLANNER))
    publisher = AioPublisher(connection, topology(settings))
    relay_ledger: RelayLedger = _watched(ledger, watch)
    try:
        relay = Relay(
            relay_ledger,
            publisher,
            config or RelayConfig(),
            probe or probe_from_env(),
            observer=observer,
        )
        await warn_if_no_autovacuum(ledger)
        _watch_readiness(
            health,
            ledger,
            connection,
            lambda: "the last publish batch failed" if relay.failing else None,
        )
        yield relay
    finally:
        await publisher.close()
        await connection.close()
        await ledger.dispose()


@asynccontextmanager
async def scheduling(
    settings: Settings, ledger: SchedulingLedger, registry: Registry
) -> AsyncIterator[PeriodicEnqueuer | None]:
    """What a worker does for the other processes' scheduling: write its kinds' rate
    limits and ordering settings into the ledger (the relays meter and hold keys by
    them), and, if it has periodic kinds,
    run a :class:`PeriodicEnqueuer` beside it (every worker does; the ledger lets one
    task per period through) until the block ends."""
    changed = await ledger.register_limits(registry.rate_limits())
    changed += await ledger.register_ordering(registry.orderings())
    changed += await ledger.register_children_done(registry.children_done())
    if changed:
        log.info("scheduling settings written for %s", ", ".join(sorted(set(changed))))
    schedules = registry.schedules()
    if not schedules:
        yield None
        return
    catch_up = cast(CatchUp, settings.periodic_catch_up)  # validated by Settings
    enqueuer = PeriodicEnqueuer(ledger, schedules, PeriodicConfig(catch_up=catch_up))
    stop = asyncio.Event()
    loop = asyncio.create_task(enqueuer.run(stop), name="ledgerq-periodic")
    try:
        yield enqueuer
    finally:
        stop.set()
        await loop


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
    says when it claims from the ledger while the broker is away (broker-down mode)."""
    config = config or WorkerConfig()
    alert = alert or alert_hook(settings)
    check_schema(settings)
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
    # The worker's own statements (claim, finish, heartbeat) never queue behind
    # handlers: they have a pool of their own. Handlers' sessions share db_pool
    # connections (per kind of handler), so a worker's footprint is bounded. With
    # ledger shards, all of that once per shard: a task is claimed, run and
    # finished on the database its id names.
    databases = settings.ledger_shards()
    shards = [
        PgLedger(async_engine(db, "ledgerq-worker", pool_size=4, planner=WORKER_PLANNER))
        for db in databases
    ]
    engines = [
        (
            sync_engine(db, "ledgerq-worker-sync", pool_size=config.db_pool),
            async_engine(db, "ledgerq-worker-handlers", pool_size=config.db_pool),
        )
        for db in databases
    ]
    handlers_sync, handlers_async = engines[0]
    ledger: PgLedger | ShardedLedger = shards[0] if len(shards) == 1 else ShardedLedger(shards)
    watched = [_watched(shard, watch) for shard in shards]
    worker_ledger: WorkerLedger = watched[0] if len(shards) == 1 else ShardedWorkerLedger(watched)
    # What the worker serves is registered on every shard: each shard's relays
    # route by their own database's subscriptions.
    routing: RoutingLedger = watched[0] if len(shards) == 1 else ShardedRouting(watched)
    # Direct claims run select_due's selection: they need the relay's planner
    # settings and more (DIRECT_PLANNER, ledger/pg/engines.py), on a connection of
    # their own per shard (with several shards, each claim starts at the next one),
    # woken by LISTEN on every shard.
    woken = asyncio.Event()
    wakeups = [Wakeup(db, woken) for db in databases]
    claimers = [
        PgLedger(async_engine(db, "ledgerq-worker-direct", pool_size=1, planner=DIRECT_PLANNER))
        for db in databases
    ]
    claims: DirectLedger = claimers[0] if len(claimers) == 1 else ShardedDirectLedger(claimers)
    if connection is None:
        source: DirectSource | None = DirectSource(claims, woken, direct or DirectConfig())
    elif fallback is not None and not (config.kinds or config.shards):
        # (A worker that serves some kinds or shards only would claim the others
        # directly: it gets no fallback. docs/guarantees.md, broker-down mode.)
        source = DirectSource(
            claims,
            woken,
            DirectConfig(aging_s=settings.priority_aging_s),
            broker_up=partial(is_connected, connection),
            fallback=fallback,
        )
    else:
        source = None
    worker = Worker(
        worker_ledger,
        registry,
        config,
        consume=None
        if connection is None
        else partial(AioConsumption.consume, connection, topology(settings)),
        direct=source,
        sync_engine=handlers_sync,
        async_engine=handlers_async,
        alert=alert,
        probe=probe or probe_from_env(),
        observer=observer,
        shard_engines=engines if len(engines) > 1 else (),
        routing=routing,
    )
    try:
        if source is not None:
            for wakeup in wakeups:
                wakeup.start()
        await worker.start()
        await warn_if_no_autovacuum(ledger)
        _watch_readiness(
            health, ledger, connection, lambda: None if worker.consuming else "not consuming"
        )
        async with scheduling(settings, ledger, registry):
            yield worker
    finally:
        if health is not None:
            health.stopping()
        await worker.stop()
        for wakeup in wakeups:
            await wakeup.stop()
        if connection is not None:
            await connection.close()
        for claimer in claimers:
            await claimer.dispose()
        for handlers_sync, handlers_async in engines:
            await handlers_async.dispose()
            handlers_sync.dispose()
        await ledger.dispose()


def retention_config(settings: Settings) -> RetentionConfig:
    """Retention per terminal status, from ``LEDGERQ_RETENTION_<STATUS>_DAYS``."""
    return RetentionConfig.from_days(
        {
            "succeeded": settings.retention_succeeded_days,
            "dead": settings.retention_dead_days,
            "cancelled": settings.retention_cancelled_days,
        }
    )


@asynccontextmanager
async def open_reconciler(
    settings: Settings,
    config: ReconcilerConfig | None = None,
    *,
    alert: AlertHook | None = None,
    shard: int | None = None,
    checked: bool = False,
) -> AsyncIterator[Reconciler]:
    """The reconciler of ledger shard ``shard`` (or of the only database); each
    shard's holds that database's advisory lock."""
    config = config or ReconcilerConfig()
    alert = alert or alert_hook(settings)
    database = one_shard(settings, shard, "a reconciler (pass its ledger shard)")
    if not checked:
        check_schema(settings)
    ledger = PgLedger(
        async_engine(database, "ledgerq-reconciler", pool_size=2, planner=RECONCILER_PLANNER),
        sessions=session_engine(database, "ledgerq-reconciler-lock"),
    )
    try:
        publisher = await ThreadedPublisher.open(
            settings.amqp_url,
            topology(settings),
            config.confirm_timeout,
            settings.connect_wait_s,
            settings.amqp_ssl_context(),
        )
    except BaseException:
        await ledger.dispose()
        raise
    try:
        retention = Retention(ledger, retention_config(settings))
        reconciler = Reconciler(ledger, publisher, config, alert, retention, Rollup(ledger))
        await warn_if_no_autovacuum(ledger)
        yield reconciler
    finally:
        await publisher.close()
        await ledger.dispose()


def topology(settings: Settings) -> Topology:
    """The broker objects and messages of this deployment (its prefix, its queue type)."""
    return Topology(settings.amqp_prefix, settings.queue_type)


def _stop_event(*also: Callable[[], None]) -> asyncio.Event:
    stop = asyncio.Event()

    def request_stop() -> None:
        stop.set()
        for callback in also:
            callback()

    on_stop_signal(request_stop)
    return stop


@asynccontextmanager
async def monitoring(port: int, service: str) -> AsyncIterator[tuple[Observer, Health | None]]:
    """With a port: the service's metrics and its health, served on it (before the
    service connects: /readyz says "starting" meanwhile). Without: no-ops."""
    if not port:
        yield NO_OBSERVER, None
        return
    from ledgerq import metrics  # only now: prometheus_client loads with a metrics port only

    registry = metrics.new_registry()
    observer: Observer = (
        metrics.RelayMetrics(registry) if service == "relay" else metrics.WorkerMetrics(registry)
    )
    health = Health()
    server = metrics.MetricsServer(port, health, registry)
    health.start_ticking()
    log.info("%s: /metrics, /healthz and /readyz on port %d", service, server.port)
    try:
        yield observer, health
    finally:
        await health.close()
        server.close()


async def serve_relay(
    settings: Settings,
    config: RelayConfig,
    metrics_port: int = 0,
    shards: Sequence[int] | None = None,
) -> None:
    """``ledgerq relay``: publish due rows until SIGTERM (or until the schema is lost:
    then :class:`SchemaMissingError`). With a metrics port (else the setting's),
    metrics and health are served on it. ``shards``: the ledger shards to serve, one
    relay loop each in this process (default: every shard)."""
    count = settings.ledger_shard_count
    served = list(range(count)) if shards is None else list(shards)
    for shard in served:
        settings.ledger_shard(shard)  # a ConfigError for a shard the list lacks
    check_schema(settings)
    watch = SchemaWatch()
    async with (
        monitoring(metrics_port or settings.metrics_port, "relay") as (observer, health),
        contextlib.AsyncExitStack() as stack,
    ):
        relays = [
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
        wakeups = [Wakeup(settings.ledger_shard(shard)) for shard in served]
        stop = _stop_event(*(w.event.set for w in wakeups), *([health.stopping] if health else []))
        watch.on_loss(stop.set)
        for wakeup in wakeups:
            watch.on_loss(wakeup.event.set)
            wakeup.start()
        try:
            await asyncio.gather(
                *(relay.run(stop, wakeup) for relay, wakeup in zip(relays, wakeups, strict=True))
            )
        finally:
            for wakeup in wakeups:
                await wakeup.stop()
    watch.raise_if_lost()


async def serve_worker(
    settings: Settings,
    registry: Registry,
    config: WorkerConfig | Sequence[WorkerConfig],
    metrics_port: int = 0,
    direct: DirectConfig | None = None,
    fallback: FallbackConfig | None = FallbackConfig(),
) -> int:
    """``ledgerq worker``: run handlers until SIGTERM, then drain. Returns how many
    sync handlers' threads are still running (past their timeout or the grace).
    Raises :class:`SchemaMissingError` after draining if the schema was lost.
    With a metrics port (else the setting's), metrics and health are served on it.
    Several configs (``--queues fast=50,slow=2``) run as lanes of one process, each
    a worker of its own (claims, slots, prefetch, broker channel), sharing the
    metrics; readiness follows the first lane."""
    configs = [config] if isinstance(config, WorkerConfig) else list(config)
    watch = SchemaWatch()
    async with (
        monitoring(metrics_port or settings.metrics_port, "worker") as (observer, health),
        contextlib.AsyncExitStack() as lanes,
    ):
        # The stop signals are caught before the lanes start: a SIGTERM while they
        # register (subscriptions, limits, callbacks) stops the worker once it is up.
        stop = _stop_event(*([health.stopping] if health else []))
        watch.on_loss(stop.set)
        workers = [
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
        await stop.wait()
        log.info("stop requested; draining")
    watch.raise_if_lost()
    return sum(worker.threads_running for worker in workers)


async def serve_reconciler(
    settings: Settings,
    config: ReconcilerConfig,
    every: float | None,
    report: Callable[[ReconcileCounts], None],
) -> None:
    """``ledgerq reconcile``: one pass, or one every ``every`` seconds until SIGTERM.
    With ledger shards, each pass covers every shard in turn (one report each)."""
    count = settings.ledger_shard_count
    check_schema(settings)
    async with contextlib.AsyncExitStack() as stack:
        reconcilers = [
            await stack.enter_async_context(
                open_reconciler(settings, config, shard=shard if count > 1 else None, checked=True)
            )
            for shard in range(count)
        ]
        stop = _stop_event()
        while True:
            for reconciler in reconcilers:
                report(await reconciler.run_once())
            if every is None:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), every)
            if stop.is_set():
                return
