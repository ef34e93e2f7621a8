"""Handlers for the MariaDB end-to-end test (tests/integration/test_mariadb.py):
``ledgerq worker --direct --app tests.apps.mariadb_app`` on a MariaDB ledger.

- ``my.effect`` (sync) writes one row of ``mariadb_effects`` through
  ``ctx.session``: the row and the task's ``succeeded`` commit together (the
  worker's fenced finish runs in the handler's transaction, or its batched
  window's, on MySQL); with ``payload["fail"]`` it raises after writing on its
  first attempt (its write undone alone, the window's others kept) and is
  retried at once;
- ``my.async_effect`` does the same from an async handler;
- ``my.crash_once`` marks its start in ``payload["dir"]`` (``started-<attempt>``),
  hangs on its first attempt (the test SIGKILLs its worker there), and on a later
  one writes its row through ``ctx.session`` as ``my.effect`` does;
- ``my.fail`` raises on its one attempt (it ends ``dead``).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from sqlalchemy import text

from ledgerq import AsyncTaskContext, TaskContext, task

EFFECT = text("INSERT INTO mariadb_effects (task_id, attempt, n) VALUES (:task_id, :attempt, :n)")


@task("my.effect", retry=[0.0])
def effect(payload: Any, ctx: TaskContext) -> dict[str, int]:
    ctx.session.execute(EFFECT, {"task_id": ctx.id, "attempt": ctx.attempt, "n": payload["n"]})
    if payload.get("fail") and ctx.attempt == 1:
        raise RuntimeError("one bad apple, after its write")
    return {"n": payload["n"]}


@task("my.async_effect")
async def async_effect(payload: Any, ctx: AsyncTaskContext) -> None:
    await ctx.session.execute(
        EFFECT, {"task_id": ctx.id, "attempt": ctx.attempt, "n": payload["n"]}
    )


@task("my.crash_once", retry=[0.0])
def crash_once(payload: Any, ctx: TaskContext) -> None:
    Path(payload["dir"], f"started-{ctx.attempt}").write_text("started")
    if ctx.attempt == 1:
        time.sleep(120)  # the test kills the worker here
    ctx.session.execute(EFFECT, {"task_id": ctx.id, "attempt": ctx.attempt, "n": payload["n"]})


@task("my.fail", max_attempts=1)
def fail(payload: Any, ctx: TaskContext) -> None:
    raise ValueError(f"refused {payload['n']}")
