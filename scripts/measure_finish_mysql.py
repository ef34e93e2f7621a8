"""What one finish costs on the MySQL / MariaDB ledger: tasks claimed, then finished
one per transaction (``MyLedger.finish``), the finish calls' wall time per task.

Usage: python scripts/measure_finish_mysql.py [--tasks 300] [--rounds 5]

Runs against ``LEDGERQ_DATABASE_URL`` (a MariaDB or MySQL URL of a scratch
database: migrated to this tree's head, its tasks deleted each round). To
compare two trees (a change to the finish path), run it from each, alternately,
on two scratch databases. Prints one JSON object: each round's microseconds per
finish, and their median.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time

from sqlalchemy.orm import Session

from ledgerq import TaskSpec, enqueue_many
from ledgerq.compose.storage import async_engine, sync_engine
from ledgerq.core.config import Settings
from ledgerq.ledger.model import Outcome
from ledgerq.ledger.mysql import MyLedger, migrate


async def measure(settings: Settings, tasks: int, rounds: int) -> list[float]:
    ledger = MyLedger(async_engine(settings, "ledgerq-measure", pool_size=2))
    producer = sync_engine(settings, "ledgerq-measure-producer", pool_size=1)
    per_finish: list[float] = []
    try:
        for _ in range(rounds):
            await ledger.truncate()
            with Session(producer) as session, session.begin():
                ids = enqueue_many(session, [TaskSpec("measure.finish")] * tasks)
            claimed = [(await ledger.claim([(i, 0)], "measure", 60))[0] for i in ids]
            started = time.perf_counter()
            for task in claimed:
                await ledger.finish([Outcome.succeeded(task.fence)])
            per_finish.append((time.perf_counter() - started) / tasks * 1e6)
    finally:
        await ledger.dispose()
        producer.dispose()
    return per_finish


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    settings = Settings(database_url=os.environ["LEDGERQ_DATABASE_URL"])
    migrate.upgrade(settings)
    rounds = asyncio.run(measure(settings, args.tasks, args.rounds))
    print(json.dumps({"us_per_finish": [round(r) for r in rounds],
                      "median": round(statistics.median(rounds))}))  # fmt: skip


if __name__ == "__main__":
    main()
