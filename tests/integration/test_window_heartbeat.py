"""A long handler in a batched window never holds up the heartbeat of the worker's
other tasks (the window keeps its rows locked until its COMMIT; the heartbeat
skips them instead of waiting: consumers/leases.py)."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import pytest
from sqlalchemy import text

from ledgerq import AsyncTaskContext, Registry, TaskSpec
from ledgerq.compose import open_reconciler
from ledgerq.consumers.worker import WorkerConfig
from ledgerq.core.config import Settings
from ledgerq.ledger.pg import PgLedger
from ledgerq.relay.reconciler import ReconcileCounts, ReconcilerConfig
from tests.harness import EFFECTS_DDL, Pipeline, db, effects, enqueue_committed

INSERT = text("INSERT INTO test_effects (task_id, attempt) VALUES (:i, :a)")
LEASE_S = 3.0


def registry() -> Registry:
    tasks = Registry()

    @tasks.task("t.long_write")
    async def long_write(payload: Any, ctx: AsyncTaskContext) -> None:
        await ctx.session.execute(INSERT, {"i": ctx.id, "a": ctx.attempt})
        await asyncio.sleep(float(payload["sleep"]))  # its row stays locked by the window

    @tasks.task("t.other")
    async def other(payload: Any, ctx: AsyncTaskContext) -> None:
        await asyncio.sleep(float(payload["sleep"]))
        await ctx.session.execute(INSERT, {"i": ctx.id, "a": ctx.attempt})

    return tasks


async def test_a_window_longer_than_the_lease_costs_no_other_task_its_lease(
    settings: Settings, ledger: PgLedger, caplog: pytest.LogCaptureFixture
) -> None:
    with db(settings) as conn:
        conn.execute(EFFECTS_DDL)
    config = WorkerConfig(concurrency=8, lease_s=LEASE_S, heartbeat_s=1, grace_s=5)
    passes: list[ReconcileCounts] = []
    async with (
        Pipeline(settings, registry(), worker=config) as pipe,
        open_reconciler(settings, ReconcilerConfig(stall_s=30, settle_s=1)) as reconciler,
    ):
        [first] = enqueue_committed(settings, [TaskSpec("t.long_write", {"sleep": 0})])
        await pipe.settle([first])
        await pipe.learned("t.long_write")  # from now on its tasks run in windows
        # The other kind's tasks first, so they are running when the window opens.
        others = enqueue_committed(settings, [TaskSpec("t.other", {"sleep": 3 * LEASE_S})] * 3)
        await pipe.settle(others, until=("running",))
        [long] = enqueue_committed(settings, [TaskSpec("t.long_write", {"sleep": 2 * LEASE_S})])
        ids = [*others, long]
        caplog.set_level(logging.WARNING, logger="ledgerq.worker")
        deadline = time.monotonic() + 60
        while set((await pipe.statuses(ids)).values()) != {"succeeded"}:
            assert time.monotonic() < deadline, await pipe.statuses(ids)
            await pipe.relay.run_once()
            passes.append(await reconciler.run_once())
            await asyncio.sleep(0.3)
        batched = pipe.worker.batcher.batched

    assert sum(c.expired for c in passes) == 0  # no lease ran out, none was released
    rows = [await ledger.show(i) for i in ids]
    assert [(r["attempts"], r["suspect"]) for r in rows] == [(1, False)] * len(ids)
    assert sorted(task_id for task_id, _ in effects(settings)) == sorted([first, *ids])  # once
    assert not [r for r in caplog.records if "lost its lease" in r.getMessage()]
    assert batched == 1  # the long one ran in a window, and nothing ran twice
