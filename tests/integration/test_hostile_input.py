"""Hostile input on the real PostgreSQL and RabbitMQ: poison message bodies, forged
messages, payloads inserted behind the producer's back, and bad producer input
inside a caller's open transaction.

Raw SQL and raw AMQP here are the attacks (or a simulated clock); every check of
where a task is goes through the storage seam.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Callable
from typing import Any

import pika
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from ledgerq import (
    AsyncTaskContext,
    InvalidTaskError,
    Registry,
    TaskSpec,
    aenqueue,
    aenqueue_many,
    enqueue,
    enqueue_many,
)
from ledgerq.broker.base import PublishOutcome
from ledgerq.broker.topology import Topology
from ledgerq.consumers.intake import MAX_BODY_BYTES
from ledgerq.consumers.worker import WorkerConfig
from ledgerq.core.config import Settings
from ledgerq.ledger.model import DueTask, Finished
from ledgerq.ledger.pg import PgLedger
from ledgerq.ledger.pg.engines import async_engine, sync_engine
from ledgerq.ledger.validation import MAX_CLAIM_PAYLOAD_BYTES
from tests.harness import EFFECTS_DDL, Pipeline, db, enqueue_committed, subscribe_like_worker
from tests.support import ledgerq

POISON = [
    b"[" * 200_000,
    b"[" * 200_000,
    b"[" * 200_000,
    b"[" * 1020,  # within the size bound: the decoder's RecursionError
    b"{" * 900,
    b'{"id": 1, "epoch": 0, "x": "\xff\xfe"}',
    b'{"id": "1", "epoch": 0}',
    b"",
    b"null",
    b'{"id": 1, "epoch": 0}' + b" " * MAX_BODY_BYTES,  # a valid body, over the bound
    b'{"tasks": []}',  # an envelope of nothing
    b'{"tasks": [[1, 0], [1, 0]]}',  # an envelope naming one task twice
    b"\x00\x01\x02",
    b"[1, 0]",
]


def amqp(settings: Settings) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.URLParameters(settings.amqp_url))


def queue_depth(settings: Settings, name: str) -> int:
    conn = amqp(settings)
    try:
        return int(conn.channel().queue_declare(name, passive=True).method.message_count or 0)
    finally:
        conn.close()


def drain_bodies(settings: Settings, name: str) -> list[bytes]:
    conn = amqp(settings)
    bodies: list[bytes] = []
    try:
        channel = conn.channel()
        while True:
            method, _, body = channel.basic_get(name, auto_ack=True)
            if method is None:
                return bodies
            assert isinstance(body, bytes)
            bodies.append(body)
    finally:
        conn.close()


async def wait_for(condition: Callable[[], bool], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


# -- 1. poison bodies never wedge a worker -----------------------------------------------


async def test_poison_bodies_among_normal_tasks_go_to_the_dead_letter_queue(
    settings: Settings, ledger: PgLedger
) -> None:
    registry = Registry()
    ran: list[int] = []

    @registry.task("t.ok")
    async def ok(payload: Any, ctx: AsyncTaskContext) -> None:
        ran.append(ctx.id)

    topology = Topology(settings.amqp_prefix)
    before = enqueue_committed(settings, [TaskSpec("t.ok", {"i": i}) for i in range(30)])
    # concurrency 4: prefetch 8, fewer than the poison bodies. Unsettled poison would
    # fill prefetch and stop the worker for good.
    config = WorkerConfig(concurrency=4, lease_s=30, heartbeat_s=5, grace_s=5)
    async with Pipeline(settings, registry, worker=config, start_worker=False) as pipe:
        # A stand-in for the worker (its kinds, so its route and broker queue) with
        # room for all of them: the relay fills the queue the worker will consume.
        [subscription] = await subscribe_like_worker(
            settings, pipe.ledger, registry, config, capacity=len(before)
        )
        await pipe.settle(before, until=("published",))  # queued ahead of the poison
        await pipe.ledger.unsubscribe("test-subscriber")
    queue = topology.task_queue(subscription.broker_name)
    conn = amqp(settings)
    channel = conn.channel()
    for body in POISON:
        channel.basic_publish(queue.exchange, queue.routing_key, body)
    conn.close()
    after = enqueue_committed(settings, [TaskSpec("t.ok", {"i": i}) for i in range(30)])

    async with Pipeline(settings, registry, worker=config) as pipe:
        statuses = await pipe.settle(before + after, timeout=60)
        await wait_for(lambda: pipe.worker.counts.rejected == len(POISON))
        counts = pipe.worker.counts

    assert set(statuses.values()) == {"succeeded"}
    assert sorted(ran) == sorted(before + after)  # each normal task once
    assert counts.rejected == len(POISON)
    # Every poison body is in the dead-letter queue, and nothing was left unacked:
    # the worker's channel is closed now, so an unacked delivery would be back here.
    assert queue_depth(settings, queue.name) == 0
    assert sorted(drain_bodies(settings, topology.dead_letter_queue.name)) == sorted(POISON)


# -- 3. a forged message cannot run a task early -----------------------------------------


async def test_a_forged_message_does_not_run_a_delayed_task_before_it_is_due(
    settings: Settings, ledger: PgLedger
) -> None:
    registry = Registry()
    ran: list[int] = []

    @registry.task("t.later")
    async def later(payload: Any, ctx: AsyncTaskContext) -> None:
        ran.append(ctx.id)

    [task_id] = enqueue_committed(settings, [TaskSpec("t.later", {}, delay=3600)])

    async with Pipeline(settings, registry) as pipe:
        # Anyone who can publish to the exchange sends {"id": X, "epoch": 0}.
        route = pipe.worker.subscriptions[0].route  # the broker queue the worker reads
        forged = DueTask(task_id, "t.later", "default", 0, epoch=0, route=route)
        assert await pipe.relay.publisher.publish_many([(forged,)], 5) == [PublishOutcome.CONFIRMED]
        await wait_for(lambda: pipe.worker.counts.skipped >= 1)
        row = await ledger.show(task_id)
        assert (row["status"], row["attempts"], row["epoch"]) == ("pending", 0, 0)
        assert ran == []
        assert (await pipe.relay.run_once()).published == 0  # not due: the relay waits too

        # An hour passes (simulated: the due time moved into the past).
        with db(settings) as conn:
            conn.execute(
                "UPDATE ledgerq_tasks SET run_at = now() - interval '1 second' WHERE id = %s",
                (task_id,),
            )
        assert await pipe.settle([task_id]) == {task_id: "succeeded"}

    assert ran == [task_id]
    assert (await ledger.show(task_id))["attempts"] == 1


# -- 5. a payload too large for a worker is not loaded -----------------------------------


async def test_a_payload_inserted_behind_the_producers_back_is_not_loaded(
    settings: Settings, ledger: PgLedger
) -> None:
    registry = Registry()
    ran: list[int] = []
    alerts: list[Finished] = []

    @registry.task("t.any")
    async def any_task(payload: Any, ctx: AsyncTaskContext) -> None:
        ran.append(ctx.id)

    @registry.task("t.grouped", group_commit=True)
    async def grouped(payload: Any, ctx: AsyncTaskContext) -> None:
        ran.append(ctx.id)

    big, small, big_grouped = enqueue_committed(
        settings,
        [
            TaskSpec("t.any", {}, max_attempts=5),
            TaskSpec("t.any", {}),
            TaskSpec("t.grouped", {}, max_attempts=5),
        ],
    )
    size = MAX_CLAIM_PAYLOAD_BYTES * 2
    with db(settings) as conn:  # the attack: straight into the table
        conn.execute(
            "UPDATE ledgerq_tasks SET payload = jsonb_build_object('blob', repeat('x', %s)) "
            "WHERE id = ANY(%s)",
            (size, [big, big_grouped]),
        )

    async with Pipeline(settings, registry, alert=alerts.append) as pipe:
        statuses = await pipe.settle([big, small, big_grouped])

    assert statuses == {big: "dead", small: "succeeded", big_grouped: "dead"}
    assert ran == [small]  # neither big one ran
    for task_id in (big, big_grouped):
        row = await ledger.show(task_id)
        assert row["attempts"] == 1  # dead at once, not retried
        assert row["last_error"].startswith("payload too large:")
        assert str(MAX_CLAIM_PAYLOAD_BYTES) in row["last_error"]
    assert sorted(a.id for a in alerts) == sorted([big, big_grouped])

    # `ledgerq show` cuts the payload in its table, and says so; --json has all of it.
    started = time.monotonic()
    human = ledgerq(settings, "show", str(big))
    assert human.returncode == 0, human.stderr
    assert time.monotonic() - started < 30
    table = re.sub(r"[\s│]+", "", human.stdout)  # the table folds long values over lines
    whole_chars = len(json.dumps({"blob": "x" * size}))
    assert f"[truncated:{whole_chars}charactersinall;--jsonshowsthewholevalue]" in table
    assert len(human.stdout) < 20_000
    whole = ledgerq(settings, "show", str(big), "--json")
    assert whole.returncode == 0 and whole.stdout.count("x") >= size


# -- 2. a rejected enqueue leaves the caller's transaction usable ------------------------

BAD_ENQUEUES: list[tuple[str, dict[str, Any]]] = [
    ("lone surrogate in the payload", {"payload": {"k": "\ud800"}}),
    ("lone surrogate in a key", {"payload": {"\ud800": 1}}),
    ("lone surrogate in the business key", {"business_key": "b\ud800"}),
    ("nested 100,000 deep", {"deep": 100_000}),
    ("delay 10**400", {"delay": 10**400}),
    ("timeout 10**400", {"timeout": 10**400}),
    ("non-string key", {"payload": {1: "a", "1": "b"}}),
    ("unknown keyword", {"delya": 5}),
    ("NUL in the payload", {"payload": ["\x00"]}),
]


def bad_call(case: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    options = dict(case)
    payload = options.pop("payload", {})
    depth = options.pop("deep", 0)
    if depth:
        for _ in range(depth):
            payload = [payload]
    return payload, options


@pytest.fixture
def effects(settings: Settings) -> Settings:
    with db(settings) as conn:
        conn.execute(EFFECTS_DDL)
    return settings


def count_tasks(settings: Settings) -> int:
    with db(settings) as conn:
        row = conn.execute("SELECT count(*) FROM ledgerq_tasks").fetchone()
        assert row is not None
        return int(row[0])


def test_sync_enqueue_refusals_leave_the_transaction_usable(effects: Settings) -> None:
    settings = effects
    engine = sync_engine(settings, "test-producer", pool_size=1)
    try:
        with Session(engine) as session, session.begin():
            session.execute(text("INSERT INTO test_effects (task_id, attempt) VALUES (1, 1)"))
            for name, case in BAD_ENQUEUES:
                payload, options = bad_call(case)
                with pytest.raises(InvalidTaskError):
                    enqueue(session, "t.k", payload, **options)
                assert session.execute(text("SELECT 1")).scalar() == 1, name
            kept = enqueue(session, "t.k", {"ok": True})
            session.execute(text("INSERT INTO test_effects (task_id, attempt) VALUES (2, 1)"))
    finally:
        engine.dispose()
    with db(settings) as conn:
        assert conn.execute("SELECT count(*) FROM test_effects").fetchone() == (2,)
        assert conn.execute("SELECT id FROM ledgerq_tasks").fetchall() == [(kept,)]


async def test_async_enqueue_refusals_leave_the_transaction_usable(effects: Settings) -> None:
    settings = effects
    engine = async_engine(settings, "test-producer", pool_size=1)
    try:
        async with AsyncSession(engine) as session, session.begin():
            await session.execute(text("INSERT INTO test_effects (task_id, attempt) VALUES (1, 1)"))
            for name, case in BAD_ENQUEUES:
                payload, options = bad_call(case)
                with pytest.raises(InvalidTaskError):
                    await aenqueue(session, "t.k", payload, **options)
                assert (await session.execute(text("SELECT 1"))).scalar() == 1, name
            kept = await aenqueue(session, "t.k", {"ok": True})
    finally:
        await engine.dispose()
    with db(settings) as conn:
        assert conn.execute("SELECT count(*) FROM test_effects").fetchone() == (1,)
        assert conn.execute("SELECT id FROM ledgerq_tasks").fetchall() == [(kept,)]


async def test_batch_refusals_write_nothing_and_leave_the_transaction_usable(
    effects: Settings,
) -> None:
    settings = effects
    mutated: dict[str, Any] = {"ok": 1}
    spec = TaskSpec("t.k", mutated)
    mutated["later"] = "\ud800"  # changed after construction: checked again when sent
    batches: list[list[Any]] = [
        [TaskSpec("t.k", {}), spec],
        [TaskSpec("t.k", {}), {"kind": "t.k"}],  # not a TaskSpec
    ]
    sync = sync_engine(settings, "test-producer", pool_size=1)
    try:
        with Session(sync) as session, session.begin():
            for batch in batches:
                with pytest.raises(InvalidTaskError):
                    enqueue_many(session, batch)
                assert session.execute(text("SELECT 1")).scalar() == 1
            kept = enqueue_many(session, [TaskSpec("t.k", {"n": 1})])
    finally:
        sync.dispose()
    engine = async_engine(settings, "test-producer", pool_size=1)
    try:
        async with AsyncSession(engine) as asession, asession.begin():
            for batch in batches:
                with pytest.raises(InvalidTaskError):
                    await aenqueue_many(asession, batch)
                assert (await asession.execute(text("SELECT 1"))).scalar() == 1
            kept += await aenqueue_many(asession, [TaskSpec("t.k", {"n": 2})])
    finally:
        await engine.dispose()
    assert count_tasks(settings) == 2 and len(kept) == 2
