"""Handlers for the demo and the benchmark: ``ledgerq worker --app ledgerq.demo.app``.

``demo.noop`` does nothing; ``demo.receipt`` writes one row through its context
transaction (the row and ``succeeded`` commit together); ``demo.flaky`` fails
its first attempt; ``demo.sleep`` sleeps ``payload["seconds"]``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from ledgerq import AsyncTaskContext, task
from ledgerq.demo import Q


@task("demo.noop")
async def noop(payload: Any, ctx: AsyncTaskContext) -> None:
    return None


@task("demo.receipt", group_commit=True)
async def receipt(payload: Any, ctx: AsyncTaskContext) -> None:
    await ctx.session.execute(Q.insert_receipt, {"task_id": ctx.id, "order_id": payload["order"]})


@task("demo.flaky")
async def flaky(payload: Any, ctx: AsyncTaskContext) -> None:
    if ctx.attempt < 2:
        raise RuntimeError("flaky: first attempt fails on purpose")


@task("demo.sleep")
async def sleep(payload: Any, ctx: AsyncTaskContext) -> None:
    await asyncio.sleep(float(payload.get("seconds", 1.0)))
