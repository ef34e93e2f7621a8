"""Per-kind defaults (issue 26, item 1) through a real worker, relay and broker.

A producer that never imported the handlers enqueues by kind name with no
``max_attempts``, ``retry`` or ``timeout``; the worker, built by the composition
root as ``ledgerq worker`` builds it, writes its registry's defaults into
``ledgerq_kinds`` at its start, and the claim fills the unset options from them.
The handles (``.enqueue`` / ``.aenqueue``) carry the kind's queue and priority.
"""

from __future__ import annotations

import asyncio
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

from ledgerq import AsyncTaskContext, Registry, TaskSpec
from ledgerq.consumers.worker import WorkerConfig
from ledgerq.core.config import Settings
from ledgerq.ledger.pg import PgLedger
from tests.harness import Pipeline, db, enqueue_committed


def _kind_rows(settings: Settings, *kinds: str) -> dict[str, tuple[Any, ...]]:
    with db(settings) as conn:
        rows = conn.execute(
            "SELECT kind, max_attempts, retry, timeout_s FROM ledgerq_kinds WHERE kind = ANY(%s)",
            (list(kinds),),
        ).fetchall()
    return {str(r[0]): tuple(r[1:]) for r in rows}


async def test_a_worker_applies_its_kinds_defaults_to_tasks_enqueued_by_name(
    settings: Settings, ledger: PgLedger
) -> None:
    app = Registry()

    @app.task("kd.flaky", max_attempts=2, retry=[0.1])
    async def flaky(payload: Any, ctx: AsyncTaskContext) -> None:
        raise RuntimeError("down")

    @app.task("kd.slow", max_attempts=1, timeout=0.5)
    async def slow(payload: Any, ctx: AsyncTaskContext) -> None:
        await asyncio.Event().wait()  # until the timeout cancels it

    # Another service's producer: kind names only, none of the three options.
    by_name, overridden, slow_id = enqueue_committed(
        settings,
        [TaskSpec("kd.flaky"), TaskSpec("kd.flaky", max_attempts=3), TaskSpec("kd.slow")],
    )
    assert (await ledger.show(by_name))["max_attempts"] is None  # stored unset
    assert _kind_rows(settings, "kd.flaky", "kd.slow") == {}  # no worker has started yet

    config = WorkerConfig(concurrency=4, lease_s=30, heartbeat_s=5, grace_s=5, default_timeout_s=60)
    async with Pipeline(settings, app, worker=config) as pipe:
        assert _kind_rows(settings, "kd.flaky", "kd.slow") == {
            "kd.flaky": (2, {"kind": "schedule", "delays": [0.1]}, None),
            "kd.slow": (1, None, 0.5),
        }  # written by the worker at its start
        statuses = await pipe.settle([by_name, overridden, slow_id], timeout=60)

    assert statuses == {by_name: "dead", overridden: "dead", slow_id: "dead"}
    flaky_row, given_row, slow_row = [await ledger.show(i) for i in (by_name, overridden, slow_id)]
    assert (flaky_row["attempts"], flaky_row["max_attempts"]) == (2, 2)  # the kind's
    assert flaky_row["retry"] == {"kind": "schedule", "delays": [0.1]}
    assert (given_row["attempts"], given_row["max_attempts"]) == (3, 3)  # the enqueue's
    assert (slow_row["attempts"], slow_row["timeout_s"]) == (1, 0.5)
    assert slow_row["last_error"] == "timed out after 0.5 s"


async def test_handles_enqueue_with_the_kinds_queue_and_priority_and_run(
    settings: Settings, ledger: PgLedger
) -> None:
    app = Registry()
    ran: list[tuple[str, int]] = []  # (queue, n)

    @app.task("kd.mail", queue="mail", priority=7)
    async def mail(payload: Any, ctx: AsyncTaskContext) -> int:
        ran.append((ctx.task.queue, int(payload["n"])))
        return int(payload["n"])

    engine = create_async_engine(settings.database_url)
    try:
        async with AsyncSession(engine) as session, session.begin():
            default = await mail.aenqueue(session, {"n": 1})
            urgent = await mail.aenqueue(session, {"n": 2}, priority=9, tags=["tenant:7"])
    finally:
        await engine.dispose()

    config = WorkerConfig(concurrency=4, lease_s=30, heartbeat_s=5, grace_s=5, queues=("mail",))
    async with Pipeline(settings, app, worker=config) as pipe:
        statuses = await pipe.settle([default, urgent], timeout=60)

    assert statuses == {default: "succeeded", urgent: "succeeded"}
    assert sorted(ran) == [("mail", 1), ("mail", 2)]
    shown = {i: await ledger.show(i) for i in (default, urgent)}
    assert {i: (t["queue"], t["priority"]) for i, t in shown.items()} == {
        default: ("mail", 7),  # the kind's
        urgent: ("mail", 9),  # the call's
    }
    assert (shown[default]["tags"], shown[urgent]["tags"]) == (None, ["tenant:7"])
