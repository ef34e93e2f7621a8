"""The main path end to end, on the real PostgreSQL and RabbitMQ."""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import Any

import pika
import pytest
from sqlalchemy import text
from sqlalchemy.orm import Session

from ledgerq import AsyncTaskContext, Registry, RegistryError, TaskContext, TaskSpec, enqueue
from ledgerq.broker.base import PublishOutcome
from ledgerq.consumers.worker import WorkerConfig
from ledgerq.core.config import Settings
from ledgerq.ledger.model import DueTask, Finished
from ledgerq.ledger.pg import PgLedger
from ledgerq.ledger.pg.engines import sync_engine
from tests.harness import (
    EFFECTS_DDL,
    Pipeline,
    db,
    effects,
    enqueue_committed,
    subscribe_queues,
)


@pytest.fixture
def effects_table(settings: Settings) -> Settings:
    with db(settings) as conn:
        conn.execute(EFFECTS_DDL)
    return settings


async def test_rolled_back_enqueue_never_runs_and_committed_one_runs_once(
    settings: Settings, ledger: PgLedger
) -> None:
    registry = Registry()
    ran: list[int] = []

    @registry.task("t.record")
    async def record(payload: Any, ctx: AsyncTaskContext) -> None:
        ran.append(payload["n"])

    engine = sync_engine(settings, "test-producer", pool_size=1)
    with Session(engine) as session, session.begin():
        enqueue(session, "t.record", {"n": 1})
        session.rollback()
    with Session(engine) as session, session.begin():
        kept = enqueue(session, "t.record", {"n": 2})
    engine.dispose()

    async with Pipeline(settings, registry) as pipe:
        done = await pipe.settle([kept])
        await pipe.relay.run_once()  # nothing else is due: the rolled-back task never was

    assert done == {kept: "succeeded"}
    assert ran == [2]
    # One task in the whole ledger, and it is finished: no live row, one in history.
    stats = await ledger.stats()
    assert (stats["total"], stats["by_status"]) == (1, {"succeeded": 1})
    finished = await ledger.show(kept)
    assert finished["attempts"] == 1 and finished["location"] == "history"
    assert finished["published_at"] is not None and finished["finished_at"] is not None


async def test_failing_handler_retries_on_schedule_then_ends_dead_with_alert(
    settings: Settings, ledger: PgLedger
) -> None:
    registry = Registry()
    attempts: list[float] = []
    alerts: list[Finished] = []

    @registry.task("t.fail")
    def always_fails(payload: Any, ctx: TaskContext) -> None:
        attempts.append(time.monotonic())
        raise ValueError(f"boom on attempt {ctx.attempt}")

    [task_id] = enqueue_committed(
        settings, [TaskSpec("t.fail", {}, max_attempts=3, retry=[0.3, 0.6])]
    )

    async with Pipeline(settings, registry, alert=alerts.append) as pipe:
        await pipe.settle([task_id])

    assert len(attempts) == 3
    gaps = [b - a for a, b in itertools.pairwise(attempts)]
    assert gaps[0] >= 0.3 and gaps[1] >= 0.6, gaps  # the schedule is a floor
    dead = await ledger.show(task_id)
    assert dead["status"] == "dead" and dead["location"] == "history"
    assert dead["attempts"] == 3
    assert "boom on attempt 3" in dead["last_error"]
    assert [a.id for a in alerts] == [task_id]


async def test_duplicate_delivery_of_finished_task_is_acked_without_running(
    settings: Settings, ledger: PgLedger
) -> None:
    registry = Registry()
    runs: list[int] = []

    @registry.task("t.once")
    async def once(payload: Any, ctx: AsyncTaskContext) -> None:
        runs.append(ctx.id)

    [task_id] = enqueue_committed(settings, [TaskSpec("t.once", {})])

    async with Pipeline(settings, registry) as pipe:
        await pipe.settle([task_id])
        # The broker hands the same message over again (as after a lost ack).
        route = pipe.worker.subscriptions[0].route  # the broker queue the worker reads
        stale = DueTask(task_id, "t.once", "default", 0, epoch=0, route=route)
        assert await pipe.relay.publisher.publish_many([(stale,)], 5) == [PublishOutcome.CONFIRMED]
        deadline = time.monotonic() + 10
        while pipe.worker.counts.skipped < 1 and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        skipped = pipe.worker.counts.skipped

    assert skipped == 1
    assert runs == [task_id]
    assert await ledger.whereabouts([task_id]) == {task_id: "succeeded"}


