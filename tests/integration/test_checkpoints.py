"""Checkpoints and progress reports, on the real pipeline.

A handler saves its state with ``ctx.save_checkpoint`` and fails; the next
attempt finds the state in ``ctx.checkpoint`` and goes on from there. A stale
attempt (its task's epoch moved on, as when the reconciler rescues it) is
refused and told so. Progress reported with ``ctx.report_progress`` reaches the
ledger with the next heartbeat and shows in ``ledgerq show`` and
``ledgerq tasks list``. Bad values get a ValueError in the handler.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from sqlalchemy import text

from ledgerq import (
    AsyncTaskContext,
    LeaseLostError,
    Registry,
    TaskContext,
    TaskSpec,
)
from ledgerq.consumers.worker import WorkerConfig
from ledgerq.core.config import Settings
from ledgerq.ledger.pg import PgLedger
from tests.harness import EFFECTS_DDL, Pipeline, db, enqueue_committed
from tests.support import ledgerq, until

FAST_BEATS = WorkerConfig(concurrency=8, lease_s=30, heartbeat_s=0.2, grace_s=5)


async def progress_stored(ledger: PgLedger, task_id: int, done: int) -> None:
    """Until a heartbeat has stored the last report (instead of sleeping past a few
    heartbeats, which a loaded machine may not fit in)."""

    async def stored() -> bool:
        shown = await ledger.show(task_id)
        progress = shown.get("progress") if shown else None
        return progress is not None and progress["done"] == done

    await until(f"task {task_id}'s progress {done} stored by a heartbeat", stored)


@pytest.mark.parametrize("flavour", ["async", "sync"])
async def test_the_next_attempt_resumes_from_the_last_checkpoint(
    settings: Settings, ledger: PgLedger, flavour: str
) -> None:
    registry = Registry()
    seen: list[Any] = []
    loop = asyncio.get_running_loop()

    if flavour == "async":

        @registry.task("t.export")
        async def export_async(payload: Any, ctx: AsyncTaskContext) -> None:
            seen.append(ctx.checkpoint)
            start = (ctx.checkpoint or {}).get("rows", 0)
            for rows in range(start + 1, start + 4):
                await ctx.save_checkpoint({"rows": rows})
                ctx.report_progress(rows, 10, "exporting")
            await progress_stored(ledger, ctx.id, start + 3)  # a heartbeat stores the last report
            if ctx.attempt == 1:
                raise RuntimeError("the disk filled up at row 3")

    else:

        @registry.task("t.export")
        def export_sync(payload: Any, ctx: TaskContext) -> None:
            seen.append(ctx.checkpoint)
            start = (ctx.checkpoint or {}).get("rows", 0)
            for rows in range(start + 1, start + 4):
                ctx.save_checkpoint({"rows": rows})
                ctx.report_progress(rows, 10, "exporting")
            stored = progress_stored(ledger, ctx.id, start + 3)
            asyncio.run_coroutine_threadsafe(stored, loop).result(60)
            if ctx.attempt == 1:
                raise RuntimeError("the disk filled up at row 3")

    [task_id] = enqueue_committed(settings, [TaskSpec("t.export", {}, retry=[0.1])])
    async with Pipeline(settings, registry, worker=FAST_BEATS) as pipe:
        assert await pipe.settle([task_id]) == {task_id: "succeeded"}

    assert seen == [None, {"rows": 3}]  # the second attempt started where the first stopped
    shown = await ledger.show(task_id)
    assert shown["checkpoint"] == {"rows": 6}
    assert shown["progress"]["done"] == 6 and shown["progress"]["total"] == 10
    assert shown["progress"]["message"] == "exporting"


async def test_a_stale_attempt_cannot_overwrite_the_checkpoint(
    settings: Settings, ledger: PgLedger
) -> None:
    registry = Registry()
    running, go_on = asyncio.Event(), asyncio.Event()
    outcome: list[str] = []

    @registry.task("t.stale")
    async def stale(payload: Any, ctx: AsyncTaskContext) -> None:
        await ctx.save_checkpoint({"step": 1})
        running.set()
        await go_on.wait()
        try:
            await ctx.save_checkpoint({"step": 2})
        except LeaseLostError as exc:
            outcome.append(str(exc))
            raise
        outcome.append("saved")

    [task_id] = enqueue_committed(settings, [TaskSpec("t.stale", {}, max_attempts=1)])
    async with Pipeline(settings, registry, worker=FAST_BEATS) as pipe:
        await pipe.relay.run_once()
        await asyncio.wait_for(running.wait(), 30)
        # The injected fault: the task moves to a new epoch, as a rescue does.
        with db(settings) as conn:
            conn.execute("UPDATE ledgerq_tasks SET epoch = epoch + 1 WHERE id = %s", (task_id,))
        go_on.set()
        for _ in range(100):
            if outcome:
                break
            await asyncio.sleep(0.05)
        row = await ledger.show(task_id)

    assert outcome and "no longer holds the task" in outcome[0], outcome
    assert row["checkpoint"] == {"step": 1}  # the stale attempt's step 2 was refused


async def test_a_batched_kind_that_checkpoints_stores_it_and_leaves_the_batch(
    settings: Settings, ledger: PgLedger
) -> None:
    """Handlers writing through ctx.session run in batched windows, which hold the
    task rows locked; a checkpoint saved there goes on the window's connection
    (another connection would wait for the window's COMMIT: a deadlock)."""
    with db(settings) as conn:
        conn.execute(EFFECTS_DDL)
    registry = Registry()

    @registry.task("t.rows")
    async def rows(payload: Any, ctx: AsyncTaskContext) -> None:
        await ctx.session.execute(
            text("INSERT INTO test_effects (task_id, attempt) VALUES (:id, :attempt)"),
            {"id": ctx.id, "attempt": ctx.attempt},
        )
        if payload.get("checkpoint"):
            await ctx.save_checkpoint({"at": payload["n"]})

    learn = enqueue_committed(settings, [TaskSpec("t.rows", {"n": n}) for n in range(5)])
    config = WorkerConfig(concurrency=20, lease_s=30, heartbeat_s=5, grace_s=5)
    async with Pipeline(settings, registry, worker=config) as pipe:
        await pipe.settle(learn)
        await pipe.learned("t.rows")  # batched from here on
        batched = pipe.worker.batcher.batched
        marked = [TaskSpec("t.rows", {"n": n, "checkpoint": True}) for n in range(5, 25)]
        ids = enqueue_committed(settings, marked)
        done = await pipe.settle(ids, timeout=60)
        assert pipe.worker.batcher.batched > batched  # some saved theirs inside a window
        assert "t.rows" in pipe.worker.runner.checkpoint_kinds  # never batched again
    assert set(done.values()) == {"succeeded"}
    for n, task_id in enumerate(ids, start=5):
        assert (await ledger.show(task_id))["checkpoint"] == {"at": n}


async def test_bad_values_get_a_value_error_in_the_handler(settings: Settings) -> None:
    registry = Registry()
    errors: list[str] = []

    @registry.task("t.bad")
    async def bad(payload: Any, ctx: AsyncTaskContext) -> None:
        figures: list[tuple[Any, Any]] = [(-1, None), (1, float("nan")), ("half", None)]
        for done, total in figures:
            with pytest.raises(ValueError) as caught:
                ctx.report_progress(done, total)
            errors.append(str(caught.value))
        with pytest.raises(ValueError) as caught:
            await ctx.save_checkpoint({"when": object()})
        errors.append(str(caught.value))

    [task_id] = enqueue_committed(settings, [TaskSpec("t.bad", {})])
    async with Pipeline(settings, registry) as pipe:
        assert await pipe.settle([task_id]) == {task_id: "succeeded"}
    assert len(errors) == 4 and "JSON" in errors[3], errors


async def test_progress_shows_in_show_and_in_the_task_list(settings: Settings) -> None:
    registry = Registry()
    reported = asyncio.Event()
    finish = asyncio.Event()

    @registry.task("t.long")
    async def long(payload: Any, ctx: AsyncTaskContext) -> None:
        ctx.report_progress(40, 100, "copying <b>files</b>")
        reported.set()
        await finish.wait()

    [task_id] = enqueue_committed(settings, [TaskSpec("t.long", {})])
    async with Pipeline(settings, registry, worker=FAST_BEATS) as pipe:
        await pipe.relay.run_once()
        await asyncio.wait_for(reported.wait(), 30)
        await progress_stored(pipe.ledger, task_id, 40)
        show = await asyncio.to_thread(ledgerq, settings, "show", str(task_id))
        listed = await asyncio.to_thread(ledgerq, settings, "tasks", "list", "--status", "running")
        finish.set()
        await pipe.settle([task_id])
    assert show.returncode == 0, show.stderr
    assert "40/100 (40%) copying <b>files</b>" in show.stdout
    assert listed.returncode == 0, listed.stderr
    assert "40/100 (40%)" in listed.stdout
