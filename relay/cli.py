"""``ledgerq relay`` (the long-running relay) and ``ledgerq reconcile`` (the cron job)."""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import threading

import click

from ledger.alerts import default_alert
from ledger.cli import cli, install_stop_handlers, pass_settings, run_service
from ledger.config import Settings
from ledger.db import async_engine, check_database, sync_engine
from ledger.maintenance import MaintenanceLedger
from ledger.notify import Wakeup
from ledger.store import AsyncLedger
from ledger.topology import Topology
from ledger.validation import check_name
from relay.amqp import ConfirmedPublisher, connect
from relay.blocking import BlockingConfirmedPublisher
from relay.reconciler import Reconciler, ReconcilerConfig
from relay.service import Relay, RelayConfig

log = logging.getLogger("relay")


async def serve_relay(settings: Settings, config: RelayConfig) -> None:
    check_database(settings)
    connection = await connect(
        settings.amqp_url, wait_s=settings.connect_wait_s, name="ledgerq-relay"
    )
    engine = async_engine(settings, "ledgerq-relay", pool_size=2)
    wakeup = Wakeup(settings)
    stop = asyncio.Event()

    def request_stop() -> None:
        stop.set()
        wakeup.event.set()

    install_stop_handlers(request_stop)
    publisher = ConfirmedPublisher(connection, Topology(settings.amqp_prefix))
    relay = Relay(AsyncLedger(engine), publisher, config)
    wakeup.start()
    try:
        await relay.run(stop, wakeup)
    finally:
        await wakeup.stop()
        await publisher.close()
        await connection.close()
        await engine.dispose()


@cli.command("relay")
@click.option("--batch-size", default=RelayConfig.batch_size, show_default=True)
@click.option(
    "--poll-interval",
    default=RelayConfig.poll_interval,
    show_default=True,
    help="Seconds between polls when no notification arrives.",
)
@click.option("--confirm-timeout", default=RelayConfig.confirm_timeout, show_default=True)
@pass_settings
def relay_command(
    settings: Settings, batch_size: int, poll_interval: float, confirm_timeout: float
) -> None:
    """Publish due tasks to RabbitMQ with publisher confirms (runs until SIGTERM)."""
    try:
        config = RelayConfig(batch_size, poll_interval, confirm_timeout)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc
    run_service(serve_relay(settings, config))


def _parse_queue_stalls(values: tuple[str, ...]) -> dict[str, float]:
    stalls: dict[str, float] = {}
    for value in values:
        name, sep, seconds = value.partition("=")
        try:
            check_name(name, "queue")
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--queue-stall") from exc
        try:
            stalls[name] = float(seconds)
        except ValueError:
            sep = ""
        if not sep or not name:
            raise click.BadParameter(
                f"expected QUEUE=SECONDS, got {value!r}", param_hint="--queue-stall"
            )
    return stalls


@cli.command("reconcile")
@click.option(
    "--every",
    type=click.FloatRange(min=1.0),
    default=None,
    help="Loop, one pass every SECONDS (default: one pass, then exit).",
)
@click.option(
    "--stall",
    "stall_s",
    default=ReconcilerConfig.stall_s,
    show_default=True,
    help="Seconds a published task may wait unclaimed before it is re-published.",
)
@click.option(
    "--queue-stall",
    multiple=True,
    metavar="QUEUE=SECONDS",
    help="A per-queue stall window (repeatable).",
)
@click.option("--page-size", default=ReconcilerConfig.page_size, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per pass.")
@pass_settings
def reconcile_command(
    settings: Settings,
    every: float | None,
    stall_s: float,
    queue_stall: tuple[str, ...],
    page_size: int,
    as_json: bool,
) -> None:
    """Re-publish stalled deliveries and expire dead leases (for a cron job)."""
    try:
        config = ReconcilerConfig(stall_s, _parse_queue_stalls(queue_stall), page_size)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc
    check_database(settings)
    engine = sync_engine(settings, "ledgerq-reconciler", pool_size=2)
    publisher = BlockingConfirmedPublisher(settings.amqp_url, Topology(settings.amqp_prefix))
    reconciler = Reconciler(MaintenanceLedger(engine), publisher, config, default_alert())
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        while True:
            counts = reconciler.run_once()
            click.echo(json.dumps(counts.as_dict()) if as_json else counts.line())
            if every is None or stop.wait(every):
                break
    finally:
        publisher.close()
        engine.dispose()
