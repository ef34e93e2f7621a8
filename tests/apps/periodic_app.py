"""A worker with a periodic kind: ``ledgerq worker --app tests.apps.periodic_app``.

``loop.tick`` is enqueued once a second by the worker's periodic enqueuer
(its key ``periodic:<period start>``); running it does nothing."""

from __future__ import annotations

from typing import Any

from ledgerq import AsyncTaskContext, task


@task("loop.tick", every=1)
async def tick(payload: Any, ctx: AsyncTaskContext) -> None:
    return None
