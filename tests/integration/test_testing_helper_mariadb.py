"""ledgerq.testing on a MariaDB ledger (issue 29), as a user's test suite on MySQL
uses it: what the code under test enqueued is listed, then run in the test's
process through the worker's claim, runner and finish (the MySQL ledger's),
time moved for retries and delayed tasks, sync and async."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.orm import Session

from ledgerq import Registry, TaskContext, aenqueue, enqueue
from ledgerq.consumers.context import AsyncTaskContext
from ledgerq.core.config import Settings
from ledgerq.testing import (
    UncommittedTasksError,
    aadvance,
    adrain,
    advance,
    aenqueued,
    drain,
    enqueued,
    reset,
)

EFFECTS = "CREATE TABLE IF NOT EXISTS test_effects (task_id BIGINT, note TEXT)"


@pytest.fixture
def engine(mariadb_settings: Settings) -> Iterator[Engine]:
    """The application's engine on the MariaDB test database (the server's default
    isolation), the ledger emptied, a table for the handlers' effects."""
    eng = create_engine(mariadb_settings.database_url)
    reset(eng)
    with eng.begin() as conn:
        conn.execute(text("DROP TABLE IF EXISTS test_effects"))
        conn.execute(text(EFFECTS))
    yield eng
    eng.dispose()


@pytest.fixture
async def aengine(engine: Engine) -> AsyncIterator[AsyncEngine]:
    url = engine.url.set(drivername="mariadb+aiomysql")
    eng = create_async_engine(url)
    yield eng
    await eng.dispose()


def effects(engine: Engine) -> list[tuple[Any, ...]]:
    with engine.connect() as conn:
        return [tuple(r) for r in conn.execute(text("SELECT task_id, note FROM test_effects"))]


def checkout(engine: Engine, order_id: int, **options: Any) -> int:
    with Session(engine) as session, session.begin():
        return enqueue(session, "send_receipt", {"order_id": order_id}, **options)


def test_a_task_is_listed_then_run_with_its_writes_committed(engine: Engine) -> None:
    app = Registry()

    @app.task("send_receipt")
    def send_receipt(payload: dict[str, Any], ctx: TaskContext) -> str:
        ctx.session.execute(
            text("INSERT INTO test_effects VALUES (:i, :n)"),
            {"i": ctx.id, "n": f"order {payload['order_id']}"},
        )
        return "sent"

    task_id = checkout(engine, 7, priority=3, business_key="order-7", tags=["tenant:1"])
    [listed] = enqueued(engine, "send_receipt")
    assert (listed.id, listed.kind, listed.queue, listed.payload, listed.tags) == (
        task_id,
        "send_receipt",
        "default",
        {"order_id": 7},
        ["tenant:1"],
    )
    assert (listed.priority, listed.business_key, listed.due, listed.attempts) == (
        3,
        "order-7",
        True,
        0,
    )
    assert listed.created_at.tzinfo is not None
    assert enqueued(engine, "other_kind") == []

    result = drain(engine, app=app)
    assert result.counts() == {"succeeded": 1, "retried": 0, "dead": 0, "cancelled": 0}
    assert [(r.id, r.status, r.attempt) for r in result.runs] == [(task_id, "succeeded", 1)]
    assert effects(engine) == [(task_id, "order 7")]
    assert enqueued(engine) == []
    assert drain(engine, app=app).ran == 0


def test_a_retry_runs_once_time_is_moved_and_include_future_runs_to_the_end(
    engine: Engine,
) -> None:
    app = Registry()
    calls: list[int] = []

    @app.task("send_receipt")
    def send_receipt(payload: Any, ctx: TaskContext) -> None:
        calls.append(ctx.attempt)
        if payload["order_id"] == 2 or ctx.attempt == 1:
            raise ConnectionError("smtp down")

    checkout(engine, 1, retry=[60], max_attempts=3)
    first = drain(engine, app=app)
    assert (first.retried, first.succeeded) == (1, 0)
    [waiting] = enqueued(engine)
    assert (waiting.attempts, waiting.due) == (1, False)
    assert "smtp down" in (waiting.last_error or "")
    assert advance(engine, 30) == 1
    assert drain(engine, app=app).ran == 0
    advance(engine, 30)
    assert drain(engine, app=app).succeeded == 1
    assert calls == [1, 2]

    checkout(engine, 2, retry=[600], max_attempts=2)
    ended = drain(engine, app=app, include_future=True)
    assert (ended.retried, ended.dead) == (1, 1)


def test_uncommitted_tasks_in_the_binds_transaction_are_an_error(engine: Engine) -> None:
    app = Registry()
    app.task("send_receipt")(lambda payload, ctx: None)
    with Session(engine) as session, session.begin():
        enqueue(session, "send_receipt", {"order_id": 1})
        with pytest.raises(UncommittedTasksError, match="commit first"):
            drain(session, app=app)


async def test_async_handlers_with_their_session_under_adrain(
    aengine: AsyncEngine, engine: Engine
) -> None:
    app = Registry()

    @app.task("welcome")
    async def welcome(payload: dict[str, Any], ctx: AsyncTaskContext) -> None:
        await ctx.session.execute(
            text("INSERT INTO test_effects VALUES (:i, :n)"), {"i": ctx.id, "n": payload["who"]}
        )

    async with aengine.begin() as conn:
        first = await aenqueue(conn, "welcome", {"who": "ann"})
        await aenqueue(conn, "welcome", {"who": "bob"}, delay=60)
    listed = await aenqueued(aengine, "welcome")
    assert [(t.id == first, t.due) for t in listed] == [(True, True), (False, False)]

    assert (await adrain(aengine, app=app)).succeeded == 1
    assert await aadvance(aengine, 60) == 1
    assert (await adrain(aengine, app=app)).succeeded == 1
    assert sorted(note for _, note in effects(engine)) == ["ann", "bob"]
