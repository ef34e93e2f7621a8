"""Measure what retention and permanent de-duplication cost (docs/performance.md,
"Retention and permanent de-duplication").

Run against a throwaway database, which it creates and migrates (never the ledger
you use)::

    .venv/bin/python scripts/measure_retention.py \\
        --database-url postgresql+psycopg://postgres@127.0.0.1:5432/ledgerq_measure \\
        --rows 1000000 --repeat 3

Parts (``--part``, default all):

- ``purge``: ``--rows`` finished tasks seeded into one day (``seed_history``, then
  VACUUM and CHECKPOINT), removed by dropping the day's partition, then the same
  rows seeded again and removed by deleting in batches of 5,000; median seconds.
- ``lookups``: ``whereabouts`` of 10 ids (the worker's question after a lost
  claim) with history split into as many day partitions as the default
  retention keeps (8 succeeded, 91 dead, 31 cancelled); median milliseconds.
  Runs on the code before partitioning too (then without partitions).
- ``dedupe``: enqueue cost per task, one task per transaction and in batches of
  1,000: no key, ``unique=True`` and ``once=True`` (distinct keys).

Every step goes through the storage seam or ``enqueue``; nothing here is SQL.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Callable
from datetime import UTC, timedelta
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.orm import Session

from ledgerq import TaskSpec, enqueue, enqueue_many
from ledgerq.ledger.config import Settings
from ledgerq.ledger.pg import PgLedger
from ledgerq.ledger.pg.engines import async_engine, sync_engine
from ledgerq.ledger.pg.migrate import upgrade

KEPT_DAYS = {"succeeded": 8, "dead": 91, "cancelled": 31}


def median_of(repeat: int, measure: Callable[[], float]) -> dict[str, Any]:
    runs = [measure() for _ in range(repeat)]
    return {"runs": [round(r, 4) for r in runs], "median": round(statistics.median(runs), 4)}


async def purge(ledger: PgLedger, rows: int, repeat: int) -> dict[str, Any]:
    today = (await ledger.database_now()).astimezone(UTC).date()

    async def seeded() -> None:
        await ledger.truncate()
        await ledger.add_history_day("succeeded", today)
        await ledger.seed_history(rows)  # finished now(): today's partition

    async def drop() -> float:
        await seeded()
        started = time.perf_counter()
        dropped = await ledger.drop_history_day("succeeded", today)
        elapsed = time.perf_counter() - started
        assert dropped == rows, dropped
        return elapsed

    async def delete() -> float:
        await seeded()
        before = await ledger.database_now() + timedelta(seconds=1)
        started, deleted = time.perf_counter(), 0
        while (batch := await ledger.purge_history_batch("succeeded", before, 5000)) > 0:
            deleted += batch
        elapsed = time.perf_counter() - started
        assert deleted == rows, deleted
        return elapsed

    drops = [await drop() for _ in range(repeat)]
    deletes = [await delete() for _ in range(repeat)]
    await ledger.add_history_day("succeeded", today)
    return {
        "rows": rows,
        "drop_day_s": {"runs": drops, "median": statistics.median(drops)},
        "delete_batches_s": {"runs": deletes, "median": statistics.median(deletes)},
    }


async def lookups(ledger: PgLedger, rows: int, calls: int = 500) -> dict[str, Any]:
    await ledger.truncate()
    partitioned = hasattr(ledger, "add_history_day")
    if partitioned:
        today = (await ledger.database_now()).astimezone(UTC).date()
        for status, days in KEPT_DAYS.items():
            for back in range(days):
                await ledger.add_history_day(status, today - timedelta(days=back))
    await ledger.seed_history(rows)
    ids = [-n for n in range(1, rows, max(1, rows // 10))][:10]
    timings = []
    for _ in range(calls):
        started = time.perf_counter()
        found = await ledger.whereabouts(ids)
        timings.append(time.perf_counter() - started)
        assert len(found) == len(ids)
    partitions = len(await ledger.history_days()) if partitioned else 0
    return {
        "history_rows": rows,
        "day_partitions": partitions,
        "whereabouts_10_ids_ms": {
            "median": round(statistics.median(timings) * 1000, 3),
            "p95": round(statistics.quantiles(timings, n=20)[-1] * 1000, 3),
        },
    }


def dedupe(engine: Engine, repeat: int, single: int = 3000, batch: int = 20_000) -> dict[str, Any]:
    supports_once = "once" in TaskSpec.__dataclass_fields__
    modes = ["none", "unique", *(["once"] if supports_once else [])]
    counter = iter(range(10**9))

    def options(mode: str) -> dict[str, Any]:
        if mode == "none":
            return {}
        return {"business_key": f"key-{next(counter)}", mode: True}

    def one_per_transaction(mode: str) -> float:
        started = time.perf_counter()
        for _ in range(single):
            with Session(engine) as session, session.begin():
                enqueue(session, "measure.dedupe", {}, **options(mode))
        return (time.perf_counter() - started) / single * 1e6

    def batched(mode: str) -> float:
        specs = [TaskSpec("measure.dedupe", {}, **options(mode)) for _ in range(batch)]
        started = time.perf_counter()
        with Session(engine) as session, session.begin():
            for at in range(0, batch, 1000):
                enqueue_many(session, specs[at : at + 1000])
        return (time.perf_counter() - started) / batch * 1e6

    result: dict[str, Any] = {}
    for shape, measure in (("one_per_transaction", one_per_transaction), ("batch", batched)):
        result[f"{shape}_us_per_task"] = {
            mode: median_of(repeat, lambda: measure(mode)) for mode in modes
        }
    return result


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--part", choices=["all", "purge", "lookups", "dedupe"], default="all")
    args = parser.parse_args()
    settings = Settings(database_url=args.database_url, statement_timeout_ms=0)
    upgrade(settings)
    ledger = PgLedger(async_engine(settings, "ledgerq-measure", pool_size=1))
    engine = sync_engine(settings, "ledgerq-measure", pool_size=1)
    result: dict[str, Any] = {}
    try:
        if args.part in ("all", "purge"):
            result["purge"] = await purge(ledger, args.rows, args.repeat)
        if args.part in ("all", "lookups"):
            result["lookups"] = await lookups(ledger, args.rows)
        if args.part in ("all", "dedupe"):
            await ledger.truncate()
            result["dedupe"] = await asyncio.to_thread(dedupe, engine, args.repeat)
            await ledger.truncate()
    finally:
        await ledger.dispose()
        engine.dispose()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
