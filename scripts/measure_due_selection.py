"""Time the relay's due selection (``select_due``) under each scheduling rule.

Usage: python scripts/measure_due_selection.py [BACKLOG] [--default-planner]

BACKLOG defaults to 20000; --default-planner measures without the relay's
planner settings (ledgerq.ledger.pg.engines.RELAY_PLANNER).

Creates/migrates the throwaway database ``ledgerq_perf_due`` on the local
server. For each case it empties the ledger, enqueues BACKLOG due tasks as a
producer does, and times 30 relay batches of 500 (``publish_batch``, rolled
back, so every batch sees the same backlog), then prints the median and the
ratio to the plain case measured in the same sitting (docs/performance.md,
"Scheduling on the relay's hot path"). Drop the database afterwards.
"""

import asyncio
import statistics
import sys
import time
from collections.abc import Callable

from sqlalchemy.orm import Session

from ledgerq import TaskSpec, enqueue_many
from ledgerq.core.config import Settings
from ledgerq.ledger.pg import PgLedger
from ledgerq.ledger.pg.engines import RELAY_PLANNER, async_engine, sync_engine
from ledgerq.ledger.pg.migrate import upgrade
from ledgerq.ledger.scheduling import RateLimit

URL = "postgresql+psycopg://postgres@127.0.0.1:5432/ledgerq_perf_due"
BATCH = 500
ROUNDS = 30


class RolledBack(Exception):
    pass


async def batch_ms(ledger: PgLedger) -> float:
    started = time.perf_counter()
    try:
        async with ledger.publish_batch(BATCH) as batch:
            assert batch.rows
            raise RolledBack
    except RolledBack:
        pass
    return (time.perf_counter() - started) * 1000


def specs(n: int, make: Callable[[int], TaskSpec]) -> list[TaskSpec]:
    return [make(i) for i in range(n)]


async def main(backlog: int) -> None:
    settings = Settings(database_url=URL, amqp_url="amqp://guest:guest@127.0.0.1:5672/")
    upgrade(settings)
    engine = sync_engine(settings, "ledgerq-perf", pool_size=1)
    cases: list[tuple[str, Callable[[int], TaskSpec], str | None]] = [
        (
            "plain (no key, nothing paused or limited)",
            lambda i: TaskSpec("k", priority=i % 10),
            None,
        ),
        ("1,000 ordering keys", lambda i: TaskSpec("k", ordering_key=f"k{i % 1000}"), None),
        ("every task its own key", lambda i: TaskSpec("k", ordering_key=f"k{i}"), None),
        (
            "a paused queue holds half, ahead",
            lambda i: TaskSpec(
                "k", queue="held" if i % 2 else "default", priority=9 if i % 2 else 0
            ),
            "pause",
        ),
        ("a rate-limited kind holds half", lambda i: TaskSpec("lim" if i % 2 else "k"), "limit"),
        (
            "1,000 ordering keys, their kind blocks",
            lambda i: TaskSpec("k", ordering_key=f"k{i % 1000}"),
            "block",
        ),
    ]
    # As the relay opens it (ledgerq.compose.open_relay), unless --default-planner.
    planner = () if "--default-planner" in sys.argv else RELAY_PLANNER
    ledger = PgLedger(async_engine(settings, "ledgerq-perf", pool_size=2, planner=planner))
    try:
        plain = 0.0
        for name, make, rule in cases:
            await ledger.truncate()
            with Session(engine) as session, session.begin():
                enqueue_many(session, specs(backlog, make))
            if rule == "pause":
                await ledger.pause("queue", "held", actor="perf")
            if rule == "block":
                await ledger.register_ordering({"k": "block"})
            if rule == "limit":
                await ledger.set_limit("lim", RateLimit.parse("100/s"), actor="perf")
            await batch_ms(ledger)  # warm
            median = statistics.median([await batch_ms(ledger) for _ in range(ROUNDS)])
            plain = plain or median
            print(f"{name:45s} {median:7.2f} ms per batch of {BATCH}  x{median / plain:.2f}")
    finally:
        await ledger.dispose()
        engine.dispose()


if __name__ == "__main__":
    numbers = [a for a in sys.argv[1:] if a.isdigit()]
    asyncio.run(main(int(numbers[0]) if numbers else 20_000))
