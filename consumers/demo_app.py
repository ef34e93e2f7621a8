"""Handlers for the demo and the benchmark: ``ledgerq worker --app consumers.demo_app``.

``demo.noop`` does nothing; ``demo.receipt`` writes one row through its context
transaction (the row and ``succeeded`` commit together); ``demo.flaky`` fails
its first attempt; ``demo.sleep`` sleeps ``payload["seconds"]``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from sqlalchemy import text

from consumers.context import AsyncTaskContext
from consumers.registry import task

RECEIPTS_DDL = """
CREATE TABLE IF NOT EXISTS ledgerq_demo_receipts (
    task_id   bigint PRIMARY KEY,
    order_id  bigint NOT NULL,
    written_at timestamptz NOT NULL DEFAULT now()
)
"""
INSERT_RECEIPT = text(
    "INSERT INTO ledgerq_demo_receipts (task_id, order_id) VALUES (:task_id, :order_id)"
)


@task("demo.noop")
async def noop(payload: Any, ctx: AsyncTaskContext) -> None:
    return None


@task("demo.receipt")
async def receipt(payload: Any, ctx: AsyncTaskContext) -> None:
    await ctx.session.execute(INSERT_RECEIPT, {"task_id": ctx.id, "order_id": payload["order"]})


@task("demo.flaky")
async def flaky(payload: Any, ctx: AsyncTaskContext) -> None:
    if ctx.attempt < 2:
        raise RuntimeError("flaky: first attempt fails on purpose")


@task("demo.sleep")
async def sleep(payload: Any, ctx: AsyncTaskContext) -> None:
    await asyncio.sleep(float(payload.get("seconds", 1.0)))
