"""Handlers for subprocess tests: ``ledgerq worker --app tests.apps.slow_app``."""

from __future__ import annotations

import asyncio
from typing import Any

from sqlalchemy import text

from ledgerq import AsyncTaskContext, TaskContext, task


@task("test.slow")
async def slow(payload: Any, ctx: AsyncTaskContext) -> None:
    await asyncio.sleep(float(payload.get("seconds", 1.0)))
    await ctx.session.execute(
        text("INSERT INTO test_effects (task_id, attempt) VALUES (:id, :attempt)"),
        {"id": ctx.id, "attempt": ctx.attempt},
    )


@task("test.sync_write")
def sync_write(payload: Any, ctx: TaskContext) -> None:
    ctx.session.execute(
        text("INSERT INTO test_effects (task_id, attempt) VALUES (:id, :attempt)"),
        {"id": ctx.id, "attempt": ctx.attempt},
    )


@task("test.fail")
def fail(payload: Any, ctx: TaskContext) -> None:
    raise RuntimeError(str(payload.get("why", "this handler always fails")))
