"""The reconciler, composed: :func:`open_reconciler` builds one for one database
of the ledger (its ledger with the reconciler's planner settings and a session
connection for its advisory lock, a blocking publisher with confirms, retention
from the settings, the dashboard's rollup: the maintenance loop and its
services, :mod:`ledgerq.relay.maintenance`); :func:`serve_reconciler` is
``ledgerq reconcile``: one pass over every shard, or one every N seconds until
SIGTERM. On MySQL / MariaDB only the rescue and retention are built:
:func:`serve_reconciler` runs them alone
(:class:`~ledgerq.relay.reconciler.RescueReconciler`), with no broker connection.

The loop (``--every N``) lives through a lost database as the relay does, by the
rule every loop shares (:mod:`ledgerq.ledger.outages`): a failed pass (a
terminated connection, idle between passes or in the middle of one, a database
restarting or refusing connections, a broker away) is logged once per outage
and tried again with back-off, within 5 s and never later than N, until one
works; then one every N seconds again. Only a configuration or schema error
ends it, with one line and exit 78. With ledger shards each shard's database
has a loop of its own, so one shard's outage delays no other's passes. A
single pass (no ``--every``, the cron job) fails with its error instead, exit
69 for a database or broker it cannot reach: the next run is its retry."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Protocol

from ledgerq.alerting.alerts import AlertHook
from ledgerq.broker.blocking import ThreadedPublisher
from ledgerq.compose.alerting import alert_hook
from ledgerq.compose.ledgers import one_shard, postgresql_only, topology, warn_if_no_autovacuum
from ledgerq.compose.monitoring import stop_event
from ledgerq.core.config import Settings
from ledgerq.hooks import Hooks
from ledgerq.ledger.outages import Outage, ends_loop, pause
from ledgerq.ledger.pg import PgLedger
from ledgerq.ledger.pg.engines import RECONCILER_PLANNER, async_engine, session_engine
from ledgerq.ledger.pg.migrate import check_schema
from ledgerq.relay.reconciler import (
    ReconcileCounts,
    Reconciler,
    ReconcilerConfig,
    RescueReconciler,
)
from ledgerq.relay.rescue import Rescuer
from ledgerq.relay.retention import Retention, RetentionConfig
from ledgerq.relay.rollup import Rollup

log = logging.getLogger("ledgerq.reconciler")


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
    postgresql_only(settings, "the reconciler")
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
        reconciler = Reconciler(
            ledger, publisher, config, Hooks(alert=alert), retention, Rollup(ledger)
        )
        await warn_if_no_autovacuum(ledger)
        yield reconciler
    finally:
        await publisher.close()
        await ledger.dispose()


async def serve_reconciler(
    settings: Settings,
    config: ReconcilerConfig,
    every: float | None,
    report: Callable[[ReconcileCounts], None],
) -> None:
    """``ledgerq reconcile``: one pass, or one every ``every`` seconds until SIGTERM.
    With ledger shards, each pass covers every shard in turn (one report each)."""
    count = settings.ledger_shard_count
    if settings.on_mysql:
        await _serve_mysql_rescue(settings, config, every, report)
        return
    check_schema(settings)
    async with contextlib.AsyncExitStack() as stack:
        reconcilers = [
            await stack.enter_async_context(
                open_reconciler(settings, config, shard=shard if count > 1 else None, checked=True)
            )
            for shard in range(count)
        ]
        if every is None:
            for reconciler in reconcilers:
                report(await reconciler.run_once())
            return
        stop = stop_event()
        names = (
            ["reconciler pass"]
            if count == 1
            else [f"reconciler pass (shard {k})" for k in range(count)]
        )

        async def loop(reconciler: Reconciler, name: str) -> None:
            try:
                await _every(reconciler, every, stop, report, Outage(name, log))
            except BaseException:
                stop.set()  # a configuration or schema error: the other shards stop too
                raise

        ended = await asyncio.gather(
            *(loop(r, n) for r, n in zip(reconcilers, names, strict=True)), return_exceptions=True
        )
        for result in ended:
            if isinstance(result, BaseException):
                raise result


async def _serve_mysql_rescue(
    settings: Settings,
    config: ReconcilerConfig,
    every: float | None,
    report: Callable[[ReconcileCounts], None],
) -> None:
    """``ledgerq reconcile`` on MySQL / MariaDB: the rescue alone, the one duty built
    there (:class:`RescueReconciler`); no broker connection (nothing is published)."""
    from ledgerq.ledger.mysql import MyLedger  # only for a MySQL URL: no MySQL driver otherwise
    from ledgerq.ledger.mysql import engines as my_engines
    from ledgerq.ledger.mysql.migrate import check_schema as my_check_schema

    my_check_schema(settings)
    ledger = MyLedger(my_engines.async_engine(settings, "ledgerq-reconciler", pool_size=2))
    try:
        reconciler = RescueReconciler(
            ledger,
            Rescuer(ledger, config.rescue()),
            Hooks(alert=alert_hook(settings)),
            Retention(ledger, retention_config(settings)),
        )
        if every is None:
            report(await reconciler.run_once())
            return
        await _every(reconciler, every, stop_event(), report, Outage("reconciler pass", log))
    finally:
        await ledger.dispose()


class Pass(Protocol):
    async def run_once(self) -> ReconcileCounts: ...


async def _every(
    reconciler: Pass,
    every: float,
    stop: asyncio.Event,
    report: Callable[[ReconcileCounts], None],
    outage: Outage,
) -> None:
    """One pass every ``every`` seconds until ``stop``, living through outages."""
    while not stop.is_set():
        try:
            counts = await reconciler.run_once()
        except Exception as exc:
            if ends_loop(exc):
                raise
            wait = min(outage.failed(exc), every)
        else:
            outage.succeeded()
            report(counts)
            wait = every
        await pause(stop, wait)
