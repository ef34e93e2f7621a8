"""ledgerq.testing, as a user's test suite uses it: tasks enqueued by the code under
test, run in the test's process through the worker's claim, runner and finish,
against the real PostgreSQL."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.orm import Session

from ledgerq import Abort, Registry, RetryPolicy, TaskContext, aenqueue, enqueue
from ledgerq.consumers.context import AsyncTaskContext
from ledgerq.core.config import Settings
from ledgerq.testing import (
    NoHandlerError,
    UncommittedTasksError,
    aadvance,
    adrain,
    advance,
    aenqueued,
    drain,
    enqueued,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def engine(settings: Settings) -> Iterator[Engine]:
    """The test database, empty, with a table for the handlers' effects."""
    eng = create_engine(settings.database_url)
    with eng.begin() as conn:
        conn.execute(text("CREATE TABLE test_effects (task_id bigint, note text)"))
    yield eng
    eng.dispose()


@pytest.fixture
async def aengine(engine: Engine, settings: Settings) -> AsyncIterator[AsyncEngine]:
    eng = create_async_engine(settings.database_url)
    yield eng
    await eng.dispose()


def effects(engine: Engine) -> list[tuple[Any, ...]]:
    with engine.connect() as conn:
        return [tuple(r) for r in conn.execute(text("SELECT task_id, note FROM test_effects"))]


def checkout(engine: Engine, order_id: int, **options: Any) -> int:
    """The code under test: a business transaction that enqueues."""
    with Session(engine) as session, session.begin():
        return enqueue(session, "send_receipt", {"order_id": order_id}, **options)


def test_a_task_is_listed_then_run_by_its_handler_with_its_writes_committed(
    engine: Engine,
) -> None:
    app = Registry()

    @app.task("send_receipt")
    def send_receipt(payload: dict[str, Any], ctx: TaskContext) -> str:
        ctx.session.execute(
            text("INSERT INTO test_effects VALUES (:i, :n)"),
            {"i": ctx.id, "n": f"order {payload['order_id']}"},
        )
        return "sent"

    task_id = checkout(engine, 7, priority=3, business_key="order-7")
    [listed] = enqueued(engine, "send_receipt")
    assert (listed.id, listed.kind, listed.queue, listed.payload) == (
        task_id,
        "send_receipt",
        "default",
        {"order_id": 7},
    )
    assert (listed.priority, listed.business_key, listed.due, listed.attempts) == (
        3,
        "order-7",
        True,
        0,
    )
    assert enqueued(engine, "other_kind") == []

    result = drain(engine, app=app)

    assert result.counts() == {"succeeded": 1, "retried": 0, "dead": 0, "cancelled": 0}
    assert [(r.id, r.status, r.attempt) for r in result.runs] == [(task_id, "succeeded", 1)]
    assert effects(engine) == [(task_id, "order 7")]
    assert enqueued(engine) == []
    assert drain(engine, app=app).ran == 0


def test_a_failure_is_retried_after_its_delay_once_time_is_moved(engine: Engine) -> None:
    app = Registry()
    calls: list[int] = []

    @app.task("send_receipt")
    def send_receipt(payload: Any, ctx: TaskContext) -> None:
        calls.append(ctx.attempt)
        if ctx.attempt == 1:
            raise ConnectionError("smtp down")

    task_id = checkout(engine, 1, retry=[60], max_attempts=3)

    first = drain(engine, app=app)
    assert (first.retried, first.succeeded) == (1, 0)
    assert "ConnectionError: smtp down" in (first.errors[0].error or "")
    [waiting] = enqueued(engine)
    assert (waiting.id, waiting.attempts, waiting.due) == (task_id, 1, False)
    assert "smtp down" in (waiting.last_error or "")

    assert drain(engine, app=app).ran == 0  # the retry is not due: nothing runs
    assert advance(engine, 30) == 1
    assert drain(engine, app=app).ran == 0
    advance(engine, 30)
    assert drain(engine, app=app).succeeded == 1
    assert calls == [1, 2]


def test_the_backoff_multiplier_sets_how_far_each_retry_is_put_off(engine: Engine) -> None:
    app = Registry()

    @app.task("send_receipt")
    def send_receipt(payload: Any, ctx: TaskContext) -> None:
        raise ConnectionError("smtp down")

    policy = RetryPolicy.exponential(base=100, maximum=100_000, multiplier=5)
    checkout(engine, 1, retry=policy, max_attempts=3)
    waits: list[float] = []
    for _ in range(2):
        assert drain(engine, app=app).retried == 1
        [waiting] = enqueued(engine)
        with engine.connect() as conn:
            now = conn.execute(text("SELECT now()")).scalar_one()
        waits.append((waiting.run_at - now).total_seconds())
        advance(engine, waits[-1] + 1)
    # base x multiplier^(n-1), plus up to base seconds of jitter: 100-200 s, then
    # 500-600 s (the default multiplier, 2, would put the second at 200-300 s)
    assert 95 < waits[0] <= 200 and 495 < waits[1] <= 600, waits
    assert drain(engine, app=app).dead == 1


