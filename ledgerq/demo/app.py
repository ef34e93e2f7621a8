"""Handlers for the demo and the benchmark: ``ledgerq worker --app ledgerq.demo.app``.

``demo.noop`` does nothing; ``demo.write`` (a plain function) and
``demo.awrite`` (``async def``) write one row through ``ctx.session`` with no
option, as the README's handler does (the row and ``succeeded`` commit
together); ``demo.receipt`` does the same with ``group_commit=True``;
``demo.flaky`` fails its first attempt; ``demo.sleep`` sleeps ``payload["seconds"]``;
``demo.cpu`` (a plain function) works the CPU for about 10 ms of pure Python, holding
the GIL throughout (``ledgerq bench --handler cpu``: threads vs ``--processes``).
"""

from __future__ import annotations

import asyncio
from typing import Any

from ledgerq import AsyncTaskContext, TaskContext, task
from ledgerq.demo import Q


@task("demo.noop")
async def noop(payload: Any, ctx: AsyncTaskContext) -> None:
    return None


@task("demo.write")
def write(payload: Any, ctx: TaskContext) -> None:
    ctx.session.execute(Q.insert_receipt, {"task_id": ctx.id, "order_id": payload["order"]})


@task("demo.awrite")
async def awrite(payload: Any, ctx: AsyncTaskContext) -> None:
    await ctx.session.execute(Q.insert_receipt, {"task_id": ctx.id, "order_id": payload["order"]})


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


#: demo.cpu's work: this many loop iterations (about 10 ms of CPython on one core).
CPU_WORK = 100_000


@task("demo.cpu")
def cpu(payload: Any, ctx: TaskContext) -> int:
    total = 0
    for i in range(CPU_WORK):
        total = (total + i * i) % 1_000_003
    return total
