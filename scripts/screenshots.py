"""Screenshots of the dashboard for the docs: docs/img/dashboard-overview.png and
docs/img/dashboard-task.png.

Usage: python scripts/screenshots.py --reset [--rounds 8] [--every 30]

Runs a small shop through the real relay and worker (tests/dashboard_seed.py:
emails that succeed, invoices that fail once and are retried, syncs that end
dead), ``--rounds`` times, ``--every`` seconds apart, so the charts have a few
minutes of history, with a few refunds (a kind no shop worker registers) waiting
unserved since the first round; runs the rollup; serves the dashboard and, with
a shop worker running (so its broker windows show), photographs the overview and
a dead task's page with Debian's chromium (tests/browser.py).

It EMPTIES the ledger at LEDGERQ_DATABASE_URL first (hence ``--reset``): point it
at a scratch database. LEDGERQ_AMQP_URL and LEDGERQ_AMQP_PREFIX are used as set.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ledgerq.compose import open_ledger  # noqa: E402
from ledgerq.consumers.worker import WorkerConfig  # noqa: E402
from ledgerq.core.config import Settings  # noqa: E402
from ledgerq.dashboard.settings import DashboardSettings  # noqa: E402
from ledgerq.ledger.pg.migrate import upgrade  # noqa: E402
from ledgerq.relay.rollup import Rollup, RollupConfig  # noqa: E402
from tests.browser import chromium, served  # noqa: E402
from tests.dashboard_seed import Seeded, seed, seed_unserved, shop_registry  # noqa: E402
from tests.harness import Pipeline  # noqa: E402

OUT = ROOT / "docs" / "img"


async def main(rounds: int, every: float) -> None:
    settings = Settings.from_env()
    upgrade(settings)
    async with open_ledger(settings, "ledgerq-screenshots", pool_size=6) as ledger:
        await ledger.truncate()
        seed_unserved(settings)
        last: Seeded | None = None
        for i in range(rounds):
            started = time.monotonic()
            last = await seed(settings, orders=10 + 6 * (i % 3))
            print(f"round {i + 1}/{rounds} done", flush=True)
            if i + 1 < rounds:
                await asyncio.sleep(max(0.0, every - (time.monotonic() - started)))
        assert last is not None
        await Rollup(ledger, RollupConfig(settle_s=5)).run_once()
        worker = WorkerConfig(
            queues=("default", "other"), concurrency=8, lease_s=30, heartbeat_s=5, grace_s=5
        )
        async with (
            Pipeline(settings, shop_registry(), worker=worker),
            served(ledger, DashboardSettings()) as url,
            chromium() as browser,
        ):
            page = await browser.new_page()
            await page.set_viewport_size({"width": 1400, "height": 900})
            await page.goto(url + "/")
            await page.wait_for_selector("#chart-rate canvas")
            await page.wait_for_selector("#unserved")
            await page.screenshot(path=str(OUT / "dashboard-overview.png"), full_page=True)
            await page.goto(f"{url}/tasks/{last.ids['shop.sync'][0]}")
            await page.screenshot(path=str(OUT / "dashboard-task.png"), full_page=True)
    print(f"wrote {OUT / 'dashboard-overview.png'} and {OUT / 'dashboard-task.png'}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reset", action="store_true", help="Empty the ledger first (required).")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--every", type=float, default=30.0)
    args = parser.parse_args()
    if not args.reset:
        parser.error("this empties the ledger at LEDGERQ_DATABASE_URL: pass --reset to agree")
    asyncio.run(main(args.rounds, args.every))