def test_a_delayed_task_runs_only_when_time_moves_or_include_future(engine: Engine) -> None:
    app = Registry()

    @app.task("send_receipt")
    def send_receipt(payload: Any, ctx: TaskContext) -> None:
        pass

    checkout(engine, 1, delay=3600)
    assert drain(engine, app=app).ran == 0
    assert drain(engine, app=app, include_future=True).succeeded == 1

    checkout(engine, 2, delay=120)
    advance(engine, 119, kinds=["another_kind"])  # moves nothing of ours
    assert drain(engine, app=app).ran == 0
    advance(engine, 120, queues=["default"])
    assert drain(engine, app=app).succeeded == 1


def test_include_future_runs_a_failing_task_until_it_is_dead(engine: Engine) -> None:
    app = Registry()

    @app.task("send_receipt")
    def send_receipt(payload: Any, ctx: TaskContext) -> None:
        raise ValueError(f"attempt {ctx.attempt}")

    @app.task("give_up")
    def give_up(payload: Any, ctx: TaskContext) -> None:
        raise Abort("not worth retrying")

    checkout(engine, 1, retry=[60, 600], max_attempts=3)
    result = drain(engine, app=app, include_future=True)
    assert (result.retried, result.dead) == (2, 1)
    assert [r.attempt for r in result.runs] == [1, 2, 3]
    with Session(engine) as session, session.begin():
        enqueue(session, "give_up")
    assert drain(engine, app=app).dead == 1


async def test_async_handlers_with_their_session_under_adrain(
    aengine: AsyncEngine, engine: Engine
) -> None:
    app = Registry()

    @app.task("welcome")
    async def welcome(payload: dict[str, Any], ctx: AsyncTaskContext) -> None:
        await ctx.session.execute(
            text("INSERT INTO test_effects VALUES (:i, :n)"), {"i": ctx.id, "n": payload["who"]}
        )
        if payload["who"] == "bob":
            await ctx.spawn("welcome", {"who": "bob's friend"})

    async with aengine.begin() as conn:
        first = await aenqueue(conn, "welcome", {"who": "ann"})
        await aenqueue(conn, "welcome", {"who": "bob"}, delay=60)
    listed = await aenqueued(aengine, "welcome")
    assert [(t.id == first, t.due) for t in listed] == [(True, True), (False, False)]

    assert (await adrain(aengine, app=app)).succeeded == 1
    assert await aadvance(aengine, 60) == 1
    result = await adrain(aengine, app=app)  # bob's, then the child it spawned
    assert result.succeeded == 2
    assert sorted(note for _, note in effects(engine)) == ["ann", "bob", "bob's friend"]


def test_a_kind_without_a_handler_is_a_typed_error_and_nothing_runs(engine: Engine) -> None:
    app = Registry()

    @app.task("send_receipt")
    def send_receipt(payload: Any, ctx: TaskContext) -> None:
        pass

    checkout(engine, 1)
    with Session(engine) as session, session.begin():
        enqueue(session, "resize_image", {"id": 3})

    with pytest.raises(NoHandlerError, match="'resize_image' \\(1\\)") as caught:
        drain(engine, app=app)
    assert caught.value.kinds == {"resize_image": 1}
    assert {t.attempts for t in enqueued(engine)} == {0}  # nothing was claimed

    assert drain(engine, app=app, kinds=["send_receipt"]).succeeded == 1
    with pytest.raises(NoHandlerError, match="resize_image"):
        drain(engine, app=app, kinds=["resize_image"])


def test_uncommitted_tasks_in_the_binds_transaction_are_an_error(engine: Engine) -> None:
    app = Registry()

    @app.task("send_receipt")
    def send_receipt(payload: Any, ctx: TaskContext) -> None:
        pass

    with Session(engine) as session:
        enqueue(session, "send_receipt", {"order_id": 1})
        assert len(enqueued(session)) == 1  # the transaction sees its own task
        with pytest.raises(UncommittedTasksError, match="commit first"):
            drain(session, app=app)
        session.commit()
        assert drain(session, app=app).succeeded == 1


