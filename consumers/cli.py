"""``ledgerq worker`` and the ``ledgerq`` entry point (the top of the layering)."""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import sys
import threading

import click

import consumers.bench.command
import consumers.demo  # noqa: F401  (registers ``ledgerq demo``)
import relay.cli  # noqa: F401  (registers ``ledgerq relay``)
from consumers.registry import Registry, default_registry
from consumers.worker import Worker, WorkerConfig
from ledger.alerts import default_alert
from ledger.cli import cli, install_stop_handlers, pass_settings, run_cli, run_service
from ledger.config import Settings
from ledger.db import async_engine, check_database, sync_engine
from ledger.errors import LedgerqError
from ledger.store import AsyncLedger
from ledger.topology import Topology
from relay.amqp import connect

log = logging.getLogger("consumers")


class AppImportError(LedgerqError):
    """``--app`` names a module that cannot be imported."""


def load_app(module: str) -> Registry:
    """Import the user's module so its ``@task`` decorators run."""
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        importlib.import_module(module)
    except ImportError as exc:
        raise AppImportError(f"cannot import --app {module!r}: {exc}") from exc
    if not len(default_registry):
        raise AppImportError(f'--app {module!r} registered no handlers (use @task("kind"))')
    return default_registry


async def serve_worker(settings: Settings, registry: Registry, config: WorkerConfig) -> None:
    check_database(settings)
    connection = await connect(
        settings.amqp_url, wait_s=settings.connect_wait_s, name=f"ledgerq-{config.worker_id}"
    )
    # The worker's own statements (claim, finish, heartbeat) never queue behind
    # handlers: they have a pool of their own. Handlers' sessions share db_pool
    # connections (per kind of handler), so a worker's footprint is bounded.
    internal = async_engine(settings, "ledgerq-worker", pool_size=4)
    aengine = async_engine(settings, "ledgerq-worker-handlers", pool_size=config.db_pool)
    sengine = sync_engine(settings, "ledgerq-worker-sync", pool_size=config.db_pool)
    worker = Worker(
        AsyncLedger(internal),
        registry,
        Topology(settings.amqp_prefix),
        config,
        sync_engine=sengine,
        async_engine=aengine,
        alert=default_alert(),
    )
    stop = asyncio.Event()
    install_stop_handlers(stop.set)
    await worker.start(connection)
    try:
        await stop.wait()
        log.info("stop requested; draining")
    finally:
        await worker.stop()
        await connection.close()
        await aengine.dispose()
        await internal.dispose()
        sengine.dispose()


@cli.command("worker")
@click.option("--app", "app", required=True, help="Module whose @task handlers to run.")
@click.option(
    "--queues",
    default="default",
    show_default=True,
    help="Comma-separated ledger queues to consume.",
)
@click.option("--concurrency", default=WorkerConfig.concurrency, show_default=True)
@click.option("--prefetch", default=0, show_default=True, help="0 means 2 x concurrency.")
@click.option(
    "--db-pool",
    default=WorkerConfig.db_pool,
    show_default=True,
    help="Database connections handlers' ctx.session may use at once.",
)
@click.option("--lease", "lease_s", default=WorkerConfig.lease_s, show_default=True)
@click.option(
    "--default-timeout",
    default=WorkerConfig.default_timeout_s,
    show_default=True,
    help="Seconds an attempt may run when neither the task nor its @task sets a timeout "
    "(0: no limit).",
)
@click.option(
    "--grace",
    "grace_s",
    default=WorkerConfig.grace_s,
    show_default=True,
    help="Seconds in-flight tasks get to finish after SIGTERM.",
)
@pass_settings
def worker_command(
    settings: Settings,
    db_pool: int,
    default_timeout: float,
    app: str,
    queues: str,
    concurrency: int,
    prefetch: int,
    lease_s: float,
    grace_s: float,
) -> None:
    """Run handlers for tasks delivered from RabbitMQ (runs until SIGTERM)."""
    registry = load_app(app)
    names = tuple(q.strip() for q in queues.split(",") if q.strip())
    try:
        config = WorkerConfig(
            queues=names,
            concurrency=concurrency,
            prefetch=prefetch,
            db_pool=db_pool,
            lease_s=lease_s,
            heartbeat_s=lease_s / 4,
            grace_s=grace_s,
            default_timeout_s=default_timeout or None,
        )
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc
    run_service(serve_worker(settings, registry, config))
    stuck = [
        t for t in threading.enumerate() if t.name.startswith("ledgerq-handler") and t.is_alive()
    ]
    if stuck:
        log.warning("%d sync handlers still running past the grace; exiting anyway", len(stuck))
        logging.shutdown()
        os._exit(0)


def main() -> None:
    run_cli(cli)


if __name__ == "__main__":
    main()