async def test_handler_writes_commit_with_the_status_or_not_at_all(
    effects_table: Settings, ledger: PgLedger
) -> None:
    settings = effects_table
    registry = Registry()

    @registry.task("t.write_then_fail_once")
    async def write_then_fail_once(payload: Any, ctx: AsyncTaskContext) -> None:
        await ctx.session.execute(
            text("INSERT INTO test_effects (task_id, attempt) VALUES (:i, :a)"),
            {"i": ctx.id, "a": ctx.attempt},
        )
        if ctx.attempt == 1:
            raise RuntimeError("fail after writing")

    @registry.task("t.write_then_lose_fence")
    def write_then_lose_fence(payload: Any, ctx: TaskContext) -> None:
        ctx.session.execute(
            text("INSERT INTO test_effects (task_id, attempt) VALUES (:i, :a)"),
            {"i": ctx.id, "a": ctx.attempt},
        )
        if ctx.attempt == 1:  # a rescuer takes the task over while this attempt runs
            # Simulates the fault: the row is rescued behind the worker's back
            # (back to pending under a newer epoch), so this attempt's fence is lost.
            with db(settings) as conn:
                conn.execute(
                    "UPDATE ledgerq_tasks SET status = 'pending', epoch = epoch + 1 WHERE id = %s",
                    (ctx.id,),
                )

    first, second = enqueue_committed(
        settings,
        [
            TaskSpec("t.write_then_fail_once", {}, retry=[0.1]),
            TaskSpec("t.write_then_lose_fence", {}, retry=[0.1]),
        ],
    )

    async with Pipeline(settings, registry) as pipe:
        await pipe.settle([first])
        # The rescued task needs a new publication; the relay finds it pending.
        await pipe.settle([second])

    assert await ledger.whereabouts([first, second]) == {
        first: "succeeded",
        second: "succeeded",
    }
    # Each task's first attempt wrote and did not commit; only the winning attempt's
    # write exists, exactly once.
    assert sorted(effects(settings)) == [(first, 2), (second, 2)]


async def test_unroutable_publish_keeps_the_row_pending(
    settings: Settings, ledger: PgLedger
) -> None:
    registry = Registry()

    @registry.task("t.noop")
    async def noop(payload: Any, ctx: AsyncTaskContext) -> None:
        return None

    async with Pipeline(settings, registry, start_worker=False) as pipe:
        await subscribe_queues(pipe.ledger, "nowhere")  # a consumer's window, no worker
        enqueue_committed(settings, [TaskSpec("t.noop", {}, queue="nowhere")])
        assert (await pipe.relay.run_once()).published == 1  # declares its queue
        # An operator deletes the queue: the relay's next publish is unroutable.
        conn = pika.BlockingConnection(pika.URLParameters(settings.amqp_url))
        conn.channel().queue_delete(pipe.topology.task_queue("nowhere").name)
        conn.close()
        [task_id] = enqueue_committed(settings, [TaskSpec("t.noop", {}, queue="nowhere")])
        counts = await pipe.relay.run_once()
        assert (counts.claimed, counts.returned, counts.published) == (1, 1, 0)
        assert await pipe.statuses([task_id]) == {task_id: "pending"}
        # The relay re-declares the queue it found missing; the next batch delivers.
        again = await pipe.relay.run_once()

    assert again.published == 1
    assert await ledger.whereabouts([task_id]) == {task_id: "published"}


async def test_two_relays_do_not_publish_the_same_row(settings: Settings, ledger: PgLedger) -> None:
    registry = Registry()
    ids = enqueue_committed(settings, [TaskSpec("t.noop", {"i": i}) for i in range(400)])

    async with (
        Pipeline(settings, registry, start_worker=False) as a,
        Pipeline(settings, registry, start_worker=False) as b,
    ):
        await subscribe_queues(ledger)  # a window larger than the backlog, no worker
        totals = await asyncio.gather(*(r.relay.run_once() for r in (a, b, a, b)))
    claimed, published = sum(t.claimed for t in totals), sum(t.published for t in totals)

    assert claimed == published == len(ids)
    assert set((await ledger.whereabouts(ids)).values()) == {"published"}


