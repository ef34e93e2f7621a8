"""Handlers for the SIGTERM tests (tests/faults/test_sigterm_states.py):
``ledgerq worker --app tests.apps.sigterm_app``.

``sig.sleep`` works ``payload["seconds"]`` without touching the database, so its
outcome is the worker's one write; ``sig.limited`` is rate-limited to one start
an hour (the relay holds the rest ``pending``: a lane blocked on its limit).
"""

from __future__ import annotations

import asyncio
from typing import Any

from ledgerq import AsyncTaskContext, task


@task("sig.sleep")
async def sleep(payload: Any, ctx: AsyncTaskContext) -> None:
    await asyncio.sleep(float(payload.get("seconds", 1.0)))


@task("sig.limited", rate_limit="1/h")
async def limited(payload: Any, ctx: AsyncTaskContext) -> None:
    await asyncio.sleep(float(payload.get("seconds", 0.0)))
