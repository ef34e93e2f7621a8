"""Handlers for the fan-out tests: ``--app tests.apps.fanout_app``.

``fan.parent`` spawns ``payload["n"]`` children of ``fan.child``, each told to
fail (``dead`` at its only attempt: max_attempts=1) or to sleep as
``payload["fail"]`` and ``payload["sleep"]`` say; the indices in
``payload["slow"]`` are ``fan.slow`` instead, and ``payload["extra"]`` lists
more ``[kind, payload]`` children. It waits ``payload["pace"]`` seconds between
spawns. ``fan.mid`` is the same kind of parent, for the nested case. Their
callback ``fan.done`` records its payload in ``fanout_callbacks`` through the
context's transaction, so a second callback would show as a second row.
``fan.slow`` runs until cancelled.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from sqlalchemy import text

from ledgerq import AsyncTaskContext, TaskContext, task

CALLBACKS_DDL = """CREATE TABLE IF NOT EXISTS fanout_callbacks (
    id bigserial PRIMARY KEY, task_id bigint NOT NULL, parent_id bigint NOT NULL,
    payload jsonb NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())"""

_RECORD = text(
    "INSERT INTO fanout_callbacks (task_id, parent_id, payload) "
    "VALUES (:id, :parent, CAST(:payload AS jsonb))"
)


def _children(payload: dict[str, Any], ctx: TaskContext) -> None:
    fail, slow = set(payload.get("fail", [])), set(payload.get("slow", []))
    for i in range(int(payload.get("n", 0))):
        ctx.spawn(
            "fan.slow" if i in slow else "fan.child",
            {"i": i, "fail": i in fail, "sleep": payload.get("sleep", 0), "attempt": ctx.attempt},
            max_attempts=1,
        )
        if payload.get("pace"):
            time.sleep(float(payload["pace"]))
    for kind, child_payload in payload.get("extra", []):
        ctx.spawn(kind, child_payload)


@task("fan.parent", on_children_done="fan.done")
def parent(payload: dict[str, Any], ctx: TaskContext) -> None:
    _children(payload, ctx)


@task("fan.mid", on_children_done="fan.done")
def mid(payload: dict[str, Any], ctx: TaskContext) -> None:
    _children(payload, ctx)


@task("fan.child")
async def child(payload: dict[str, Any], ctx: AsyncTaskContext) -> None:
    if payload.get("sleep"):
        await asyncio.sleep(float(payload["sleep"]))
    if payload.get("fail"):
        raise RuntimeError(f"child {payload['i']} fails on purpose")


@task("fan.slow")
async def slow(payload: dict[str, Any], ctx: AsyncTaskContext) -> None:
    while not ctx.cancel_requested:
        await asyncio.sleep(0.05)


@task("fan.done")
async def done(payload: dict[str, Any], ctx: AsyncTaskContext) -> None:
    await ctx.session.execute(
        _RECORD, {"id": ctx.id, "parent": payload["parent_id"], "payload": json.dumps(payload)}
    )
