"""The ledger holds the queue, the broker holds a window (migration 0014):
scheduling decided in the ledger reaches work that goes through RabbitMQ, a
route is never sent more than its live consumers can start soon, and a relay
never publishes a queue that a ``--direct`` worker serves. Real PostgreSQL,
real RabbitMQ, the relay and workers as the composition root builds them."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from ledgerq import AsyncTaskContext, Registry, TaskSpec
from ledgerq.consumers.worker import WorkerConfig
from ledgerq.core.config import Settings
from ledgerq.ledger.actions import Action
from ledgerq.ledger.filters import TaskFilter
from ledgerq.ledger.pg import PgLedger
from ledgerq.relay.service import RelayConfig
from tests.harness import EFFECTS_DDL, Pipeline, db, enqueue_committed
from tests.support import spawn

#: One handler slot and one prefetched message: the window of the route is 1.
ONE_AT_A_TIME = WorkerConfig(concurrency=1, prefetch=1, lease_s=30, heartbeat_s=5, grace_s=5)


def recording(started: list[int], seconds: float = 0.0) -> Registry:
    """A registry whose one kind, ``w.job``, records the order tasks start in."""
    registry = Registry()

    @registry.task("w.job")
    async def job(payload: Any, ctx: AsyncTaskContext) -> None:
        started.append(ctx.id)
        await asyncio.sleep(seconds)

    return registry


async def until(check: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out waiting"
        await asyncio.sleep(0.02)


async def test_aging_reaches_a_low_task_under_a_stream_of_higher_priority_work(
    settings: Settings, ledger: PgLedger
) -> None:
    # One worker at concurrency 1 drains 20 ms tasks (about 50/s); producers add
    # priority-9 tasks faster than that, after one priority-0 task. Without aging
    # (or with the backlog in RabbitMQ, before the window) the low task waits for
    # the whole stream; aged after 0.5 s, it goes ahead of the younger high ones.
    started: list[int] = []
    [low] = enqueue_committed(settings, [TaskSpec("w.job", {}, priority=0)])
    high: list[int] = []

    async def stream() -> None:
        for _ in range(30):  # 300 tasks in about three seconds
            batch = [TaskSpec("w.job", {}, priority=9) for _ in range(10)]
            high.extend(await asyncio.to_thread(enqueue_committed, settings, batch))
            await asyncio.sleep(0.1)

    relay = RelayConfig(batch_size=200, confirm_timeout=5, aging_s=0.5)
    async with Pipeline(settings, recording(started, 0.02), worker=ONE_AT_A_TIME, relay=relay) as p:
        producer = asyncio.create_task(stream())
        relaying = asyncio.create_task(p.settle([low], timeout=60))
        await producer
        await relaying
        await p.settle([*high, low], timeout=90)
    ahead = started.index(low)
    assert ahead < len(high) // 2, f"{ahead} of {len(high)} high tasks went first"
    assert sorted(started) == sorted([*high, low])  # each ran once


async def test_a_raised_priority_takes_effect_before_tasks_already_waiting(
    settings: Settings, ledger: PgLedger
) -> None:
    started: list[int] = []
    waiting = enqueue_committed(settings, [TaskSpec("w.job", {}) for _ in range(40)])
    async with Pipeline(settings, recording(started, 0.02), worker=ONE_AT_A_TIME) as p:
        run = asyncio.create_task(p.settle(waiting, timeout=60))
        await until(lambda: len(started) >= 3)  # draining, one at a time
        report = await ledger.act(
            Action.set_priority(9), TaskFilter(ids=(waiting[-1],)), actor="test"
        )
        raised_at = len(started)
        await run
    assert report.changed == 1
    # Only the window (one task) and the one running can be ahead of it now.
    assert started.index(waiting[-1]) <= raised_at + 2, (started.index(waiting[-1]), raised_at)


async def test_a_route_is_never_sent_more_than_its_window(
    settings: Settings, ledger: PgLedger
) -> None:
    started: list[int] = []
    ids = enqueue_committed(settings, [TaskSpec("w.job", {}) for _ in range(300)])
    worker = WorkerConfig(concurrency=4, prefetch=8, lease_s=30, heartbeat_s=5, grace_s=5)
    samples: list[tuple[int, int]] = []
    async with Pipeline(settings, recording(started, 0.005), worker=worker) as p:
        run = asyncio.create_task(p.settle(ids, timeout=90))
        while not run.done():
            [window] = await ledger.windows()
            stats = await ledger.stats()
            samples.append((window["published"], stats["by_status"].get("published", 0)))
            assert window["capacity"] == 8
            await asyncio.sleep(0.01)
        await run
    assert max(sent for sent, _ in samples) <= 8, samples
    assert max(published for _, published in samples) <= 8, samples
    assert any(sent > 0 for sent, _ in samples)  # the sampling saw the drain
    assert sorted(started) == sorted(ids)


async def test_a_relay_never_publishes_what_a_direct_worker_serves_on_the_same_queue(
    settings: Settings, ledger: PgLedger
) -> None:
    # One queue, two kinds of worker: a --direct one for slow_app's kinds, a
    # broker one for w.job. The relay publishes w.job only.
    started: list[int] = []
    direct = enqueue_committed(
        settings, [TaskSpec("test.sync_write", {}, queue="shared") for _ in range(20)]
    )
    brokered = enqueue_committed(
        settings, [TaskSpec("w.job", {}, queue="shared") for _ in range(20)]
    )
    worker = spawn(
        settings,
        *("worker", "--app", "tests.apps.slow_app", "--direct", "--queues", "shared"),
    )
    config = WorkerConfig(queues=("shared",), concurrency=8, lease_s=30, heartbeat_s=5, grace_s=5)
    try:
        with db(settings) as conn:  # test.sync_write's table
            conn.execute(EFFECTS_DDL)
        async with Pipeline(settings, recording(started), worker=config) as pipe:
            await pipe.settle([*direct, *brokered], timeout=60)
    finally:
        worker.terminate()
        worker.communicate(timeout=30)
    shown = [await ledger.show(i) for i in direct]
    assert {row["status"] for row in shown} == {"succeeded"}
    assert all(row["published_at"] is None for row in shown)  # claimed from the ledger
    assert all([(await ledger.show(i))["published_at"] is not None for i in brokered])
    assert sorted(started) == sorted(brokered)
