"""What the dashboard's overview costs on MySQL / MariaDB, which has no rollup.

Usage: python scripts/measure_overview_mysql.py [--sizes 1000,10000,100000] [--runs 5]

Runs against ``LEDGERQ_DATABASE_URL`` (a MariaDB or MySQL URL of a scratch
database: migrated here, and emptied before each size). For each size N, the
testing protocol's ``seed_history(N)`` writes N tasks finished now, so every
one is within the window, the worst case; then the overview
(``ledgerq.dashboard.overview.overview_data``, all its reads, concurrently as the
page runs them) is timed ``--runs`` times for the 1 h window and the 7 d window.

Prints one JSON object: per size and window, the median and worst in ms.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time

from ledgerq.compose.storage import async_engine
from ledgerq.core.config import Settings
from ledgerq.dashboard.overview import overview_data
from ledgerq.ledger.rollup import WINDOWS


async def measure(settings: Settings, sizes: list[int], runs: int) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    from ledgerq.ledger.mysql import MyLedger  # a MySQL URL only

    ledger = MyLedger(async_engine(settings, "ledgerq-measure-overview", pool_size=6))
    try:
        for n in sizes:
            await ledger.truncate()
            await ledger.seed_history(n)
            for window in ("1h", "7d"):
                times = []
                for _ in range(runs):
                    started = time.perf_counter()
                    await overview_data(ledger, WINDOWS[window])
                    times.append((time.perf_counter() - started) * 1000)
                out[f"{n} {window}"] = {
                    "median_ms": round(statistics.median(times)),
                    "worst_ms": round(max(times)),
                }
    finally:
        await ledger.dispose()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    settings = Settings(database_url=os.environ["LEDGERQ_DATABASE_URL"])
    if not settings.on_mysql:
        raise SystemExit("LEDGERQ_DATABASE_URL must be a MySQL or MariaDB URL")
    from ledgerq.ledger.mysql.migrate import upgrade

    upgrade(settings)
    sizes = [int(size) for size in args.sizes.split(",")]
    print(json.dumps(asyncio.run(measure(settings, sizes, args.runs)), indent=2))


if __name__ == "__main__":
    main()
