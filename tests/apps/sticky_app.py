"""Handlers for the sticky-retry tests (tests/integration/test_sticky_retry.py):
``ledgerq worker --app tests.apps.sticky_app``.

``sticky.flaky`` fails its first attempt and succeeds on the next, with
``sticky_retry=60``: its retry should run on the worker whose attempt failed.
The ledger's attempt log names the worker of every attempt.
"""

from __future__ import annotations

from typing import Any

from ledgerq import AsyncTaskContext, task


@task("sticky.flaky", sticky_retry=60)
async def flaky(payload: Any, ctx: AsyncTaskContext) -> None:
    if ctx.attempt == 1:
        raise RuntimeError("the first attempt fails")
