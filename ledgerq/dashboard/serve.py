"""``ledgerq dashboard``: the application on uvicorn until SIGTERM.

Opens the ledger (schema checked first; PostgreSQL's one database, or a MySQL /
MariaDB one: :func:`~ledgerq.compose.ledgers.open_dashboard_ledger`), builds the
app, and serves it with uvicorn until SIGTERM or SIGINT, which ledgerq's own handlers turn into
uvicorn's graceful exit (no new connections, requests in flight get 10 s);
then the ledger is closed and the process exits 0, like the relay and the
worker. (uvicorn's own handlers would re-raise the signal after shutting down,
and the process would end "killed by SIGTERM".) With a metrics port the
ledger gauges (:class:`ledgerq.metrics.gauges.LedgerGauges`) are refreshed every
:data:`GAUGES_EVERY_S` from the hot table (live counts, the unserved backlog,
the broker windows: three reads at once; if one fails, the last snapshot
stays, and a lost database is logged once per outage, as every loop does:
:mod:`ledgerq.ledger.outages`), and served with ``/healthz`` and ``/readyz`` (ready: the ledger
answers) on that port.

uvicorn's own logging is routed through the root logger the CLI configured, so
its lines pass the same secret masking as every other line.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from contextlib import asynccontextmanager

import uvicorn

from ledgerq.compose import open_dashboard_ledger
from ledgerq.core.config import Settings
from ledgerq.dashboard.app import create_app
from ledgerq.dashboard.settings import DashboardSettings, check_bind
from ledgerq.health import Health
from ledgerq.ledger.outages import Outage
from ledgerq.ledger.protocol import DashboardLedger
from ledgerq.runtime import on_stop_signal

log = logging.getLogger("ledgerq.dashboard")

GAUGES_EVERY_S = 15.0


class _Server(uvicorn.Server):
    """uvicorn without its signal handling: :func:`on_stop_signal` stops it."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def _refresh(ledger: DashboardLedger, gauges: object) -> None:
    from ledgerq.metrics import gauges as ledger_gauges

    assert isinstance(gauges, ledger_gauges.LedgerGauges)
    outage = Outage("ledger gauges refresh", log)
    while True:
        try:
            live, unserved, windows = await asyncio.gather(
                ledger.live_counts(), ledger.unserved(), ledger.windows()
            )
            gauges.update(live, unserved, windows)
            outage.succeeded()
        except Exception as exc:
            # Even a lost schema does not end it: the dashboard serves on (its pages
            # and /readyz say what is wrong), keeping the last snapshot meanwhile.
            outage.failed(exc)
        await asyncio.sleep(GAUGES_EVERY_S)


@asynccontextmanager
async def ledger_metrics(ledger: DashboardLedger, port: int) -> AsyncIterator[Health | None]:
    """The ledger gauges, /healthz and /readyz on ``port`` (0: nothing); yields
    the health (unready from :meth:`Health.stopping` on), if any."""
    if not port:
        yield None
        return
    # prometheus_client loads only with a metrics port
    from ledgerq import metrics
    from ledgerq.metrics import gauges as ledger_gauges

    registry = metrics.new_registry()
    gauges = ledger_gauges.LedgerGauges(registry)
    health = Health()
    server = metrics.MetricsServer(port, health, registry)
    health.start_ticking()

    async def ready() -> str | None:
        return None if await ledger.ping() else "the ledger table is missing"

    health.watch(ready)
    refresher = asyncio.create_task(_refresh(ledger, gauges), name="ledgerq-gauges")
    log.info("dashboard: /metrics, /healthz and /readyz on port %d", server.port)
    try:
        yield health
    finally:
        refresher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await refresher
        await health.close()
        server.close()


async def serve_dashboard(
    settings: Settings,
    dashboard: DashboardSettings,
    host: str,
    port: int,
    metrics_port: int = 0,
    secrets: Iterable[str] = (),
    on_ready: Callable[[], None] = lambda: None,
) -> None:
    check_bind(host, dashboard)
    async with (
        open_dashboard_ledger(settings, "ledgerq-dashboard", pool_size=6) as ledger,
        ledger_metrics(ledger, metrics_port or settings.metrics_port) as health,
    ):
        app = create_app(ledger, dashboard, secrets)
        config = uvicorn.Config(
            app, host=host, port=port, log_config=None, access_log=False, server_header=False,
            lifespan="off", timeout_graceful_shutdown=10,
        )  # fmt: skip
        server = _Server(config)

        def stop() -> None:
            server.should_exit = True
            if health is not None:
                health.stopping()

        on_stop_signal(stop)
        if dashboard.secret_generated:
            log.warning(
                "LEDGERQ_DASHBOARD_SECRET is not set: sessions are signed with a random key "
                "and end when the dashboard restarts"
            )
        on_ready()
        await server.serve()