def test_bad_arguments_are_refused_before_anything_runs(engine: Engine) -> None:
    with pytest.raises(TypeError, match="takes a SQLAlchemy Engine"):
        drain(object())
    with pytest.raises(TypeError, match="list of names"):
        drain(engine, kinds="send_receipt")
    with pytest.raises(ValueError, match="max_tasks"):
        drain(engine, max_tasks=0)
    with pytest.raises(ValueError, match="seconds >= 0"):
        advance(engine, -1)


def test_no_service_imports_the_testing_helper() -> None:
    code = (
        "import sys, ledgerq, ledgerq.compose, ledgerq.cli; print('ledgerq.testing' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


CONFTEST = """
import os

import pytest
from sqlalchemy import create_engine

pytest_plugins = ["ledgerq.testing.pytest_plugin"]


@pytest.fixture
def ledgerq_bind():
    engine = create_engine(os.environ["APP_DATABASE_URL"])
    yield engine
    engine.dispose()
"""

USER_TEST = """
from sqlalchemy.orm import Session

from ledgerq import enqueue, task


@task("plugin_kind")
def plugin_kind(payload, ctx):
    if payload["n"] == 2:
        raise RuntimeError("two")


def test_drain_fixture(ledgerq_clean, ledgerq_bind, ledgerq_drain, ledgerq_enqueued,
                       ledgerq_advance):
    with Session(ledgerq_bind) as session, session.begin():
        enqueue(session, "plugin_kind", {"n": 1})
        enqueue(session, "plugin_kind", {"n": 2}, retry=[30], max_attempts=2)
    assert [t.payload for t in ledgerq_enqueued("plugin_kind")] == [{"n": 1}, {"n": 2}]
    result = ledgerq_drain()
    assert (result.succeeded, result.retried) == (1, 1)
    assert ledgerq_advance(30) == 1
    assert ledgerq_drain().dead == 1
"""


def test_the_pytest_plugin_in_a_users_suite(engine: Engine, tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(textwrap.dedent(CONFTEST))
    (tmp_path / "test_user.py").write_text(textwrap.dedent(USER_TEST))
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    env = {**os.environ, "APP_DATABASE_URL": engine.url.render_as_string(hide_password=False)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout


def test_a_kinds_defaults_apply_to_a_task_enqueued_by_name_without_them(
    engine: Engine,
) -> None:
    app = Registry()

    @app.task("flaky", max_attempts=2, retry=[0.0])
    def flaky(payload: dict[str, Any], ctx: TaskContext) -> None:
        raise RuntimeError("down")

    with Session(engine) as session, session.begin():
        by_name = enqueue(session, "flaky", {})  # a producer that never imported flaky
        given = enqueue(session, "flaky", {}, max_attempts=3)  # the enqueue overrides
    assert {t.id: t.max_attempts for t in enqueued(engine, "flaky")} == {by_name: None, given: 3}

    result = drain(engine, app=app, include_future=True)

    assert (result.retried, result.dead) == (1 + 2, 2)
    attempts = {r.id: r.attempt for r in result.runs}  # each task's last attempt
    assert attempts == {by_name: 2, given: 3}


def test_the_handle_enqueues_with_the_kinds_defaults_and_an_expired_task_never_runs(
    engine: Engine,
) -> None:
    app = Registry()
    ran: list[int] = []

    @app.task("quote", queue="other", priority=7, expires=3600)
    def quote(payload: dict[str, Any], ctx: TaskContext) -> int:
        ran.append(int(payload["n"]))
        return int(payload["n"])

    assert quote({"n": 1}, None) == 1  # type: ignore[arg-type]  # still the plain function
    with Session(engine) as session, session.begin():
        stale = quote.enqueue(session, {"n": 2}, tags=["tenant:7"])
    advance(engine, 3601)  # the hour passes for it
    with Session(engine) as session, session.begin():
        fresh = quote.enqueue(session, {"n": 3}, priority=1)
    listed = {t.id: (t.queue, t.priority) for t in enqueued(engine, "quote")}
    assert listed == {stale: ("other", 7), fresh: ("other", 1)}
    tagged = {t.id: (t.tags, t.expires_at) for t in enqueued(engine, "quote")}
    assert (tagged[stale][0], tagged[fresh][0]) == (["tenant:7"], None)
    stale_expiry, fresh_expiry = tagged[stale][1], tagged[fresh][1]
    assert isinstance(stale_expiry, datetime) and isinstance(fresh_expiry, datetime)
    assert stale_expiry.tzinfo is not None
    assert stale_expiry < fresh_expiry  # the stale one's hour has passed, the fresh one's not

    result = drain(engine, app=app)

    assert (result.succeeded, result.expired, ran) == (1, 1, [1, 3])  # 1: the direct call
