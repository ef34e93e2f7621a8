"""Time ``ledgerq tasks list``'s statement on a large partitioned history.

Usage: python scripts/measure_listing.py ROWS   (0: measure only)

Creates/migrates the throwaway database ``ledgerq_perf10m`` on the local server,
makes the day partitions the rows will land in, seeds ROWS synthetic finished
tasks (``seed_varied_history``) and prints the median of five runs per filter
(docs/performance.md, "Listing a large history"). Run ``VACUUM (ANALYZE)
ledgerq_history`` between seeding and measuring; drop the database afterwards.
"""

import asyncio
import statistics
import sys
import time
from datetime import timedelta

from ledgerq.compose import open_ledger
from ledgerq.core.config import Settings
from ledgerq.ledger.filters import TaskFilter
from ledgerq.ledger.pg.migrate import upgrade

URL = "postgresql+psycopg://postgres@127.0.0.1:5432/ledgerq_perf10m"


async def main(rows: int) -> None:
    settings = Settings(database_url=URL, amqp_url="amqp://guest:guest@127.0.0.1:5672/")
    upgrade(settings)
    async with open_ledger(settings, "ledgerq-perf", pool_size=2) as ledger:
        if rows:
            today = (await ledger.database_now()).date()
            t = time.monotonic()
            for status in ("succeeded", "dead", "cancelled"):
                for back in range(0, 32):
                    await ledger.add_history_day(status, today - timedelta(days=back))
            print("days made", round(time.monotonic() - t, 1), flush=True)
            t = time.monotonic()
            await ledger.seed_varied_history(rows)
            print("seeded", rows, "in", round(time.monotonic() - t, 1), "s", flush=True)
        for name, f in [
            ("--status dead --limit 50", TaskFilter(statuses=("dead",), limit=50)),
            ("--limit 50 (no filter)", TaskFilter(limit=50)),
            ("--kind bench.kind3 --limit 50", TaskFilter(kind="bench.kind3", limit=50)),
            ("--key order-5000000", TaskFilter(business_key="order-5000000", limit=50)),
            ("--error upstream --limit 50", TaskFilter(error="upstream", limit=50)),
        ]:
            times = []
            for _ in range(5):
                t = time.perf_counter()
                got = await ledger.list_tasks(f)
                times.append((time.perf_counter() - t) * 1000)
            print(
                f"{name}: median {statistics.median(times):.1f} ms over 5 ({len(got)} rows)",
                flush=True,
            )


asyncio.run(main(int(sys.argv[1])))
