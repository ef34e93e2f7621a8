"""Choosing work (issue 14): ``--kinds``, ``--shards`` and per-queue concurrency,
on the real ledger and broker.

Routing, not filtering: a kind or shard no live worker serves is never
published, so it waits ``pending`` in the ledger with no attempt recorded (and
``unserved`` counts it), and a worker that serves it later drains it, with no
change on the producer's side. Every task runs exactly once.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import AsyncExitStack
from dataclasses import replace
from typing import Any

import pika
import psycopg
import pytest

from ledgerq import Registry, TaskSpec, enqueue
from ledgerq.broker.topology import Topology
from ledgerq.compose import open_worker
from ledgerq.consumers.worker import WorkerConfig
from ledgerq.core.config import Settings
from ledgerq.core.errors import InvalidTaskError
from ledgerq.ledger.pg import PgLedger
from ledgerq.ledger.pg.engines import libpq_url
from ledgerq.ledger.routing import routing_key
from ledgerq.ledger.sharding import shard_of
from tests.harness import Pipeline, enqueue_committed
from tests.support import ledgerq


@pytest.fixture(autouse=True)
def delete_routed_queues(settings: Settings) -> Iterator[None]:
    """The broker queues these tests' workers subscribed to (routed ones, and the
    queues outside tests.conftest.TEST_QUEUES), deleted after each test."""
    yield
    with psycopg.connect(libpq_url(settings.database_url), autocommit=True) as db:
        rows = db.execute("SELECT DISTINCT queue, route FROM ledgerq_subscriptions").fetchall()
    topology = Topology(settings.amqp_prefix)
    connection = pika.BlockingConnection(pika.URLParameters(settings.amqp_url))
    try:
        channel = connection.channel()
        for queue, route in rows:
            channel.queue_delete(topology.task_queue(routing_key(queue, route)).name)
            channel.queue_delete(topology.task_queue(queue).name)
    finally:
        connection.close()


def counting_registry(runs: Counter[int], *kinds: str) -> Registry:
    registry = Registry()

    async def record(payload: dict[str, Any], ctx: Any) -> None:
        runs[ctx.task.id] += 1

    for kind in kinds:
        registry.task(kind)(record)
    return registry


def lane(**changes: Any) -> WorkerConfig:
    return replace(WorkerConfig(concurrency=8, lease_s=30, heartbeat_s=5, grace_s=5), **changes)


@pytest.mark.parametrize("queue_type", ["classic", "quorum"])
async def test_a_worker_with_kinds_serves_only_them_and_the_rest_waits_in_the_ledger(
    settings: Settings, ledger: PgLedger, queue_type: str
) -> None:
    settings = replace(settings, queue_type=queue_type)
    runs: Counter[int] = Counter()
    registry = counting_registry(runs, "r.a", "r.b")
    served = enqueue_committed(settings, [TaskSpec("r.a") for _ in range(5)])
    waiting = enqueue_committed(settings, [TaskSpec("r.b") for _ in range(4)])
    async with Pipeline(settings, registry, worker=lane(kinds=frozenset({"r.a"}))) as pipe:
        assert set((await pipe.settle(served)).values()) == {"succeeded"}
        for _ in range(3):
            await pipe.relay.run_once()
        assert set((await pipe.statuses(waiting)).values()) == {"pending"}
        for task_id in waiting:
            row = await ledger.show(task_id)
            assert (row["attempts"], row["epoch"], row["publishes"]) == (0, 0, 0)
        assert [(u["queue"], u["kind"], u["tasks"]) for u in await ledger.unserved()] == [
            ("default", "r.b", 4)
        ]
        stats = json.loads(ledgerq(settings, "stats", "--json").stdout)
        assert [(u["kind"], u["tasks"]) for u in stats["unserved"]] == [("r.b", 4)]
        serving = {
            (w["worker"], tuple(w["kinds"])) for w in stats["workers"] if w["queue"] == "default"
        }
        assert serving == {(pipe.worker.config.worker_id, ("r.a",))}
        text = ledgerq(settings, "stats").stdout
        assert "live workers" in text and pipe.worker.config.worker_id in text
        # A second worker, serving r.b, drains them; nothing changed for the producer.
        async with open_worker(settings, registry, lane(kinds=frozenset({"r.b"}))):
            assert set((await pipe.settle(waiting)).values()) == {"succeeded"}
        assert await ledger.unserved() == []
    assert runs == Counter({i: 1 for i in served + waiting})


async def test_shards_route_to_the_workers_that_serve_them_and_wait_otherwise(
    settings: Settings, ledger: PgLedger, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LEDGERQ_SHARDS", "4")
    runs: Counter[int] = Counter()
    registry = counting_registry(runs, "r.s")
    keys = [f"account-{n}" for n in range(40)]
    ids = enqueue_committed(settings, [TaskSpec("r.s", shard_key=key) for key in keys])
    shard = {i: shard_of(key, i, 4) for i, key in zip(ids, keys, strict=True)}
    for task_id in ids:
        assert (await ledger.show(task_id))["shard"] == shard[task_id]
    low = [i for i in ids if shard[i] < 2]
    high = [i for i in ids if shard[i] >= 2]
    assert low and high
    first = lane(shards=frozenset({0, 1}))
    async with Pipeline(settings, registry, worker=first) as pipe:
        assert set((await pipe.settle(low)).values()) == {"succeeded"}
        for _ in range(3):
            await pipe.relay.run_once()
        assert set((await pipe.statuses(high)).values()) == {"pending"}
        assert {u["shard"] for u in await ledger.unserved()} == {2, 3}
    # The worker restarts serving the other shards: the waiting tasks drain.
    async with Pipeline(settings, registry, worker=lane(shards=frozenset({2, 3}))) as pipe:
        assert set((await pipe.settle(high)).values()) == {"succeeded"}
    assert runs == Counter({i: 1 for i in ids})


async def test_a_slow_queue_full_of_slow_tasks_does_not_hold_back_the_fast_queue(
    settings: Settings,
) -> None:
    ended: dict[int, float] = {}
    slow_started, fast_settled = asyncio.Event(), asyncio.Event()
    registry = Registry()

    @registry.task("r.slow")
    async def slow(payload: dict[str, Any], ctx: Any) -> None:
        # Busy until the fast queue has drained, then a second more: the slow lane is
        # occupied the whole time by construction, not by outrunning a clock.
        slow_started.set()
        await asyncio.wait_for(fast_settled.wait(), 60)
        await asyncio.sleep(1.0)
        ended[ctx.task.id] = time.monotonic()

    @registry.task("r.fast")
    async def fast(payload: dict[str, Any], ctx: Any) -> None:
        ended[ctx.task.id] = time.monotonic()

    slow_ids = enqueue_committed(settings, [TaskSpec("r.slow", queue="slow") for _ in range(4)])
    async with Pipeline(settings, registry, start_worker=False) as pipe, AsyncExitStack() as lanes:
        # What `ledgerq worker --queues fast=4,slow=1` runs: one lane per queue.
        await lanes.enter_async_context(
            open_worker(settings, registry, lane(queues=("slow",), concurrency=1))
        )
        await lanes.enter_async_context(
            open_worker(settings, registry, lane(queues=("fast",), concurrency=4))
        )
        await pipe.relay.run_once()
        await asyncio.wait_for(slow_started.wait(), 10)
        fast_ids = enqueue_committed(
            settings, [TaskSpec("r.fast", queue="fast") for _ in range(20)]
        )
        assert set((await pipe.settle(fast_ids, timeout=10)).values()) == {"succeeded"}
        fast_done = max(ended[i] for i in fast_ids)
        # The slow lane is still busy with its queue: at most one slow task ended.
        assert sum(1 for i in slow_ids if i in ended) <= 1
        fast_settled.set()
        assert set((await pipe.settle(slow_ids, timeout=30)).values()) == {"succeeded"}
    assert fast_done < max(ended[i] for i in slow_ids) - 1.0


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--shards", "0-9"], "shard 9 does not exist; LEDGERQ_SHARDS=4 gives shards 0-3"),
        (["--kinds", "test.nope"], "--kinds names 'test.nope', which tests.apps.slow_app has no"),
        (["--queues", "fast=2,slow"], "give every queue a concurrency (fast=50,slow=2) or none"),
    ],
)
def test_the_worker_refuses_bad_routing_flags_in_one_line(
    settings: Settings, flags: list[str], says: str
) -> None:
    done = ledgerq(settings, "worker", "--app", "tests.apps.slow_app", *flags, LEDGERQ_SHARDS="4")
    assert done.returncode == 64  # EX_USAGE
    assert says in " ".join(done.stderr.split())


async def test_a_task_without_a_shard_key_takes_its_shard_from_its_id(
    settings: Settings, ledger: PgLedger, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LEDGERQ_SHARDS", "3")
    ids = enqueue_committed(settings, [TaskSpec("r.s") for _ in range(6)])
    with psycopg.connect(libpq_url(settings.database_url), autocommit=True) as conn:
        ids.append(enqueue(conn, "r.s"))  # the one-row INSERT
        ids.append(enqueue(conn, "r.s", shard=2))
        shards = [(await ledger.show(i))["shard"] for i in ids]
        assert shards == [i % 3 for i in ids[:-1]] + [2]
        monkeypatch.setenv("LEDGERQ_SHARDS", "1")
        assert (await ledger.show(enqueue(conn, "r.s")))["shard"] == 0
    with pytest.raises(InvalidTaskError, match="give shard or shard_key, not both"):
        TaskSpec("r.s", shard=1, shard_key="k")
