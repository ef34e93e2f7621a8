"""What one statement costs the caller, by layer (docs/performance.md).

Usage: python scripts/measure_statement_cost.py [--database NAME] [--calls N]

On a database of its own (default ``ledgerq_statements``, dropped, created and
migrated), times N calls (default 200, the first 20 not counted) of:

* ``SELECT 1`` on a psycopg async connection, held;
* ``SELECT 1`` through SQLAlchemy's async engine, a connection checked out of
  its pool per call, in autocommit (what the ledger's ``_rows`` does);
* ``claim`` then ``finish`` of one task through the worker's ledger (its engine
  and planner settings), a task enqueued before each pair;

and prints the medians in ms as JSON. The event loop is uvloop, as in the
services. Run it for two trees (``PYTHONPATH=<tree>``) alternately.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import psycopg
import uvloop
from sqlalchemy import create_engine, text
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.orm import Session

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ledgerq import enqueue
from ledgerq.compose.storage import WORKER_PLANNER
from ledgerq.core.config import Settings
from ledgerq.ledger.model import Outcome
from ledgerq.ledger.pg import PgLedger
from ledgerq.ledger.pg.engines import async_engine

SKIP = 20


async def timed(calls: int, step: Callable[[], Awaitable[object]]) -> float:
    took = []
    for _ in range(calls):
        began = time.perf_counter()
        await step()
        took.append(time.perf_counter() - began)
    return round(1000 * statistics.median(took[SKIP:]), 3)


async def measure(database: str, calls: int) -> dict[str, float]:
    url = f"postgresql+psycopg://postgres@127.0.0.1:5432/{database}"
    out: dict[str, float] = {}
    raw = await psycopg.AsyncConnection.connect(
        f"host=127.0.0.1 user=postgres dbname={database}", autocommit=True
    )
    out["psycopg select 1"] = await timed(calls, lambda: raw.execute("SELECT 1"))
    await raw.close()
    engine = create_async_engine(url, pool_size=2).execution_options(isolation_level="AUTOCOMMIT")

    async def through_sqlalchemy() -> None:
        async with engine.connect() as conn:
            await conn.execute(text("SELECT 1"))

    out["sqlalchemy select 1"] = await timed(calls, through_sqlalchemy)
    await engine.engine.dispose()
    os.environ["LEDGERQ_DATABASE_URL"] = url
    ledger = PgLedger(
        async_engine(Settings.from_env(), "ledgerq-worker", pool_size=4, planner=WORKER_PLANNER)
    )
    producer = create_engine(url)
    claims, finishes = [], []
    for i in range(calls):
        with Session(producer) as session, session.begin():
            task_id = enqueue(session, "demo.noop", {"i": i})
        began = time.perf_counter()
        [won] = await ledger.claim([(task_id, 0)], "measure", 60.0)
        claimed = time.perf_counter()
        await ledger.finish([Outcome.succeeded(won.fence, None)])
        claims.append(claimed - began)
        finishes.append(time.perf_counter() - claimed)
    out["ledger claim, one task"] = round(1000 * statistics.median(claims[SKIP:]), 3)
    out["ledger finish, one task"] = round(1000 * statistics.median(finishes[SKIP:]), 3)
    await ledger.dispose()
    producer.dispose()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", default="ledgerq_statements")
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    admin = psycopg.connect("host=127.0.0.1 user=postgres dbname=postgres", autocommit=True)
    admin.execute(f'DROP DATABASE IF EXISTS "{args.database}"')
    admin.execute(f'CREATE DATABASE "{args.database}"')
    url = f"postgresql+psycopg://postgres@127.0.0.1:5432/{args.database}"
    env = dict(os.environ, LEDGERQ_DATABASE_URL=url)
    subprocess.run(
        [sys.executable, "-m", "ledgerq", "migrate"], env=env, check=True, capture_output=True
    )
    print(json.dumps(uvloop.run(measure(args.database, args.calls))))


if __name__ == "__main__":
    main()
