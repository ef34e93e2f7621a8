"""What the ``ledgerq_ended`` notification costs the worker's ``finish``, in PostgreSQL.

Usage: python scripts/measure_ended_notify.py [--rounds 10] [--tasks 5000] [--batch 50]
       [--clients 4] [--listen]

Runs against ``LEDGERQ_DATABASE_URL`` (use a scratch database: it is truncated).
ROUNDS rounds in A B B A order; in each, TASKS tasks are enqueued and claimed
(not timed), then ended ``succeeded`` by CLIENTS connections in parallel,
BATCH at a time, each a ``finish`` statement committing on its own (autocommit,
as the worker's finisher does). A runs the ``finish`` statement as shipped
(with ``tell_ended``: one ``pg_notify`` per statement while someone waits); B the same statement
with the notification cut out (the code before). Timed: the wall time of the
finishing, per task. ``--listen`` keeps one connection LISTENing on
``ledgerq_ended`` throughout, its registry announced in ``ledgerq_waiting`` (a
process with result() waiters), so A's statements notify; without it nobody
waits, and A's statements only test ``ledgerq_waiting`` (the common case).

Prints one JSON object: the rounds and the median ratio A/B.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from typing import Any

import psycopg
from sqlalchemy import text

from ledgerq import TaskSpec
from ledgerq.core.config import Settings
from ledgerq.ledger.model import Outcome
from ledgerq.ledger.params import outcome_params
from ledgerq.ledger.pg import PgLedger
from ledgerq.ledger.pg.engines import async_engine, libpq_url
from ledgerq.ledger.pg.raw import psycopg_sql
from ledgerq.ledger.pg.tx import PgAsyncTx
from ledgerq.ledger.sql import Q

SHIPPED = psycopg_sql(Q.finish)
_TOLD = Q.finish.text
_CUT = _TOLD[_TOLD.index("), told AS (") : _TOLD.index("), retried AS (")]
BEFORE = psycopg_sql(text(_TOLD.replace(_CUT, "").replace(" LEFT JOIN told ON true", "")))


async def prepared(ledger: PgLedger, tasks: int) -> list[tuple[int, int]]:
    await ledger.truncate(keep_subscriptions=True)
    ids = await ledger.enqueue([TaskSpec("measure.notify") for _ in range(tasks)])
    fences: list[tuple[int, int]] = []
    for start in range(0, len(ids), 1000):
        won = await ledger.claim([(i, 0) for i in ids[start : start + 1000]], "measure", 600)
        fences.extend(t.fence for t in won)
    return fences


async def finish_all(
    url: str, statement: str, fences: list[tuple[int, int]], batch: int, clients: int
) -> float:
    batches = [fences[i : i + batch] for i in range(0, len(fences), batch)]

    async def client(mine: list[list[tuple[int, int]]]) -> None:
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            for chunk in mine:
                params = outcome_params([Outcome.succeeded(f) for f in chunk])
                await conn.execute(statement, params)

    began = time.perf_counter()
    await asyncio.gather(*(client(batches[k::clients]) for k in range(clients)))
    return time.perf_counter() - began


async def main(args: argparse.Namespace) -> dict[str, Any]:
    settings = Settings(database_url=os.environ["LEDGERQ_DATABASE_URL"])
    url = libpq_url(settings.database_url)
    ledger = PgLedger(async_engine(settings, "measure-notify", pool_size=2))
    listener = await psycopg.AsyncConnection.connect(url, autocommit=True) if args.listen else None
    if listener is not None:
        await listener.execute("LISTEN ledgerq_ended")
        await PgAsyncTx(listener).announce_waiting("measure-ended-notify", 3600.0)
    rounds: list[dict[str, float]] = []
    try:
        for _ in range(args.rounds):
            row: dict[str, float] = {}
            for name in ("A", "B", "B", "A"):
                fences = await prepared(ledger, args.tasks)
                statement = SHIPPED if name == "A" else BEFORE
                seconds = await finish_all(url, statement, fences, args.batch, args.clients)
                row[name] = row.get(name, 0.0) + seconds / 2 / args.tasks * 1e6
                if listener is not None:
                    async for _ in listener.notifies(timeout=0):
                        pass
            rounds.append(
                {"A_us_per_task": round(row["A"], 2), "B_us_per_task": round(row["B"], 2)}
            )
    finally:
        if listener is not None:
            await PgAsyncTx(listener).withdraw_waiting("measure-ended-notify")
            await listener.close()
        await ledger.dispose()
    ratios = [r["A_us_per_task"] / r["B_us_per_task"] for r in rounds]
    return {
        "tasks": args.tasks,
        "batch": args.batch,
        "clients": args.clients,
        "listen": args.listen,
        "rounds": rounds,
        "median_A_us_per_task": statistics.median(r["A_us_per_task"] for r in rounds),
        "median_B_us_per_task": statistics.median(r["B_us_per_task"] for r in rounds),
        "median_ratio_A_over_B": round(statistics.median(ratios), 3),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--tasks", type=int, default=5000)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--listen", action="store_true")
    print(json.dumps(asyncio.run(main(parser.parse_args())), indent=2))
