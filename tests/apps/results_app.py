"""Handlers for the result() tests (tests/integration/test_results.py).

``res.echo`` returns its payload's ``value``; ``res.fail`` raises (dead at its only
attempt when enqueued with max_attempts=1); ``res.big`` returns a string of
``payload["bytes"]`` characters (over the result limit: the task ends dead);
``res.parent`` spawns ``payload["n"]`` ``res.echo`` children returning ``i * i``,
and its callback ``res.join`` reads them back a page of ``payload``-less 7 at a
time with ``ctx.children`` and returns their sum, count and statuses.
"""

from __future__ import annotations

from typing import Any

from ledgerq import AsyncTaskContext, TaskContext, task


@task("res.echo")
def echo(payload: dict[str, Any], ctx: TaskContext) -> Any:
    return payload.get("value")


@task("res.fail")
async def fail(payload: dict[str, Any], ctx: AsyncTaskContext) -> None:
    raise RuntimeError(payload.get("message", "it failed"))


@task("res.big")
def big(payload: dict[str, Any], ctx: TaskContext) -> str:
    return "x" * int(payload["bytes"])


@task("res.parent", on_children_done="res.join")
def parent(payload: dict[str, Any], ctx: TaskContext) -> None:
    for i in range(int(payload["n"])):
        ctx.spawn("res.echo", {"value": i * i})


@task("res.join")
async def join(payload: dict[str, Any], ctx: AsyncTaskContext) -> dict[str, Any]:
    values: list[Any] = []
    statuses: set[str] = set()
    after, pages = 0, 0
    while page := await ctx.children(payload["parent_id"], after=after, limit=7):
        pages += 1
        values.extend(child.value for child in page)
        statuses.update(child.status for child in page)
        after = page[-1].id
    return {"sum": sum(values), "count": len(values), "statuses": sorted(statuses), "pages": pages}
