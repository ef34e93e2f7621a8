"""What the dashboard's overview costs on MySQL / MariaDB, without and with its rollup.

Usage: python scripts/measure_overview_mysql.py [--sizes 1000,10000,100000] [--runs 5]

Runs against ``LEDGERQ_DATABASE_URL`` (a MariaDB or MySQL URL of a scratch
database: migrated here, and emptied before each size). For each size N, the
testing protocol's ``seed_history(N)`` writes N finished tasks, then their times
are spread over the last hour (finished 1 to 59 minutes ago, a few hundred ms
each from enqueue to finish), so every one is within the 1 h window; then the
overview (``ledgerq.dashboard.overview.overview_data``, all its reads,
concurrently as the page runs them) is timed ``--runs`` times for the 1 h window
and the 7 d window: first with the rollup's mark cleared (every figure read from
history, what a ledger without a running reconciler reads), then after one
rollup pass (``ledgerq.relay.rollup.Rollup``, whose cost is reported too).

Prints one JSON object: per size, rollup state and window, the median, best and
worst in ms; and per size the rollup pass's counts.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from typing import Any

from sqlalchemy import text

from ledgerq.compose.storage import async_engine
from ledgerq.core.config import Settings
from ledgerq.dashboard.overview import overview_data
from ledgerq.ledger.rollup import WINDOWS
from ledgerq.relay.rollup import Rollup, RollupConfig

#: The seeded tasks' times, spread over the last hour: finished 60 s to 59 min ago
#: (37 s apart by id, folded), started up to a second before, published 20 ms
#: before that, created 5 ms before that.
SPREAD = text(
    """
    UPDATE ledgerq_history
    SET finished_at = UTC_TIMESTAMP(6) - INTERVAL (60000000 + ((-id) * 37000000) % 3480000000)
                                            MICROSECOND,
        started_at = finished_at - INTERVAL (((-id) % 1000) * 1000) MICROSECOND,
        published_at = started_at - INTERVAL 20000 MICROSECOND,
        created_at = published_at - INTERVAL 5000 MICROSECOND,
        run_at = created_at
    """
)


async def timed(ledger: Any, window: str, runs: int) -> dict[str, float]:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        await overview_data(ledger, WINDOWS[window])
        times.append((time.perf_counter() - started) * 1000)
    return {
        "median_ms": round(statistics.median(times)),
        "best_ms": round(min(times)),
        "worst_ms": round(max(times)),
    }


async def measure(settings: Settings, sizes: list[int], runs: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    from ledgerq.ledger.mysql import MyLedger  # a MySQL URL only

    ledger = MyLedger(async_engine(settings, "ledgerq-measure-overview", pool_size=6))
    try:
        for n in sizes:
            await ledger.truncate()  # the rollup's rows and mark too
            await ledger.seed_history(n)
            async with ledger.engine.begin() as conn:
                await conn.execute(SPREAD)
            for window in ("1h", "7d"):
                out[f"{n} {window} history only"] = await timed(ledger, window, runs)
            counts = await Rollup(ledger, RollupConfig(backfill_s=7200)).run_once()
            out[f"{n} rollup pass"] = counts.as_dict()
            for window in ("1h", "7d"):
                out[f"{n} {window} with the rollup"] = await timed(ledger, window, runs)
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
