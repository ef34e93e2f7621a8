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
- ``finish``: the hot path's statement alone: ``--tasks`` tasks enqueued and
  claimed, then finished ``succeeded`` 100 per ``finish`` (the worker's batch);
  median milliseconds per statement. Runs on the code before partitioning too.
- ``migrate``: a ledger at revision 0003 with ``--rows`` finished tasks in its
  (unpartitioned) history, upgraded to head in place; seconds (runs once).

Every step on the ledger goes through the storage seam or ``enqueue``; the only
SQL here drops the throwaway database before ``migrate`` rebuilds it.
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

import psycopg
from psycopg import sql
from sqlalchemy import Engine
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from ledgerq import TaskSpec, enqueue, enqueue_many
from ledgerq.core.config import Settings
from ledgerq.ledger.model import Outcome
from ledgerq.ledger.pg import PgLedger
from ledgerq.ledger.pg.engines import async_engine, libpq_url, sync_engine
from ledgerq.ledger.pg.migrate import upgrade

KEPT_DAYS = {"succeeded": 8, "dead": 91, "cancelled": 31}


def summary(runs: list[float]) -> dict[str, Any]:
    return {"runs": [round(r, 4) for r in runs], "median": round(statistics.median(runs), 4)}


def median_of(repeat: int, measure: Callable[[], float]) -> dict[str, Any]:
    return summary([measure() for _ in range(repeat)])


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
        "drop_day_s": summary(drops),
        "delete_batches_s": summary(deletes),
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


async def finish(ledger: PgLedger, engine: Engine, tasks: int, repeat: int) -> dict[str, Any]:
    async def once() -> list[float]:
        await ledger.truncate()
        with Session(engine) as session, session.begin():
            ids = enqueue_many(session, [TaskSpec("measure.finish") for _ in range(tasks)])
        timings = []
        for at in range(0, len(ids), 100):
            claimed = await ledger.claim([(i, 0) for i in ids[at : at + 100]], "measure", 60.0)
            started = time.perf_counter()
            done = await ledger.finish([Outcome.succeeded(c.fence) for c in claimed])
            timings.append(time.perf_counter() - started)
            assert len(done) == len(claimed) == len(ids[at : at + 100])
        return timings

    runs = [statistics.median(await once()) * 1000 for _ in range(repeat)]
    await ledger.truncate()
    return {"tasks": tasks, "finish_100_ms": summary(runs)}


async def migrate(settings: Settings, rows: int) -> dict[str, Any]:
    url = make_url(settings.database_url)
    maintenance = libpq_url(url.set(database="postgres").render_as_string(hide_password=False))
    with psycopg.connect(maintenance, autocommit=True) as conn:
        name = sql.Identifier(url.database or "")
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(name))
    upgrade(settings, "0003")
    ledger = PgLedger(async_engine(settings, "ledgerq-measure", pool_size=1))
    try:
        await ledger.seed_history(rows)
    finally:
        await ledger.dispose()
    started = time.perf_counter()
    upgrade(settings)
    return {"history_rows": rows, "upgrade_s": round(time.perf_counter() - started, 3)}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=20_000)
    parts = ["all", "purge", "lookups", "dedupe", "migrate", "finish"]
    parser.add_argument("--part", choices=parts, default="all")
    args = parser.parse_args()
    settings = Settings(database_url=args.database_url, statement_timeout_ms=0)
    result: dict[str, Any] = {}
    if args.part in ("all", "migrate"):
        result["migrate"] = await migrate(settings, args.rows)
    upgrade(settings)
    ledger = PgLedger(async_engine(settings, "ledgerq-measure", pool_size=1))
    engine = sync_engine(settings, "ledgerq-measure", pool_size=1)
    try:
        if args.part in ("all", "purge"):
            result["purge"] = await purge(ledger, args.rows, args.repeat)
        if args.part in ("all", "lookups"):
            result["lookups"] = await lookups(ledger, args.rows)
        if args.part in ("all", "finish"):
            result["finish"] = await finish(ledger, engine, args.tasks, args.repeat)
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
