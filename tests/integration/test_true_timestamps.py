"""An attempt's times are the wall clock at the moments they name (issue 28 item 5).

A handler that writes through ``ctx.session`` first and works afterwards used to
be recorded as finishing a few milliseconds after it started: its transaction
began at the first write, and the fenced finish in that transaction took the
transaction's time (``now()``). ``started_at``, ``finished_at`` and the attempt
log's ``started_at``/``ended_at`` now say when the claim and the finish really
happened, for sync and async handlers, on success and on a failed attempt.
"""

from __future__ import annotations

import asyncio
import time
from datetime import datetime
from typing import Any

import pytest
from sqlalchemy import text

from ledgerq import AsyncTaskContext, Registry, TaskContext, TaskSpec
from ledgerq.consumers.batch import BatchConfig
from ledgerq.consumers.worker import WorkerConfig
from ledgerq.core.config import Settings
from ledgerq.ledger.pg import PgLedger
from tests.harness import EFFECTS_DDL, Pipeline, db, enqueue_committed

WORK_S = 1.2
INSERT = text("INSERT INTO test_effects (task_id, attempt) VALUES (:i, :a)")
#: One transaction per task: the ordinary path, where the finish runs in the handler's.
WORKER = WorkerConfig(
    concurrency=4, lease_s=30, heartbeat_s=5, grace_s=5, batch=BatchConfig(enabled=False)
)


@pytest.fixture
def effects_table(settings: Settings) -> Settings:
    with db(settings) as conn:
        conn.execute(EFFECTS_DDL)
    return settings


def _registry() -> Registry:
    """``t.sync``/``t.async``: write through ``ctx.session`` at once, then work
    ``WORK_S``; fail the first attempt if ``payload["fail"]``."""
    registry = Registry()

    @registry.task("t.sync")
    def write_sync(payload: Any, ctx: TaskContext) -> None:
        ctx.session.execute(INSERT, {"i": ctx.id, "a": ctx.attempt})
        time.sleep(WORK_S)
        if payload.get("fail") and ctx.attempt == 1:
            raise RuntimeError("first attempt fails after its work")

    @registry.task("t.async")
    async def write_async(payload: Any, ctx: AsyncTaskContext) -> None:
        await ctx.session.execute(INSERT, {"i": ctx.id, "a": ctx.attempt})
        await asyncio.sleep(WORK_S)
        if payload.get("fail") and ctx.attempt == 1:
            raise RuntimeError("first attempt fails after its work")

    return registry


def _seconds(start: str, end: str) -> float:
    return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()


@pytest.mark.parametrize("kind", ["t.sync", "t.async"])
async def test_finished_at_is_the_end_of_a_handler_that_wrote_first(
    effects_table: Settings, ledger: PgLedger, kind: str
) -> None:
    ids = enqueue_committed(
        effects_table,
        [TaskSpec(kind, {}), TaskSpec(kind, {"fail": True}, retry=[0.05], max_attempts=2)],
    )
    async with Pipeline(effects_table, _registry(), worker=WORKER) as pipe:
        await pipe.settle(ids)

    done = await ledger.show(ids[0])
    assert done["status"] == "succeeded"
    assert _seconds(done["started_at"], done["finished_at"]) >= WORK_S
    [record] = done["attempt_log"]  # the attempt log agrees, to the microsecond
    assert _seconds(done["started_at"], record["started_at"]) == 0
    assert _seconds(done["finished_at"], record["ended_at"]) == 0

    retried = await ledger.show(ids[1])
    assert (retried["status"], retried["attempts"]) == ("succeeded", 2)
    failed, succeeded = retried["attempt_log"]
    assert failed["outcome"] == "retry"
    assert _seconds(failed["started_at"], failed["ended_at"]) >= WORK_S
    assert _seconds(succeeded["started_at"], succeeded["ended_at"]) >= WORK_S
    assert _seconds(failed["ended_at"], succeeded["started_at"]) >= 0
    assert _seconds(retried["started_at"], retried["finished_at"]) >= WORK_S
