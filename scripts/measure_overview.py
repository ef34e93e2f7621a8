"""Time the dashboard's overview on a large history, with and without the rollup.

Usage: python scripts/measure_overview.py ROWS [--skip-history-only]   (ROWS 0: measure only)

Uses the throwaway database named by LEDGERQ_PERF_DATABASE_URL (default
``ledgerq_dash_perf10m`` on the local server; created if missing, migrated),
makes the day partitions, seeds ROWS synthetic finished tasks over the last 29
days (``seed_varied_history``, as scripts/measure_listing.py does), runs
``VACUUM (ANALYZE)``, then prints: the rollup's catch-up (the first reconciler
pass after upgrading: the last 7 days), and the median of five overview loads
per window (docs/performance.md, "The dashboard's overview"). Drop the database
afterwards.
"""

import asyncio
import os
import statistics
import sys
import time
from datetime import timedelta

import httpx
import psycopg
from sqlalchemy import make_url

from ledgerq.compose import open_ledger
from ledgerq.core.config import Settings
from ledgerq.dashboard.app import create_app
from ledgerq.dashboard.overview import overview_data
from ledgerq.dashboard.settings import DashboardSettings
from ledgerq.ledger.pg.engines import libpq_url
from ledgerq.ledger.pg.migrate import upgrade
from ledgerq.ledger.rollup import WINDOWS
from ledgerq.relay.rollup import Rollup, RollupConfig

URL = os.environ.get(
    "LEDGERQ_PERF_DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/ledgerq_dash_perf10m"
)


def ensure_database() -> None:
    name = make_url(URL).database
    admin = libpq_url(make_url(URL).set(database="postgres").render_as_string(False))
    with psycopg.connect(admin, autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')


def vacuum() -> None:
    with psycopg.connect(libpq_url(URL), autocommit=True) as conn:
        conn.execute("VACUUM (ANALYZE) ledgerq_history")


async def time_overviews(ledger: object, label: str) -> None:
    for name, window in WINDOWS.items():
        times = []
        for _ in range(5):
            t = time.perf_counter()
            data = await overview_data(ledger, window)  # type: ignore[arg-type]
            times.append((time.perf_counter() - t) * 1000)
        finished = sum(data["finished"].values())
        print(
            f"{label} window {name}: median {statistics.median(times):.0f} ms over 5 "
            f"(min {min(times):.0f}, max {max(times):.0f}; {finished} finished tasks shown)",
            flush=True,
        )


async def time_pages(ledger: object) -> None:
    """The whole page, as a browser gets it (through the ASGI app, no network)."""
    app = create_app(ledger, DashboardSettings())  # type: ignore[arg-type]
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://perf") as http:
        for name in WINDOWS:
            times = []
            for _ in range(5):
                t = time.perf_counter()
                page = await http.get("/", params={"window": name})
                times.append((time.perf_counter() - t) * 1000)
                assert page.status_code == 200
            print(
                f"GET /?window={name}: median {statistics.median(times):.0f} ms over 5 "
                f"(min {min(times):.0f}, max {max(times):.0f})",
                flush=True,
            )


async def main(rows: int) -> None:
    ensure_database()
    settings = Settings(database_url=URL, amqp_url="amqp://guest:guest@127.0.0.1:5672/")
    upgrade(settings)
    async with open_ledger(settings, "ledgerq-perf", pool_size=6) as ledger:
        if rows:
            today = (await ledger.database_now()).date()
            for status in ("succeeded", "dead", "cancelled"):
                for back in range(0, 32):
                    await ledger.add_history_day(status, today - timedelta(days=back))
            t = time.monotonic()
            await ledger.seed_varied_history(rows)
            print("seeded", rows, "in", round(time.monotonic() - t, 1), "s", flush=True)
            vacuum()
        if await ledger.rolled_upto() is None:
            if "--skip-history-only" not in sys.argv:
                await time_overviews(ledger, "without the rollup (history only):")
            rollup = Rollup(ledger, RollupConfig(budget_s=3600))
            t = time.monotonic()
            counts = await rollup.run_once()
            print(f"rollup catch-up: {counts.line()} ({time.monotonic() - t:.1f} s)", flush=True)
        rollup = Rollup(ledger, RollupConfig())
        counts = await rollup.run_once()
        print(f"a steady-state rollup pass: {counts.line()}", flush=True)
        await time_overviews(ledger, "with the rollup:")
        await time_pages(ledger)


asyncio.run(main(int(sys.argv[1])))
