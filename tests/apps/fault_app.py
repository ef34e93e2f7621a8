"""Handlers for the fault-injection suite: ``--app tests.apps.fault_app``.

``fault.write`` records its run in ``fault_effects`` through the context's
transaction, so a duplicate *database* effect would show as two rows; the row
carries the attempt's epoch, the handler's start (its own clock) and the time of
the write (``clock_timestamp()``), for the history checker (tests/faults/history.py).
``fault.lease`` is the same handler in lease mode. ``fault.poison`` SIGKILLs
the worker that runs it, every time. ``fault.spawn`` spawns ``payload["n"]``
``fault.write`` children and, at its first attempt, SIGKILLs its worker after
``payload["kill_after"]`` of them; its ``on_children_done`` callback is a
``fault.write`` too, so the effects table shows it ran once. ``fault.dep`` is a
step of a dependency graph (``after=``), which may be killed inside its commit.
"""

from __future__ import annotations

import asyncio
import os
import signal
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import event, text

from ledgerq import AsyncTaskContext, task

EFFECTS_DDL = """CREATE TABLE IF NOT EXISTS fault_effects (
    id bigserial PRIMARY KEY, task_id bigint NOT NULL, marker text, attempt int NOT NULL,
    pid int NOT NULL, epoch bigint, began timestamptz, at timestamptz DEFAULT clock_timestamp())"""

_INSERT = text(
    "INSERT INTO fault_effects (task_id, marker, attempt, pid, epoch, began) "
    "VALUES (:id, :marker, :attempt, :pid, :epoch, :began)"
)


@task("fault.write")
async def write(payload: Any, ctx: AsyncTaskContext) -> None:
    began = datetime.now(UTC)
    seconds = float(payload.get("sleep", 0))
    if seconds:
        await asyncio.sleep(seconds)
    await ctx.session.execute(
        _INSERT,
        {
            "id": ctx.id,
            "marker": payload.get("marker"),
            "attempt": ctx.attempt,
            "pid": os.getpid(),
            "epoch": ctx.task.epoch,
            "began": began,
        },
    )


#: ``fault.write`` in lease mode: acked at its claim, held by the ledger's lease alone.
task("fault.lease", lease=True)(write)


@task("fault.poison")
async def poison(payload: Any, ctx: AsyncTaskContext) -> None:
    os.kill(os.getpid(), signal.SIGKILL)


@task("fault.spawn", on_children_done="fault.write")
async def spawn_children(payload: Any, ctx: AsyncTaskContext) -> None:
    for i in range(int(payload["n"])):
        if ctx.attempt == 1 and i == int(payload["kill_after"]):
            os.kill(os.getpid(), signal.SIGKILL)
        await ctx.spawn("fault.write", {"i": i, "attempt": ctx.attempt}, max_attempts=5)
        await asyncio.sleep(float(payload.get("pace", 0)))


@task("fault.dep")
async def dependency_step(payload: Any, ctx: AsyncTaskContext) -> Any:
    """A step of a dependency graph (tests/faults/test_dependency_faults.py): records
    its run like ``fault.write``, its marker the ids of ``ctx.dependencies()`` and
    their results; returns its own id. With ``kill_in_commit`` its first attempt
    SIGKILLs the worker inside the commit of its terminal status, after the finish
    statement (and the release of its dependents) ran in that transaction."""
    results = await ctx.dependencies()
    marker = ",".join(f"{k}={v}" for k, v in sorted(results.items()))
    await ctx.session.execute(
        _INSERT,
        {
            "id": ctx.id,
            "marker": marker or None,
            "attempt": ctx.attempt,
            "pid": os.getpid(),
            "epoch": ctx.task.epoch,
            "began": datetime.now(UTC),
        },
    )
    if payload.get("kill_in_commit") and ctx.attempt == 1:
        # The connection's commit (its own transaction's, or a batched window's) comes
        # after the finish statement, which released the dependents in it.
        connection = await ctx.session.connection()
        event.listen(connection.sync_connection, "commit", _kill)
    return ctx.id


def _kill(connection: Any) -> None:
    os.kill(os.getpid(), signal.SIGKILL)
