"""Operator actions on the real PostgreSQL and RabbitMQ: cancel (queued and
running), retry, the race with workers, dry runs, bad input, handler results,
and the same API inside the caller's own transaction."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

import psycopg
import pytest
from sqlalchemy import make_url
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from ledgerq import (
    Action,
    AsyncTaskContext,
    Cancelled,
    InvalidFilterError,
    Registry,
    TaskContext,
    TaskFilter,
    TaskSpec,
    aact,
    act,
    alist_tasks,
    list_tasks,
)
from ledgerq.compose import open_ledger, open_worker
from ledgerq.consumers.worker import WorkerConfig
from ledgerq.core.config import Settings
from ledgerq.ledger.actions import MOVED_ON, NOT_FOUND, plan
from ledgerq.ledger.model import Outcome
from ledgerq.ledger.pg import PgLedger
from ledgerq.ledger.pg.engines import async_engine, libpq_url, sync_engine
from ledgerq.ledger.plans import adrive
from ledgerq.ledger.routing import Subscription
from ledgerq.ledger.sql import OQ
from tests.harness import Pipeline, enqueue_committed, subscribe_like_worker

FAST = WorkerConfig(concurrency=8, lease_s=5, heartbeat_s=0.2, grace_s=5)
CANCEL = Action.cancel()


async def wait_for(check: Callable[[], Awaitable[bool]], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.05)


async def test_cancel_of_a_queued_task_it_never_runs_and_its_delivery_is_acked(
    settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    registry, ran = Registry(), []

    @registry.task("ops.never")
    async def never(payload: Any, ctx: AsyncTaskContext) -> None:
        ran.append(ctx.id)

    [task_id] = enqueue_committed(settings, [TaskSpec("ops.never")])
    caplog.set_level(logging.INFO, logger="ledgerq.worker")
    async with Pipeline(settings, registry, start_worker=False) as pipe:
        # A stand-in for the worker below (its route and broker queue), so the relay
        # publishes into the queue that worker will consume.
        await subscribe_like_worker(settings, pipe.ledger, registry, FAST)
        await pipe.relay.run_once()  # the message is in the queue now
        assert await pipe.statuses([task_id]) == {task_id: "published"}
        await pipe.ledger.unsubscribe("test-subscriber")
        report = await pipe.ledger.act(CANCEL, TaskFilter(ids=(task_id,)), actor="ops-test")
        async with open_worker(settings, registry, FAST) as worker:
            # The ack follows the skip through the acker's own batch: wait for both.
            await wait_for(
                lambda: _true(worker.counts.skipped == 1 and worker.acker.acks_sent >= 1)
            )
        task = await pipe.ledger.find(task_id)

    assert (report.matched, report.changed, report.skipped) == (1, 1, 0)
    assert ran == []
    assert task["status"] == "cancelled" and task["location"] == "history"
    assert [(a["actor"], a["action"], a["outcome"]) for a in task["audit"]] == [
        ("ops-test", "cancel", "changed")
    ]
    assert f"task {task_id} was cancelled; its delivery is acked and skipped" in caplog.text


async def _true(value: bool) -> bool:
    return value


async def test_cancel_of_a_running_task_ends_it_cancelled_and_the_handler_sees_the_request(
    settings: Settings,
) -> None:
    registry, seen = Registry(), []
    started = asyncio.Event()

    @registry.task("ops.long")
    async def long(payload: Any, ctx: AsyncTaskContext) -> dict[str, str]:
        started.set()
        while not ctx.cancel_requested:
            await asyncio.sleep(0.02)
        seen.append(ctx.cancel_requested)
        return {"stopped": "early"}  # returned under a request: ends cancelled anyway

    [task_id] = enqueue_committed(settings, [TaskSpec("ops.long", max_attempts=3)])
    async with Pipeline(settings, registry, worker=FAST) as pipe:
        await pipe.relay.run_once()
        await asyncio.wait_for(started.wait(), 10)
        asked_at = time.monotonic()
        report = await pipe.ledger.act(CANCEL, TaskFilter(ids=(task_id,)), actor="ops-test")
        done = await pipe.settle([task_id])
        took = time.monotonic() - asked_at
        task = await pipe.ledger.find(task_id)
        await wait_for(lambda: _true(pipe.worker.counts.cancelled == 1))
        counts = pipe.worker.counts

    assert (report.changed, report.asked_to_stop, done) == (1, 1, {task_id: "cancelled"})
    # read back by a heartbeat (the handler would otherwise loop until settle's own
    # timeout); the slack is generous for a loaded machine
    assert seen == [True] and took < 3 * FAST.heartbeat_s + 10
    assert (counts.cancelled, counts.retried, counts.succeeded) == (1, 0, 0)
    assert task["attempts"] == 1 and task["cancel_requested_at"] is not None
    [attempt] = task["attempt_log"]
    assert attempt["outcome"] == "cancelled" and attempt["worker"] == FAST.worker_id
    assert "cancelled by an operator's request" in attempt["error"]


async def test_a_sync_handler_may_raise_cancelled_on_its_own(
    settings: Settings,
) -> None:
    registry = Registry()

    @registry.task("ops.quit")
    def quit_now(payload: Any, ctx: TaskContext) -> None:
        raise Cancelled("nothing left to do")

    [task_id] = enqueue_committed(settings, [TaskSpec("ops.quit", max_attempts=5)])
    async with Pipeline(settings, registry, worker=FAST) as pipe:
        assert await pipe.settle([task_id]) == {task_id: "cancelled"}
        task = await pipe.ledger.find(task_id)
    assert task["attempts"] == 1 and "nothing left to do" in task["last_error"]


async def test_retry_of_a_dead_task_runs_it_again_as_the_same_task_with_fresh_attempts(
    settings: Settings,
) -> None:
    registry, fixed = Registry(), list[bool]()

    @registry.task("ops.flaky")
    async def flaky(payload: Any, ctx: AsyncTaskContext) -> dict[str, int]:
        if not fixed:
            raise RuntimeError("the bug")
        return {"attempt": ctx.attempt}

    [task_id] = enqueue_committed(settings, [TaskSpec("ops.flaky", max_attempts=1)])
    async with Pipeline(settings, registry, worker=FAST) as pipe:
        assert await pipe.settle([task_id]) == {task_id: "dead"}
        fixed.append(True)
        report = await pipe.ledger.act(
            Action.retry(), TaskFilter(statuses=("dead",)), actor="ops-test", reason="bug fixed"
        )
        assert await pipe.settle([task_id]) == {task_id: "succeeded"}
        task = await pipe.ledger.find(task_id)
        [listed] = await pipe.ledger.list_tasks(TaskFilter(ids=(task_id,)))

    assert (report.matched, report.changed) == (1, 1)
    assert task["id"] == task_id and task["attempts"] == 1 and task["result"] == {"attempt": 1}
    assert listed["result"] == {"attempt": 1}
    assert [a["outcome"] for a in task["attempt_log"]] == ["dead", "succeeded"]
    assert "the bug" in task["attempt_log"][0]["error"]
    [audit] = task["audit"]
    assert (audit["action"], audit["reason"], audit["outcome"]) == ("retry", "bug fixed", "changed")


async def test_a_task_that_moves_on_between_listing_and_acting_is_skipped_not_overwritten(
    settings: Settings, ledger: PgLedger
) -> None:
    ids = enqueue_committed(settings, [TaskSpec("ops.race") for _ in range(3)])
    steps = plan(CANCEL, TaskFilter(kind="ops.race"), actor="ops-test")
    listed = False

    async def run(statement: Any, params: Any) -> Any:
        nonlocal listed
        async with ledger.engine.connect() as conn:
            if statement is OQ.list_tasks and not listed:
                listed = True
                rows = (await conn.execute(statement, params)).all()
                await conn.commit()
                # Meanwhile a worker claims and finishes the newest task.
                [claimed] = await ledger.claim([(ids[-1], 0)], "racer", 30)
                await ledger.finish([Outcome.succeeded(claimed.fence)])
                return rows
            result = await conn.execute(statement, params)
            rows = result.all() if result.returns_rows else []
            await conn.commit()
            return rows

    report = await adrive(steps, run)

    assert (report.matched, report.changed, report.skipped) == (3, 2, 1)
    assert report.reasons == {MOVED_ON: 1}
    assert await ledger.whereabouts(ids) == {
        ids[0]: "cancelled",
        ids[1]: "cancelled",
        ids[2]: "succeeded",
    }
    assert (await ledger.find(ids[2]))["audit"][0]["outcome"] == MOVED_ON


async def test_a_bulk_cancel_racing_with_a_worker_never_cancels_a_task_that_ran(
    settings: Settings,
) -> None:
    registry, ran = Registry(), set()

    @registry.task("ops.bulk")
    async def bulk(payload: Any, ctx: AsyncTaskContext) -> None:
        await asyncio.sleep(0.005)
        ran.add(ctx.id)

    ids = enqueue_committed(settings, [TaskSpec("ops.bulk") for _ in range(400)])
    async with Pipeline(settings, registry, worker=FAST) as pipe:
        # A second subscriber on the worker's route with a large window, so a batch
        # (200) is in the broker, as well as running, while the cancel races it.
        await subscribe_like_worker(settings, pipe.ledger, registry, FAST)
        assert (await pipe.relay.run_once()).published == pipe.relay_config.batch_size
        report = await pipe.ledger.act(
            CANCEL,
            TaskFilter(kind="ops.bulk", statuses=("pending", "published", "running")),
            actor="ops-test",
            batch_size=50,
        )
        final = await pipe.settle(ids)
        succeeded = {i for i, s in final.items() if s == "succeeded"}
        too_late = [
            t for t in [await pipe.ledger.find(i) for i in succeeded] if t["cancel_requested_at"]
        ]

    cancelled = {i for i, s in final.items() if s == "cancelled"}
    assert cancelled | succeeded == set(ids) and cancelled
    assert report.matched == report.changed + report.skipped
    assert succeeded <= ran  # every success really ran, none was overwritten
    # Each change is a task cancelled, or a running one asked to stop that finished
    # first: its success stands and its attempt record keeps the late request.
    assert report.changed == len(cancelled) + len(too_late)
    for task in too_late:
        assert task["attempt_log"][-1]["cancel_requested_at"] is not None


async def test_a_dry_run_changes_nothing_and_writes_no_audit(
    settings: Settings, ledger: PgLedger
) -> None:
    ids = enqueue_committed(settings, [TaskSpec("ops.dry") for _ in range(3)])
    report = await ledger.act(CANCEL, TaskFilter(kind="ops.dry"), actor="ops", dry_run=True)

    assert report.to_json() | {"reasons": {}} == {
        "matched": 3, "changed": 3, "skipped": 0, "reasons": {}, "dry_run": True,
        "audit_id": None, "asked_to_stop": 0, "cascaded": 0,
    }  # fmt: skip
    assert set((await ledger.whereabouts(ids)).values()) == {"pending"}
    assert await ledger.audit() == []


async def test_bad_input_is_refused_and_senseless_actions_are_skipped_with_a_reason(
    settings: Settings, ledger: PgLedger
) -> None:
    with pytest.raises(InvalidFilterError, match="unknown status 'finished'"):
        TaskFilter(statuses=("finished",))
    with pytest.raises(InvalidFilterError, match="cannot read 'last tuesday'"):
        TaskFilter.parse(since="last tuesday")
    with pytest.raises(InvalidFilterError, match="needs task ids or a filter"):
        await ledger.act(CANCEL, TaskFilter(), actor="ops")
    with pytest.raises(InvalidFilterError, match="max_attempts"):
        Action.set_attempts(0)

    registry = Registry()
    registry.task("ops.ok")(lambda payload, ctx: None)
    [done] = enqueue_committed(settings, [TaskSpec("ops.ok")])
    async with Pipeline(settings, registry, worker=FAST) as pipe:
        await pipe.settle([done])
    report = await ledger.act(Action.retry(), TaskFilter(ids=(done, 10**12)), actor="ops")

    assert (report.matched, report.changed, report.skipped) == (2, 0, 2)
    assert report.reasons == {
        "succeeded: only a dead or cancelled task can be retried": 1,
        NOT_FOUND: 1,
    }
    assert (await ledger.find(done))["status"] == "succeeded"


async def test_a_result_that_is_not_json_ends_the_task_dead_without_retries(
    settings: Settings,
) -> None:
    registry = Registry()

    @registry.task("ops.object")
    def returns_object(payload: Any, ctx: TaskContext) -> object:
        return object()

    [task_id] = enqueue_committed(settings, [TaskSpec("ops.object", max_attempts=5)])
    async with Pipeline(settings, registry, worker=FAST) as pipe:
        assert await pipe.settle([task_id]) == {task_id: "dead"}
        task = await pipe.ledger.find(task_id)
    assert task["attempts"] == 1 and task["result"] is None
    assert "not JSON (object" in task["last_error"]


async def test_reschedule_set_attempts_and_set_priority_change_live_tasks(
    settings: Settings, ledger: PgLedger
) -> None:
    [task_id] = enqueue_committed(settings, [TaskSpec("ops.later", delay=3600)])
    selection = TaskFilter(ids=(task_id,))
    run_now = await ledger.act(Action.retry(), selection, actor="ops")
    later = await ledger.act(
        Action.reschedule(TaskFilter.parse(since="1d").since or _never()), selection, actor="ops"
    )
    attempts = await ledger.act(Action.set_attempts(9), selection, actor="ops")
    priority = await ledger.act(Action.set_priority(7), selection, actor="ops")
    task = await ledger.find(task_id)

    assert [r.changed for r in (run_now, later, attempts, priority)] == [1, 1, 1, 1]
    assert (task["max_attempts"], task["priority"], task["epoch"]) == (9, 7, 2)
    assert [a["action"] for a in task["audit"]] == [
        "retry", "reschedule", "set-attempts", "set-priority"
    ]  # fmt: skip


def _never() -> Any:
    raise AssertionError("unreachable")


def test_the_api_runs_inside_the_callers_transaction(settings: Settings) -> None:
    [task_id] = enqueue_committed(settings, [TaskSpec("ops.tx")])
    engine = sync_engine(settings, "ops-test", pool_size=1)
    try:
        with Session(engine) as session:
            report = act(session, CANCEL, TaskFilter(ids=(task_id,)), actor="app")
            assert report.changed == 1
            session.rollback()  # the caller changes its mind: nothing happened
        with Session(engine) as session:
            [row] = list_tasks(session, TaskFilter(ids=(task_id,)))
            assert row["status"] == "pending"
        with Session(engine) as session, session.begin():
            act(session, CANCEL, TaskFilter(ids=(task_id,)), actor="app", reason="why")
        with Session(engine) as session:
            [row] = list_tasks(session, TaskFilter(ids=(task_id,)))
            assert row["status"] == "cancelled"
    finally:
        engine.dispose()


async def test_the_async_api_runs_inside_the_callers_transaction(settings: Settings) -> None:
    [task_id] = enqueue_committed(settings, [TaskSpec("ops.atx")])
    engine = async_engine(settings, "ops-test", pool_size=1)
    try:
        async with AsyncSession(engine) as session:
            report = await aact(session, CANCEL, TaskFilter(ids=(task_id,)), actor="app")
            [inside] = await alist_tasks(session, TaskFilter(ids=(task_id,)))
            await session.rollback()
        async with AsyncSession(engine) as session:
            [after] = await alist_tasks(session, TaskFilter(ids=(task_id,)))
    finally:
        await engine.dispose()
    assert report.changed == 1 and inside["status"] == "cancelled"
    assert after["status"] == "pending"  # rolled back with the caller's transaction


async def test_an_action_locks_its_rows_in_id_order_whatever_the_plan(
    settings: Settings, ledger: PgLedger
) -> None:
    """A worker's finish locks its rows in id order (its planner joins by primary key,
    in the order of the sorted arrays). An action must too, or the two deadlock and
    PostgreSQL aborts one: here the action's connection is made to scan the hot table
    and hash-join it, which visits a row updated since later than the rows beside it."""
    low, high = enqueue_committed(settings, [TaskSpec("ops.order"), TaskSpec("ops.order")])
    await ledger.subscribe("ops-test", [Subscription("default", capacity=10)], 600.0)
    async with ledger.publish_batch(10) as batch:
        await batch.mark_published([r for r in batch.rows if r.id in (low, high)])
    assert {t.id for t in await ledger.claim([(low, 0), (high, 0)], "ops-test", 30.0)} == {
        low,
        high,
    }
    scans = "-c enable_indexscan=off -c enable_bitmapscan=off -c enable_nestloop=off"
    url = make_url(settings.database_url).update_query_dict({"options": scans})
    hashing = replace(settings, database_url=url.render_as_string(False))
    with psycopg.connect(libpq_url(settings.database_url)) as worker:
        # the newest version of ``low`` now lies after ``high``'s in the heap
        worker.execute("UPDATE ledgerq_tasks SET progress = NULL WHERE id = %s", (low,))
        worker.commit()
        worker.execute("SELECT id FROM ledgerq_tasks WHERE id = %s FOR UPDATE", (low,))
        async with open_ledger(hashing, "ledgerq-ops-hashing", pool_size=1) as operator:
            acting = asyncio.ensure_future(
                operator.act(CANCEL, TaskFilter(ids=(low, high)), actor="ops-test")
            )

            async def waits_for_a_row() -> bool:
                assert not acting.done(), acting
                with psycopg.connect(libpq_url(settings.database_url)) as probe:
                    row = probe.execute(
                        "SELECT count(*) FROM pg_stat_activity WHERE application_name = "
                        "'ledgerq-ops-hashing' AND wait_event_type = 'Lock'"
                    ).fetchone()
                return bool(row and row[0])

            await wait_for(waits_for_a_row)
            # The worker, in id order, goes on to ``high``: free unless the action
            # took it before waiting for ``low`` (then: deadlock detected).
            worker.execute("SELECT id FROM ledgerq_tasks WHERE id = %s FOR UPDATE", (high,))
            worker.commit()
            report = await acting
    assert (report.changed, report.asked_to_stop) == (2, 2)
