"""Handlers for the window's fault tests (tests/faults/test_window_faults.py):
``ledgerq worker --app tests.apps.window_app``.

``window.work`` sleeps ``payload["sleep"]`` seconds, then records its run in
``window_effects`` (the test creates it) through the context's transaction, so
the effect commits with the task's status or not at all: two rows for one task
would mean its handler committed twice. The row names the attempt and the
worker process (pid) that ran it.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from sqlalchemy import text

from ledgerq import AsyncTaskContext, task

_INSERT = text("INSERT INTO window_effects (task_id, attempt, pid) VALUES (:id, :attempt, :pid)")


@task("window.work")
async def work(payload: Any, ctx: AsyncTaskContext) -> None:
    await asyncio.sleep(float(payload.get("sleep", 0)))
    await ctx.session.execute(_INSERT, {"id": ctx.id, "attempt": ctx.attempt, "pid": os.getpid()})
