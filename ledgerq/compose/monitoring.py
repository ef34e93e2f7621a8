"""What every long-running service is watched and stopped by: its metrics and
health endpoints (:func:`monitoring`), its readiness (the ledger's database
reachable and migrated, RabbitMQ connected, and the service's own word), and the
stop event that SIGTERM and SIGINT set. A readiness message names the ledger's
server as its URL does (:func:`server_name`): "PostgreSQL: ...", "MySQL: ..." or
"MariaDB: ...".

The checks themselves, and how often they run, are :mod:`ledgerq.health`'s;
this module only says what "ready" means for a relay and for a worker."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from typing import Protocol

from ledgerq.broker.aio import AmqpConnection, is_connected
from ledgerq.core.errors import first_line
from ledgerq.health import Health
from ledgerq.ledger.observer import NO_OBSERVER, Observer
from ledgerq.runtime import on_stop_signal

log = logging.getLogger("ledgerq")


def server_name(database_url: str) -> str:
    """The ledger's server as ``database_url`` names it (its dialect, the part before
    ``+driver://``; the first URL of a split ledger's list): "MariaDB" for
    ``mariadb+pymysql://``, "MySQL" for ``mysql+pymysql://``, else "PostgreSQL"."""
    dialect = database_url.split("://", 1)[0].split("+", 1)[0].strip().lower()
    return {"mariadb": "MariaDB", "mysql": "MySQL"}.get(dialect, "PostgreSQL")


class Pingable(Protocol):
    """What readiness asks of the ledger (InspectionLedger.ping)."""

    async def ping(self) -> bool: ...


async def _readiness(
    ledger: Pingable,
    connection: AmqpConnection | None,
    service: Callable[[], str | None],
    server: str,
) -> str | None:
    """Why a relay or worker is not ready (None: it is): see :mod:`ledgerq.health`.
    A direct worker (``connection`` None) needs only the ledger."""
    if connection is not None and not is_connected(connection):
        return "RabbitMQ: not connected (reconnecting)"
    try:
        if not await ledger.ping():
            return f"{server}: the ledger's tables are missing (run `ledgerq migrate`)"
    except Exception as exc:
        return f"{server}: {first_line(exc)}"
    return service()


def watch_readiness(
    health: Health | None,
    ledger: Pingable,
    connection: AmqpConnection | None,
    service: Callable[[], str | None],
    *,
    database_url: str,
) -> None:
    """Watch the readiness of a service on the ledger at ``database_url`` (which names
    the server in the messages)."""
    if health is not None:
        server = server_name(database_url)
        health.watch(partial(_readiness, ledger, connection, service, server))


def stop_event(*also: Callable[[], None]) -> asyncio.Event:
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
    service connects: /readyz says "starting" meanwhile). Without: no-ops, except
    in a child of ``ledgerq worker --processes`` (``PROMETHEUS_MULTIPROC_DIR`` set):
    metrics recorded to that directory, served by the supervisor, and no endpoint."""
    multiprocess = not port and bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))
    if not port and not multiprocess:
        yield NO_OBSERVER, None
        return
    from ledgerq import metrics  # only now: prometheus_client loads with a metrics port only

    registry = metrics.new_registry()
    observer: Observer = (
        metrics.RelayMetrics(registry) if service == "relay" else metrics.WorkerMetrics(registry)
    )
    if multiprocess:
        yield observer, None
        return
    health = Health()
    server = metrics.MetricsServer(port, health, registry)
    health.start_ticking()
    log.info("%s: /metrics, /healthz and /readyz on port %d", service, server.port)
    try:
        yield observer, health
    finally:
        await health.close()
        server.close()
