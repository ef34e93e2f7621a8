"""The reconciler, composed: :func:`open_reconciler` builds one for one database
of the ledger (its ledger with the reconciler's planner settings and a session
connection for its advisory lock, a blocking publisher with confirms, retention
from the settings, the dashboard's rollup: the maintenance loop and its
services, :mod:`ledgerq.relay.maintenance`); :func:`serve_reconciler` is
``ledgerq reconcile``: one pass over every shard, or one every N seconds until
SIGTERM. On MySQL / MariaDB the same reconciler runs on
:class:`~ledgerq.ledger.mysql.MyLedger` (one per shard, MySQL's named lock), its
expiry and waiting-task steps included (:mod:`ledgerq.ledger.mysql.reconcile`),
and its rollup (:mod:`ledgerq.ledger.mysql.rollup`).

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
from typing import TYPE_CHECKING, Protocol

from ledgerq.alerting.alerts import AlertHook
from ledgerq.broker.blocking import ThreadedPublisher
from ledgerq.compose.alerting import alert_hook
from ledgerq.compose.ledgers import one_shard, topology, warn_if_no_autovacuum
from ledgerq.compose.monitoring import stop_event
from ledgerq.compose.storage import check_schema
from ledgerq.core.config import Settings
from ledgerq.hooks import Hooks
from ledgerq.ledger.outages import Outage, ends_loop, pause
from ledgerq.ledger.pg import PgLedger
from ledgerq.ledger.pg.engines import RECONCILER_PLANNER, async_engine, session_engine
from ledgerq.relay.reconciler import ReconcileCounts, Reconciler, ReconcilerConfig
from ledgerq.relay.retention import Retention, RetentionConfig
from ledgerq.relay.rollup import Rollup

if TYPE_CHECKING:
    from ledgerq.ledger.mysql import MyLedger

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


def _reconciler_ledger(database: Settings) -> PgLedger | MyLedger:
    """The reconciler's ledger on ``database``: on PostgreSQL with its planner settings
    and a session connection for its advisory lock; on MySQL / MariaDB (its modules
    imported only for a MySQL URL) the named lock rides on a connection of its own."""
    if database.on_mysql:
        from ledgerq.ledger.mysql import MyLedger  # a MySQL URL only
        from ledgerq.ledger.mysql import engines as my_engines

        return MyLedger(my_engines.async_engine(database, "ledgerq-reconciler", pool_size=3))
    return PgLedger(
        async_engine(database, "ledgerq-reconciler", pool_size=2, planner=RECONCILER_PLANNER),
        sessions=session_engine(database, "ledgerq-reconciler-lock"),
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
    ledger = _reconciler_ledger(database)
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
        # The dashboard's rollup, on PostgreSQL and on MySQL / MariaDB alike.
        rollup = Rollup(ledger)
        reconciler = Reconciler(ledger, publisher, config, Hooks(alert=alert), retention, rollup)
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
