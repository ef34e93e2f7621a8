"""Handlers for the metrics and log tests: ``ledgerq worker --app tests.apps.metrics_app``."""

from __future__ import annotations

import logging
from typing import Any

from ledgerq import AsyncTaskContext, TaskContext, task

log = logging.getLogger("tests.metrics_app")


@task("m.ok")
async def ok(payload: Any, ctx: AsyncTaskContext) -> None:
    log.warning("handling order %s", payload.get("order"))


@task("m.sync_ok")
def sync_ok(payload: Any, ctx: TaskContext) -> None:
    log.warning("handling order %s in a thread", payload.get("order"))


@task("m.fails")
async def fails(payload: Any, ctx: AsyncTaskContext) -> None:
    raise RuntimeError("always fails")
