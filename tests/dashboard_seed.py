"""A small shop's worth of finished and waiting tasks for the dashboard's tests and
screenshots: run through the real relay and worker, so every timestamp, attempt
record and error is what production writes.

- ``shop.email``: succeeds, returning a result; one of them has a child task;
- ``shop.invoice``: fails its first attempt, succeeds on the retry;
- ``shop.sync``: always fails (two error texts), dead after two attempts;
- ``shop.report``: scheduled an hour ahead, so it waits (pending);
- one ``shop.email`` whose payload holds a ``<script>`` (shown as text);
- with :func:`seed_unserved`, ``shop.refund`` tasks, a kind no worker registers:
  due, never attempted (the overview's "unserved" table).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from ledgerq import AsyncTaskContext, Registry, RetryPolicy, TaskSpec
from ledgerq.consumers.worker import WorkerConfig
from ledgerq.core.config import Settings
from tests.harness import Pipeline, enqueue_committed

SCRIPT = "<script>document.title='pwned'</script>"
NO_WAIT = RetryPolicy.fixed(0)


def shop_registry() -> Registry:
    registry = Registry()

    @registry.task("shop.email")
    async def email(payload: Any, ctx: AsyncTaskContext) -> dict[str, Any]:
        return {"sent_to": payload.get("to")}

    @registry.task("shop.invoice")
    async def invoice(payload: Any, ctx: AsyncTaskContext) -> dict[str, Any]:
        if ctx.attempt == 1:
            raise RuntimeError("invoice service: no answer within 5 s")
        return {"invoice": payload.get("order")}

    @registry.task("shop.sync")
    async def sync(payload: Any, ctx: AsyncTaskContext) -> None:
        if payload.get("order", 0) % 3 == 0:
            raise PermissionError("warehouse API: 403 token expired")
        raise ConnectionError("warehouse API: 503 upstream unavailable")

    return registry


@dataclass
class Seeded:
    ids: dict[str, list[int]] = field(default_factory=dict)
    script_id: int = 0
    parent_id: int = 0
    child_id: int = 0

    def all_finished(self) -> list[int]:
        return [i for kind, ids in self.ids.items() if kind != "shop.report" for i in ids]


async def seed(settings: Settings, orders: int = 12) -> Seeded:
    """Enqueue and run the shop's tasks; return their ids once all have finished."""
    seeded = Seeded()
    specs = {
        "shop.email": [TaskSpec("shop.email", {"to": f"c{i}@example.com"}) for i in range(orders)],
        "shop.invoice": [
            TaskSpec("shop.invoice", {"order": i}, retry=NO_WAIT, queue="other")
            for i in range(orders // 2)
        ],
        "shop.sync": [
            TaskSpec("shop.sync", {"order": i}, retry=NO_WAIT, max_attempts=2, queue="other")
            for i in range(orders // 3)
        ],
        "shop.report": [
            TaskSpec("shop.report", {"day": i}, delay=timedelta(hours=1)) for i in range(3)
        ],
    }
    for kind, kind_specs in specs.items():
        seeded.ids[kind] = enqueue_committed(settings, kind_specs)
    [seeded.script_id] = enqueue_committed(
        settings, [TaskSpec("shop.email", {"to": "x@example.com", "note": SCRIPT})]
    )
    seeded.parent_id = seeded.ids["shop.email"][0]
    [seeded.child_id] = enqueue_committed(
        settings, [TaskSpec("shop.email", {"to": "child@example.com"}, parent_id=seeded.parent_id)]
    )
    seeded.ids["shop.email"] += [seeded.script_id, seeded.child_id]
    worker = WorkerConfig(
        queues=("default", "other"), concurrency=8, lease_s=30, heartbeat_s=5, grace_s=5
    )
    async with Pipeline(settings, shop_registry(), worker=worker) as pipe:
        await pipe.settle(seeded.all_finished(), timeout=60)
    return seeded


#: A kind :func:`shop_registry` does not register: its tasks wait unserved.
UNSERVED_KIND = "shop.refund"


def seed_unserved(settings: Settings, tasks: int = 3) -> list[int]:
    """Enqueue ``tasks`` due tasks of :data:`UNSERVED_KIND` in ``other``: no shop
    worker registers it, so they wait pending, never attempted (unserved)."""
    return enqueue_committed(
        settings,
        [TaskSpec(UNSERVED_KIND, {"order": i}, queue="other") for i in range(tasks)],
    )
