"""Measure retention on the MySQL / MariaDB ledger (docs/performance.md, "Retention
on MariaDB"): dropping a day partition against deleting the same rows in batches,
and what the partitions cost a lookup by id.

Run against a throwaway database, which it drops, creates and migrates (never the
ledger you use)::

    .venv/bin/python scripts/measure_retention_mariadb.py \\
        --database-url mariadb+pymysql://root@127.0.0.1:3306/ledgerq_measure_my \\
        --rows 200000 --repeat 3

Parts (``--part``, default all):

- ``purge``: ``--rows`` finished tasks seeded into today's partition
  (``seed_history``), removed by dropping the day's partition
  (``drop_history_day``: it counts the rows, then ``ALTER TABLE ... DROP
  PARTITION``); then the same rows seeded again and removed by deleting in
  batches of 5,000 (``purge_history_batch``); then, with history's partitioning
  removed (the server-without-partitioning fallback), deleted in batches again.
  Seconds, runs and median.
- ``finish``: the hot path's statement alone: ``--tasks`` tasks enqueued and
  claimed, then finished ``succeeded`` 100 per ``finish`` (the worker's batch),
  into history partitioned as retention keeps it (139 days) and, in the same
  round, into history with its partitioning removed; median milliseconds per
  statement of each round, ``--repeat`` rounds.
- ``lookups``: ``whereabouts`` of 10 ids with ``--rows`` finished tasks, history
  split into as many day partitions as the default retention keeps (8
  succeeded, 91 dead, 31 cancelled, plus the old and new ones), then with the
  partitioning removed; median and p95 milliseconds of 500 calls.

Every step on the ledger goes through the storage seam; the only SQL here drops
the database and removes the partitioning for the fallback.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, timedelta
from typing import Any

import pymysql
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from ledgerq import TaskSpec, enqueue_many
from ledgerq.core.config import Settings
from ledgerq.ledger.model import Outcome
from ledgerq.ledger.mysql import MyLedger
from ledgerq.ledger.mysql.engines import async_engine, sync_engine
from ledgerq.ledger.mysql.migrate import upgrade
from ledgerq.ledger.routing import Subscription

KEPT_DAYS = {"succeeded": 8, "dead": 91, "cancelled": 31}
BATCH = 5000


def summary(runs: list[float]) -> dict[str, Any]:
    return {"runs": [round(r, 3) for r in runs], "median": round(statistics.median(runs), 3)}


def sql(settings: Settings, statement: str, database: bool = True) -> None:
    url = make_url(settings.database_url)
    with (
        pymysql.connect(
            host=url.host or "127.0.0.1",
            port=url.port or 3306,
            user=url.username or "root",
            password=url.password or "",
            database=url.database if database else None,
            autocommit=True,
        ) as conn,
        conn.cursor() as cursor,
    ):
        cursor.execute(statement)


def recreate(settings: Settings) -> None:
    name = make_url(settings.database_url).database
    sql(settings, f"DROP DATABASE IF EXISTS `{name}`", database=False)
    upgrade(settings)


def unpartition(settings: Settings) -> None:
    """The fallback's table: history as one (its primary key stays (id, status, finished_at))."""
    sql(settings, "ALTER TABLE ledgerq_history REMOVE PARTITIONING")


async def timed(step: Callable[[], Awaitable[int]], rows: int) -> float:
    started = time.perf_counter()
    removed = await step()
    elapsed = time.perf_counter() - started
    assert removed == rows, (removed, rows)
    return elapsed


async def purge(settings: Settings, ledger: MyLedger, rows: int, repeat: int) -> dict[str, Any]:
    today = (await ledger.database_now()).astimezone(UTC).date()

    async def seeded() -> None:
        await ledger.truncate()
        await ledger.add_history_day("succeeded", today)
        await ledger.seed_history(rows)  # finished now(): today's partition

    async def drop() -> int:
        return await ledger.drop_history_day("succeeded", today) or 0

    async def delete() -> int:
        before = await ledger.database_now() + timedelta(seconds=1)
        deleted = 0
        while (batch := await ledger.purge_history_batch("succeeded", before, BATCH)) > 0:
            deleted += batch
        return deleted

    drops, deletes, fallback = [], [], []
    for _ in range(repeat):
        await seeded()
        drops.append(await timed(drop, rows))
    for _ in range(repeat):
        await seeded()
        deletes.append(await timed(delete, rows))
    unpartition(settings)
    for _ in range(repeat):
        await ledger.truncate()
        await ledger.seed_history(rows)
        fallback.append(await timed(delete, rows))
    return {
        "rows": rows,
        "drop_day_s": summary(drops),
        "delete_batches_s": summary(deletes),
        "delete_batches_unpartitioned_s": summary(fallback),
        "rows_per_s": {
            "drop_day": round(rows / statistics.median(drops)),
            "delete_batches": round(rows / statistics.median(deletes)),
            "delete_batches_unpartitioned": round(rows / statistics.median(fallback)),
        },
    }