async def test_a_kind_no_worker_registers_waits_unattempted_then_runs_once_one_does(
    settings: Settings, ledger: PgLedger
) -> None:
    old, new = Registry(), Registry()

    @old.task("t.known")
    async def known(payload: Any, ctx: AsyncTaskContext) -> None:
        pass

    ran: list[int] = []

    @new.task("t.known")
    async def known_too(payload: Any, ctx: AsyncTaskContext) -> None:
        pass

    @new.task("t.newkind")
    async def newkind(payload: Any, ctx: AsyncTaskContext) -> None:
        ran.append(ctx.id)

    [known_id, new_id] = enqueue_committed(
        settings, [TaskSpec("t.known", {}), TaskSpec("t.newkind", {}, max_attempts=1)]
    )
    async with Pipeline(settings, old) as pipe:
        assert await pipe.settle([known_id]) == {known_id: "succeeded"}
        for _ in range(3):  # the relay passes over it: no live worker registers its kind
            await pipe.relay.run_once()
        waiting = await ledger.show(new_id)
        assert (waiting["status"], waiting["attempts"]) == ("pending", 0)
        unserved = await ledger.unserved()
        assert [(u["kind"], u["tasks"]) for u in unserved] == [("t.newkind", 1)]

    # a rolling deploy: the old worker still runs beside the new one
    async with Pipeline(settings, old) as keep, Pipeline(settings, new) as pipe:
        assert keep.worker.subscriptions != pipe.worker.subscriptions
        assert await pipe.settle([new_id]) == {new_id: "succeeded"}
    assert ran == [new_id]
    assert (await ledger.show(new_id))["attempts"] == 1
    assert await ledger.unserved() == []


async def test_message_naming_no_task_is_dead_lettered_or_acked(settings: Settings) -> None:
    registry = Registry()

    async with Pipeline(settings, registry) as pipe:
        conn = pika.BlockingConnection(pika.URLParameters(settings.amqp_url))
        channel = conn.channel()
        queue = pipe.topology.task_queue(pipe.worker.subscriptions[0].broker_name)
        channel.basic_publish(queue.exchange, queue.routing_key, b"not json")
        channel.basic_publish(queue.exchange, queue.routing_key, b'{"id": 999999, "epoch": 0}')
        deadline = time.monotonic() + 10
        while (
            pipe.worker.counts.rejected + pipe.worker.counts.skipped < 2
            and time.monotonic() < deadline
        ):
            await asyncio.sleep(0.02)
        dead_letters = channel.queue_declare(pipe.topology.dead_letter_queue.name, passive=True)
        conn.close()
        rejected, dead_lettered = (
            pipe.worker.counts.rejected,
            int(dead_letters.method.message_count or 0),
        )

    assert rejected == 1 and dead_lettered == 1


def test_worker_config_validates() -> None:
    with pytest.raises(ValueError, match="concurrency"):
        WorkerConfig(concurrency=0)
    with pytest.raises(ValueError, match="heartbeat"):
        WorkerConfig(lease_s=10, heartbeat_s=20)


async def test_a_task_that_always_hangs_ends_dead(settings: Settings, ledger: PgLedger) -> None:
    registry = Registry()

    @registry.task("t.hang")
    async def hang(payload: Any, ctx: AsyncTaskContext) -> None:
        await asyncio.sleep(3600)

    [task_id] = enqueue_committed(settings, [TaskSpec("t.hang", {}, max_attempts=2, retry=[0.05])])
    config = WorkerConfig(concurrency=2, lease_s=30, heartbeat_s=5, default_timeout_s=0.2)

    async with Pipeline(settings, registry, worker=config) as pipe:
        await pipe.settle([task_id])

    dead = await ledger.show(task_id)
    assert (dead["status"], dead["attempts"]) == ("dead", 2)
    assert "timed out after 0.2 s" in dead["last_error"]


async def test_group_commit_shares_one_transaction_and_falls_back_per_task(
    effects_table: Settings, ledger: PgLedger
) -> None:
    settings = effects_table
    registry = Registry()

    @registry.task("t.grouped", group_commit=True)
    async def grouped(payload: Any, ctx: AsyncTaskContext) -> None:
        await ctx.session.execute(
            text("INSERT INTO test_effects (task_id, attempt) VALUES (:i, txid_current())"),
            {"i": ctx.id},
        )
        if payload.get("fail") and ctx.attempt == 1:
            raise RuntimeError("one bad apple")

    specs = [TaskSpec("t.grouped", {"n": i}, retry=[0.05]) for i in range(60)]
    specs.append(TaskSpec("t.grouped", {"fail": True}, retry=[0.05]))
    ids = enqueue_committed(settings, specs)

    # The relay sends the backlog in envelopes of several tasks, each claimed in
    # one statement, so the group commits together what arrives together.
    async with Pipeline(settings, registry) as pipe:
        await pipe.settle(ids)

    assert set((await ledger.whereabouts(ids)).values()) == {"succeeded"}
    written = effects(settings)
    assert sorted(t for t, _ in written) == sorted(ids)  # exactly one effect per task
    transactions = {txid for _, txid in written}
    assert len(transactions) < len(ids) / 2, len(transactions)  # commits were shared
    assert (await ledger.show(ids[-1]))["attempts"] == 2  # the failing one retried on its own


def test_group_commit_needs_an_async_handler() -> None:
    registry = Registry()
    with pytest.raises(RegistryError, match="group_commit needs an async handler"):
        registry.task("t.sync", group_commit=True)(lambda payload, ctx: None)
