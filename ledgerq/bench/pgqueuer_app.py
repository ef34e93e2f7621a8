"""``ledgerq bench --direct``'s peer: pgqueuer draining ``n`` no-op jobs.

Run as ``python -m ledgerq.bench.pgqueuer_app N LIBPQ_URL`` (a child process,
like the ledgerq workers it is compared with): it installs pgqueuer's schema
afresh in the bench database, enqueues ``n`` jobs in one statement, then times
one ``QueueManager`` (psycopg driver, batch 10, pgqueuer's default) from the
first job's start to the last one's (as ledgerq's drain span), then stops it, and
prints ``{"per_s": rate}``.
pgqueuer is not a dependency of ledgerq: it comes with the dev extra.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

import psycopg
from pgqueuer import Queries, QueueManager
from pgqueuer.models import Job
from pgqueuer.types import QueueExecutionMode

BATCH = 10


async def drain(n: int, url: str) -> float:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        queries = Queries.from_psycopg_connection(conn)
        if await queries.schema_is_installed():
            await queries.uninstall()
        await queries.install()
        await queries.enqueue(["noop"] * n, [None] * n, [0] * n)
        manager = QueueManager(queries)
        marks: list[float] = []

        @manager.entrypoint("noop")
        async def noop(job: Job) -> None:
            marks.append(time.perf_counter())
            if len(marks) >= n:
                manager.shutdown.set()

        await manager.run(batch_size=BATCH, mode=QueueExecutionMode.continuous)
        await queries.uninstall()
    # As ledgerq's drain span: from the first job's start to the last one's.
    return (len(marks) - 1) / (marks[-1] - marks[0])


def main() -> None:
    n, url = int(sys.argv[1]), sys.argv[2]
    print(json.dumps({"per_s": asyncio.run(drain(n, url))}))


if __name__ == "__main__":
    main()
