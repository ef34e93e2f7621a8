"""``ledgerq bench --results N``: how soon a result() waiter returns after its task's end commits.

N tasks are enqueued and N waiters (``aresult``, one each, in this process: one
registry, one connection) wait for them. A finisher in a process of its own (as
a worker is), with a ledger of its own, ends them the worker's way (the fenced ``claim`` and
``finish`` statements of the storage seam) in batches of ``batch``, one batch
every ``pace_s``, and notes the moment each batch's ``finish`` was sent and the
moment it returned. The commit lies between the two; a waiter's latency is the
time from the send to the moment its ``aresult`` returned (the machine's
monotonic clock, one for all processes), so it is an upper bound that includes
the ``finish`` statement's own round trip. (Measured from the return instead,
a waiter woken by the notification can come back before the finisher's process
is scheduled again, and its latency reads negative.)
Reported: p50, p90, p99 and the largest, the ``finish`` round trip's median
(the bound's slack), and how many reads and notifications the waiters took.

On either server. On PostgreSQL the waiters share one registry (one LISTEN
connection, one read per wake-up); on MySQL / MariaDB each waiter polls its task
on a connection of its own (no NOTIFY: ``notifications`` is 0), so the run holds
``waiters`` connections and is refused above :data:`MYSQL_WAITERS` of them, and
its latency is the polling's (10 ms, then 1.5 times longer each read, up to 1 s).
The finisher starts once every waiter has read its task once (PostgreSQL: after
half a second, its registry reads them together; MySQL: when the reads counted
reach ``waiters``), so no waiter's first connection is timed.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import statistics
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import TYPE_CHECKING, Any

from ledgerq import TaskSpec, aresult
from ledgerq.compose.storage import async_engine, own_ledger_on, waiter_counts
from ledgerq.core.config import Settings
from ledgerq.core.errors import ConfigError
from ledgerq.ledger.model import Outcome

if TYPE_CHECKING:
    from ledgerq.ledger.protocol import SchedulingLedger

WORKER = "ledgerq-bench-results"
#: Waiters at most on MySQL / MariaDB, a connection each (MariaDB's default
#: ``max_connections`` is 151; the bench and its finisher hold a few more).
MYSQL_WAITERS = 100


def _percentile(sorted_values: Sequence[float], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def _finisher(
    url: str, ids: Sequence[int], batch: int, pace_s: float
) -> dict[int, tuple[float, float]]:
    """The finisher process's work (a process of its own, as a worker is)."""
    return asyncio.run(_finish(Settings(database_url=url), ids, batch, pace_s))


async def _finish(
    settings: Settings, ids: Sequence[int], batch: int, pace_s: float
) -> dict[int, tuple[float, float]]:
    """End ``ids`` a batch at a time; for each, when (monotonic: one clock for every
    process of the machine) the ``finish`` that ended it was sent and returned."""
    ledger = own_ledger_on(async_engine(settings, WORKER, pool_size=1))
    ended: dict[int, tuple[float, float]] = {}
    try:
        for start in range(0, len(ids), batch):
            chunk = ids[start : start + batch]
            won = await ledger.claim([(i, 0) for i in chunk], WORKER, 60.0)
            sent = time.monotonic()
            await ledger.finish([Outcome.succeeded(t.fence, "1") for t in won])
            back = time.monotonic()
            ended.update((t.id, (sent, back)) for t in won)
            await asyncio.sleep(pace_s)
    finally:
        await ledger.dispose()
    return ended


async def measure(
    settings: Settings,
    ledger: SchedulingLedger,
    waiters: int,
    batch: int = 10,
    pace_s: float = 0.005,
) -> dict[str, Any]:
    """The figure (see the module's docstring); ``ledger`` enqueues the tasks."""
    ids = await ledger.enqueue([TaskSpec("bench.result") for _ in range(waiters)])
    returned: dict[int, float] = {}

    async def wait(task_id: int) -> None:
        await aresult(settings.database_url, task_id, timeout=300)
        returned[task_id] = time.monotonic()

    waiting = [asyncio.ensure_future(wait(i)) for i in ids]
    await asyncio.sleep(0.5)  # every waiter registered and read once (PostgreSQL)
    reads, notes = await _first_reads(settings, waiters, waiting)
    spawn = multiprocessing.get_context("spawn")  # no fork under the registry's thread
    with ProcessPoolExecutor(1, mp_context=spawn) as pool:
        finishing = asyncio.get_running_loop().run_in_executor(
            pool, _finisher, settings.database_url, ids, batch, pace_s
        )
        await asyncio.gather(*waiting)
        ended = await finishing
    latencies = sorted((returned[i] - ended[i][0]) * 1000 for i in ids)
    round_trips = [(back - sent) * 1000 for sent, back in ended.values()]
    return {
        "waiters": waiters,
        "batch": batch,
        "p50_ms": round(statistics.median(latencies), 2),
        "p90_ms": round(_percentile(latencies, 0.90), 2),
        "p99_ms": round(_percentile(latencies, 0.99), 2),
        "max_ms": round(latencies[-1], 2),
        "finish_p50_ms": round(statistics.median(round_trips), 2),
        "reads": waiter_counts(settings)[0] - reads,
        "notifications": waiter_counts(settings)[1] - notes,
    }


def check_waiters(settings: Settings, waiters: int) -> None:
    """One line (exit 78) for more waiters than MySQL's connections allow."""
    if settings.on_mysql and waiters > MYSQL_WAITERS:
        raise ConfigError(
            f"bench --results {waiters}: at most {MYSQL_WAITERS} on MySQL / MariaDB, where "
            "each result() waiter polls on a connection of its own"
        )


async def _first_reads(
    settings: Settings, waiters: int, waiting: Sequence[asyncio.Future[None]]
) -> tuple[int, int]:
    """The counts once every waiter has read its task once (on MySQL, where each
    counts its own reads: at least ``waiters`` of them; a waiter that failed
    ends the wait, its error raised by the caller's gather)."""
    deadline = time.monotonic() + 120
    while settings.on_mysql and waiter_counts(settings)[0] < waiters:
        if any(w.done() for w in waiting) or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.05)
    return waiter_counts(settings)
