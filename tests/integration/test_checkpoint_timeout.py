"""A checkpoint counts as progress: the attempt's timeout runs from the later of
its start and its last checkpoint (consumers.deadline.Deadline).

A task with timeout 1 s that checkpoints every 0.3 s runs 3 s and succeeds; one
that stops checkpointing times out about 1 s after its last checkpoint; one that
never checkpoints times out after 1 s; ``max_runtime`` caps the attempt however
often it checkpoints. Each for async and sync handlers.
"""

from __future__ import annotations

import asyncio
import time
from datetime import datetime
from typing import Any

import pytest

from ledgerq import AsyncTaskContext, Registry, TaskContext, TaskSpec
from ledgerq.consumers.worker import WorkerConfig
from ledgerq.core.config import Settings
from ledgerq.ledger.pg import PgLedger
from tests.harness import Pipeline, enqueue_committed

WORKER = WorkerConfig(concurrency=4, lease_s=30, heartbeat_s=0.5, grace_s=5)


def _registry(flavour: str, *, max_runtime: float | None = None) -> Registry:
    """``t.work``: for ``payload["beats"]`` beats of 0.3 s, checkpointing at each one
    while ``payload["checkpoint"]``, then returns."""
    registry = Registry()
    if flavour == "async":

        @registry.task("t.work", timeout=1, max_runtime=max_runtime)
        async def work_async(payload: Any, ctx: AsyncTaskContext) -> None:
            for beat in range(payload["beats"]):
                await asyncio.sleep(0.3)
                if beat < payload["checkpoint"]:
                    await ctx.save_checkpoint({"beat": beat})

    else:

        @registry.task("t.work", timeout=1, max_runtime=max_runtime)
        def work_sync(payload: Any, ctx: TaskContext) -> None:
            for beat in range(payload["beats"]):
                time.sleep(0.3)
                if ctx.lost:  # timed out: the thread cannot be stopped, so it stops itself
                    return
                if beat < payload["checkpoint"]:
                    ctx.save_checkpoint({"beat": beat})

    return registry


async def _run(settings: Settings, registry: Registry, payload: dict[str, int]) -> int:
    [task_id] = enqueue_committed(settings, [TaskSpec("t.work", payload, max_attempts=1)])
    async with Pipeline(settings, registry, worker=WORKER) as pipe:
        await pipe.settle([task_id])
    return task_id


@pytest.mark.parametrize("flavour", ["async", "sync"])
async def test_a_task_that_keeps_checkpointing_outlives_its_timeout(
    settings: Settings, ledger: PgLedger, flavour: str
) -> None:
    task_id = await _run(settings, _registry(flavour), {"beats": 10, "checkpoint": 10})
    shown = await ledger.show(task_id)
    assert shown["status"] == "succeeded", shown["last_error"]
    ran = datetime.fromisoformat(shown["finished_at"]) - datetime.fromisoformat(shown["started_at"])
    assert ran.total_seconds() >= 3


@pytest.mark.parametrize("flavour", ["async", "sync"])
@pytest.mark.parametrize(
    ("checkpoints", "error"),
    [(4, "timed out after 1 s without a checkpoint"), (0, "timed out after 1 s")],
    ids=["stops", "never"],
)
async def test_a_task_that_stops_or_never_checkpoints_times_out(
    settings: Settings, ledger: PgLedger, flavour: str, checkpoints: int, error: str
) -> None:
    task_id = await _run(settings, _registry(flavour), {"beats": 20, "checkpoint": checkpoints})
    shown = await ledger.show(task_id)
    assert shown["status"] == "dead"
    assert error in shown["last_error"]
    assert shown["checkpoint"] == ({"beat": checkpoints - 1} if checkpoints else None)


@pytest.mark.parametrize("flavour", ["async", "sync"])
async def test_max_runtime_caps_a_checkpointing_task(
    settings: Settings, ledger: PgLedger, flavour: str
) -> None:
    registry = _registry(flavour, max_runtime=2)
    task_id = await _run(settings, registry, {"beats": 20, "checkpoint": 20})
    shown = await ledger.show(task_id)
    assert shown["status"] == "dead"
    assert "timed out after 2 s (max_runtime)" in shown["last_error"]
