"""``ledgerq relay``: the long-running relay process."""

from __future__ import annotations

import asyncio
import logging

import click

from ledger.cli import cli, install_stop_handlers, pass_settings
from ledger.config import Settings
from ledger.db import async_engine, check_database
from ledger.notify import Wakeup
from ledger.store import AsyncLedger
from ledger.topology import Topology
from relay.amqp import ConfirmedPublisher, connect
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
    config = RelayConfig(batch_size, poll_interval, confirm_timeout)
    asyncio.run(serve_relay(settings, config))
