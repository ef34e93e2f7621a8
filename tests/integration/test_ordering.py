"""Ordering keys (issue 14): tasks that share an ordering key run one at a time, in
the order their transactions committed, across any number of relays and workers.

The relay's ``select_due`` publishes a keyed task only when no other live task of
its key is ahead of it (published or running, or pending with a smaller id): a
retried task holds back the later ones until it ends; a dead one releases the next,
unless its kind was registered with ``ordering="block"``.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import defaultdict
from contextlib import AsyncExitStack
from itertools import pairwise
from typing import Any

import psycopg

from ledgerq import Action, Registry, RetryPolicy, TaskFilter, TaskSpec
from ledgerq.consumers.worker import WorkerConfig
from ledgerq.core.config import Settings
from ledgerq.ledger.model import Outcome
from ledgerq.ledger.pg import PgLedger
from ledgerq.ledger.pg.engines import libpq_url
from ledgerq.relay.service import RelayConfig
from tests.harness import Pipeline, Poll, enqueue_committed, subscribe_queues


async def due(ledger: PgLedger) -> list[int]:
    """What a relay batch publishes now (marked published), to a live whole-queue
    subscriber whose window never limits it here."""
    await subscribe_queues(ledger, "default")
    async with ledger.publish_batch(100) as batch:
        return sorted(await batch.mark_published(batch.rows))


async def test_one_task_per_key_is_out_at_a_time_and_a_retry_holds_the_rest(
    settings: Settings, ledger: PgLedger
) -> None:
    a1, a2, a3 = enqueue_committed(settings, [TaskSpec("t.o", ordering_key="a") for _ in range(3)])
    b1, free = enqueue_committed(settings, [TaskSpec("t.o", ordering_key="b"), TaskSpec("t.o")])
    assert await due(ledger) == [a1, b1, free]
    assert await due(ledger) == []  # a1 and b1 are out: their keys wait
    [run] = await ledger.claim([(a1, 0)], "w", 30)
    await ledger.finish([Outcome.failed(run.fence, "boom", delay=0.0)])
    assert await due(ledger) == [a1]  # the retry goes again, a2 still waits behind it
    [run] = await ledger.claim([(a1, 1)], "w", 30)
    await ledger.finish([Outcome.failed(run.fence, "boom again", final=True)])
    assert await due(ledger) == [a2]  # a dead task releases the next
    [run] = await ledger.claim([(a2, 0)], "w", 30)
    await ledger.finish([Outcome.succeeded(run.fence)])
    assert await due(ledger) == [a3]


async def test_a_retry_waiting_out_its_backoff_holds_its_key(
    settings: Settings, ledger: PgLedger
) -> None:
    first, _second = enqueue_committed(
        settings, [TaskSpec("t.o", ordering_key="k") for _ in range(2)]
    )
    assert await due(ledger) == [first]
    [run] = await ledger.claim([(first, 0)], "w", 30)
    await ledger.finish([Outcome.failed(run.fence, "boom", delay=3600.0)])
    assert await due(ledger) == []


async def test_four_workers_run_each_key_one_at_a_time_in_commit_order(
    settings: Settings,
) -> None:
    """4 relays and 4 workers (concurrency 8 each); 12 keys of 8 tasks, each task
    committed in its own transaction, keys interleaved; one task in five fails its
    first attempt. Per key: no two runs overlap, and the tasks ran in commit order."""
    runs: dict[str, list[tuple[int, float, float, bool]]] = defaultdict(list)
    failed_once: set[int] = set()
    registry = Registry()

    @registry.task("t.ordered")
    async def ordered(payload: dict[str, Any], ctx: Any) -> None:
        started = time.monotonic()
        await asyncio.sleep(random.uniform(0, 0.02))
        fails = payload["seq"] % 5 == 2 and ctx.task.id not in failed_once
        runs[payload["key"]].append((payload["seq"], started, time.monotonic(), fails))
        if fails:
            failed_once.add(ctx.task.id)
            raise RuntimeError("first attempt fails")

    committed: dict[str, list[int]] = defaultdict(list)
    for seq in range(8):
        for k in range(12):
            key = f"account-{k}"
            spec = TaskSpec(
                "t.ordered",
                {"key": key, "seq": seq},
                ordering_key=key,
                retry=RetryPolicy.fixed(0.1),
            )
            committed[key] += enqueue_committed(settings, [spec])
    ids = [i for key_ids in committed.values() for i in key_ids]
    worker = WorkerConfig(concurrency=8, lease_s=30, heartbeat_s=5, grace_s=5)
    relay = RelayConfig(batch_size=50, poll_interval=0.05, confirm_timeout=5)
    stop = asyncio.Event()
    async with AsyncExitStack() as stack:
        pipes = [
            await stack.enter_async_context(
                Pipeline(settings, registry, worker=worker, relay=relay)
            )
            for _ in range(4)
        ]
        loops = [asyncio.create_task(p.relay.run(stop, Poll())) for p in pipes]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            statuses = await pipes[0].statuses(ids)
            if set(statuses.values()) == {"succeeded"}:
                break
            await asyncio.sleep(0.2)
        stop.set()
        await asyncio.gather(*loops)
    assert set(statuses.values()) == {"succeeded"}
    for key, attempts in runs.items():
        attempts.sort(key=lambda r: r[1])
        for (_, _, ended, _), (_, began, _, _) in pairwise(attempts):
            assert ended <= began, f"{key}: two runs overlapped"
        succeeded = [seq for seq, _, _, failed in attempts if not failed]
        assert succeeded == list(range(8)), f"{key} ran out of commit order: {succeeded}"
    assert len(failed_once) == 12 * 2  # seq 2 and 7 of each key failed once, and held theirs


async def test_a_worker_that_dies_holds_its_key_until_its_lease_is_expired(
    settings: Settings, ledger: PgLedger
) -> None:
    """The worker holding a key's task dies (it never finishes, its lease runs out):
    the key's later tasks wait; the reconciler expires the lease, the task is retried
    first, and the rest follow in order."""
    first, second = enqueue_committed(
        settings, [TaskSpec("t.o", ordering_key="k", retry=RetryPolicy.fixed(0)) for _ in range(2)]
    )
    assert await due(ledger) == [first]
    await ledger.claim([(first, 0)], "dead-worker", 30)
    assert await due(ledger) == []
    with psycopg.connect(libpq_url(settings.database_url), autocommit=True) as conn:
        conn.execute("UPDATE ledgerq_tasks SET lease_until = now() - interval '1 minute'")
    assert await due(ledger) == []  # an expired lease still holds the key
    silent = await ledger.silent_workers()
    async with ledger.expired_batch(0, 100, silent, 60) as expired:
        assert [r.id for r in expired.rows] == [first]
        await expired.finish([r.outcome() for r in expired.rows])
    assert await due(ledger) == [first]  # retried, ahead of the second
    [run] = await ledger.claim([(first, 1)], "w", 30)
    await ledger.finish([Outcome.succeeded(run.fence)])
    assert await due(ledger) == [second]


async def test_a_blocking_kind_holds_its_key_on_death_until_an_operator_acts(
    settings: Settings, ledger: PgLedger
) -> None:
    """``@task(..., ordering="block")``: a dead task holds its key. The operator
    retries it (it goes first again), or retries and cancels it (the key moves on)."""
    registry = Registry()
    registry.task("t.block", ordering="block")(lambda payload, ctx: None)
    registry.task("t.release")(lambda payload, ctx: None)
    assert await ledger.register_ordering(registry.orderings()) == ["t.block"]
    assert await ledger.register_ordering(registry.orderings()) == []  # unchanged: no write
    first, second = enqueue_committed(
        settings, [TaskSpec("t.block", ordering_key="k"), TaskSpec("t.release", ordering_key="k")]
    )

    async def dies(task_id: int, epoch: int) -> None:
        assert await due(ledger) == [task_id]
        [run] = await ledger.claim([(task_id, epoch)], "w", 30)
        await ledger.finish([Outcome.failed(run.fence, "boom", final=True)])

    await dies(first, 0)
    assert await due(ledger) == []  # held by the dead task
    await ledger.act(Action.retry(), TaskFilter(ids=(first,)), actor="ops")
    await dies(first, 2)
    assert await due(ledger) == []
    await ledger.act(Action.retry(), TaskFilter(ids=(first,)), actor="ops")
    await ledger.act(Action.cancel(), TaskFilter(ids=(first,)), actor="ops")
    assert await due(ledger) == [second]
    # The same death of a "release" kind lets the key move on at once.
    third, fourth = enqueue_committed(
        settings, [TaskSpec("t.release", ordering_key="j"), TaskSpec("t.release", ordering_key="j")]
    )
    await dies(third, 0)
    assert await due(ledger) == [fourth]


async def test_the_end_of_a_keyed_task_wakes_the_relays_when_the_next_of_its_key_waits(
    settings: Settings, ledger: PgLedger
) -> None:
    """The finish frees a key on commit; nothing else would wake the relays (the
    claims' wake-ups came while the key was held), so without this the key's next
    task waited for the relays' poll, a second on PostgreSQL. Only that finish
    notifies: the others must not pay NOTIFY's serialised commit."""
    a1, a2 = enqueue_committed(settings, [TaskSpec("t.o", ordering_key="a") for _ in range(2)])
    b1, free = enqueue_committed(settings, [TaskSpec("t.o", ordering_key="b"), TaskSpec("t.o")])
    assert await due(ledger) == [a1, b1, free]
    runs = {r.id: r for r in await ledger.claim([(a1, 0), (b1, 0), (free, 0)], "w", 30)}
    with psycopg.connect(libpq_url(settings.database_url), autocommit=True) as listener:
        listener.execute("LISTEN ledgerq_enqueued")
        # an unkeyed task, and a keyed one whose key has nothing waiting: no wake-up
        await ledger.finish([Outcome.succeeded(runs[free].fence)])
        await ledger.finish([Outcome.succeeded(runs[b1].fence)])
        with psycopg.connect(libpq_url(settings.database_url), autocommit=True) as other:
            other.execute("NOTIFY ledgerq_enqueued, 'sentinel'")  # delivered in commit order
        before = [n.payload for n in listener.notifies(timeout=10, stop_after=1)]
        assert before == ["sentinel"]
        await ledger.finish([Outcome.succeeded(runs[a1].fence)])
        after = [n.payload for n in listener.notifies(timeout=10, stop_after=1)]
        assert after == [""]
    assert await due(ledger) == [a2]