async def whereabouts_ms(ledger: MyLedger, ids: list[int], calls: int) -> dict[str, float]:
    timings = []
    for _ in range(calls):
        started = time.perf_counter()
        found = await ledger.whereabouts(ids)
        timings.append(time.perf_counter() - started)
        assert len(found) == len(ids), found
    return {
        "median": round(statistics.median(timings) * 1000, 3),
        "p95": round(statistics.quantiles(timings, n=20)[-1] * 1000, 3),
    }


async def lookups(
    settings: Settings, ledger: MyLedger, rows: int, calls: int = 500
) -> dict[str, Any]:
    await ledger.truncate()
    partitions = await retention_days(ledger)
    await ledger.seed_history(rows)
    ids = [-n for n in range(1, rows, max(1, rows // 10))][:10]
    partitioned = await whereabouts_ms(ledger, ids, calls)
    unpartition(settings)
    return {
        "history_rows": rows,
        "day_partitions": partitions,
        "whereabouts_10_ids_ms": {
            "partitioned": partitioned,
            "unpartitioned": await whereabouts_ms(ledger, ids, calls),
        },
    }


async def retention_days(ledger: MyLedger) -> int:
    """The day partitions the default retention keeps, and the three days ahead."""
    today = (await ledger.database_now()).astimezone(UTC).date()
    for status, days in KEPT_DAYS.items():
        for ahead in range(-days + 1, 4):
            await ledger.add_history_day(status, today + timedelta(days=ahead))
    return len(await ledger.history_days())


async def finish_ms(settings: Settings, ledger: MyLedger, tasks: int) -> float:
    """Median milliseconds of one ``finish`` of 100 claimed tasks."""
    await ledger.truncate()
    engine = sync_engine(settings, "ledgerq-measure-producer", pool_size=1)
    try:
        with Session(engine) as session, session.begin():
            ids = enqueue_many(session, [TaskSpec("measure.finish") for _ in range(tasks)])
    finally:
        engine.dispose()
    await ledger.subscribe("measure", [Subscription("default", None, capacity=tasks)], 600.0)
    timings = []
    for start in range(0, tasks, 100):
        chunk = ids[start : start + 100]
        won = await ledger.claim([(i, 0) for i in chunk], "measure", 600.0)
        assert len(won) == len(chunk), (len(won), len(chunk))
        started = time.perf_counter()
        await ledger.finish([Outcome.succeeded(t.fence) for t in won])
        timings.append(time.perf_counter() - started)
    return statistics.median(timings) * 1000


async def finish(settings: Settings, tasks: int, repeat: int) -> dict[str, Any]:
    partitioned, unpartitioned, days = [], [], 0
    for _ in range(repeat):
        recreate(settings)
        ledger = MyLedger(async_engine(settings, "ledgerq-measure", pool_size=1))
        try:
            days = await retention_days(ledger)
            partitioned.append(await finish_ms(settings, ledger, tasks))
            unpartition(settings)
            unpartitioned.append(await finish_ms(settings, ledger, tasks))
        finally:
            await ledger.dispose()
    return {
        "tasks": tasks,
        "day_partitions": days,
        "finish_100_ms_partitioned": summary(partitioned),
        "finish_100_ms_unpartitioned": summary(unpartitioned),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--part", choices=("purge", "finish", "lookups", "all"), default="all")
    args = parser.parse_args()
    settings = Settings(database_url=args.database_url)
    result: dict[str, Any] = {}
    if args.part in ("finish", "all"):
        result["finish"] = await finish(settings, args.tasks, args.repeat)
    for part in ("purge", "lookups"):
        if args.part not in (part, "all"):
            continue
        recreate(settings)
        ledger = MyLedger(async_engine(settings, "ledgerq-measure", pool_size=1))
        try:
            if part == "purge":
                result[part] = await purge(settings, ledger, args.rows, args.repeat)
            else:
                result[part] = await lookups(settings, ledger, args.rows)
        finally:
            await ledger.dispose()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
