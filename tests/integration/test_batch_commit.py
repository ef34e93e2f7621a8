"""The default commit path for handlers that write through ``ctx.session``:
batched windows, a savepoint per handler (consumers/batch.py), end to end."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from ledgerq import AsyncTaskContext, Registry, TaskContext, TaskSpec
from ledgerq.consumers.batch import BatchConfig
from ledgerq.consumers.worker import WorkerConfig
from ledgerq.core.config import Settings
from ledgerq.ledger.pg import PgLedger
from tests.harness import EFFECTS_DDL, Pipeline, db, effects, enqueue_committed

INSERT = text("INSERT INTO test_effects (task_id, attempt) VALUES (:i, txid_current())")


class Base(DeclarativeBase):
    pass


class Effect(Base):
    """``test_effects`` as an ORM class, for handlers whose flush fails."""

    __tablename__ = "test_effects"
    id: Mapped[int] = mapped_column(primary_key=True)
    task_id: Mapped[int]
    attempt: Mapped[int]


def clashing(task_id: int) -> list[Effect]:
    """Two new rows with one primary key: the session's flush fails, and leaves the
    session unusable until rolled back (the window must not hand it on)."""
    return [Effect(id=-task_id, task_id=-task_id, attempt=0) for _ in range(2)]


@pytest.fixture
def effects_table(settings: Settings) -> Settings:
    with db(settings) as conn:
        conn.execute(EFFECTS_DDL)
    return settings


def misbehave(payload: dict[str, Any], attempt: int) -> str | None:
    """What a test task does wrong on its first attempt, after writing."""
    return payload.get("fail") if attempt == 1 else None


async def amisbehave(how: str | None, ctx: AsyncTaskContext) -> Any:
    """What an async test task does after its write (see :func:`misbehave`)."""
    if how == "raise":
        raise RuntimeError("one bad apple")
    if how == "sql":  # a failed statement: the savepoint, not the window, is undone
        await ctx.session.execute(text("SELECT 1 / 0"))
    if how == "self-rollback":  # against the rules: the window cannot undo it alone
        await ctx.session.rollback()
        await ctx.session.execute(INSERT, {"i": -ctx.id})
        raise RuntimeError("rolled back, wrote again, failed")
    if how == "own-savepoint":  # a savepoint of its own, rolled back: the rest stays
        async with ctx.session.begin_nested() as own:
            await ctx.session.execute(INSERT, {"i": -ctx.id})
            await own.rollback()
        return {"done": ctx.id}
    if how == "orm-flush":  # the window's flush fails after the handler returned
        ctx.session.add_all(clashing(ctx.id))
        return {"done": ctx.id}
    if how == "open-savepoint":  # fails inside a savepoint of its own, left open
        await ctx.session.begin_nested()
        await ctx.session.execute(INSERT, {"i": -ctx.id})
        raise RuntimeError("failed inside its own savepoint")
    return {"done": ctx.id} if how is None else object()  # not JSON: fails


def sync_misbehave(how: str | None, ctx: TaskContext) -> Any:
    """:func:`amisbehave`, for a sync test task."""
    if how == "raise":
        raise RuntimeError("one bad apple")
    if how == "sql":
        ctx.session.execute(text("SELECT 1 / 0"))
    if how == "self-rollback":
        ctx.session.rollback()
        ctx.session.execute(INSERT, {"i": -ctx.id})
        raise RuntimeError("rolled back, wrote again, failed")
    if how == "own-savepoint":
        with ctx.session.begin_nested() as own:
            ctx.session.execute(INSERT, {"i": -ctx.id})
            own.rollback()
        return {"done": ctx.id}
    if how == "orm-flush":
        ctx.session.add_all(clashing(ctx.id))
        return {"done": ctx.id}
    if how == "open-savepoint":
        ctx.session.begin_nested()
        ctx.session.execute(INSERT, {"i": -ctx.id})
        raise RuntimeError("failed inside its own savepoint")
    return {"done": ctx.id} if how is None else object()


def batched_registry() -> Registry:
    registry = Registry()

    @registry.task("t.async_write")
    async def async_write(payload: Any, ctx: AsyncTaskContext) -> Any:
        await ctx.session.execute(INSERT, {"i": ctx.id})
        return await amisbehave(misbehave(payload, ctx.attempt), ctx)

    @registry.task("t.sync_write")
    def sync_write(payload: Any, ctx: TaskContext) -> Any:
        ctx.session.execute(INSERT, {"i": ctx.id})
        return sync_misbehave(misbehave(payload, ctx.attempt), ctx)

    # The identity map holds objects weakly: these outlive their handlers (as a
    # cache in a user's module would), so a session handed on unemptied shows them.
    kept: list[Effect] = []

    @registry.task("t.async_orm")
    async def async_orm(payload: Any, ctx: AsyncTaskContext) -> Any:
        if ctx.session.sync_session.identity_map or ctx.session.new:
            raise RuntimeError("an earlier handler's ORM objects reached this one")
        kept.append(Effect(task_id=ctx.id, attempt=ctx.attempt))
        ctx.session.add(kept[-1])
        await ctx.session.flush()  # now in the identity map, for the window to empty
        return None

    @registry.task("t.sync_orm")
    def sync_orm(payload: Any, ctx: TaskContext) -> Any:
        if ctx.session.identity_map or ctx.session.new:
            raise RuntimeError("an earlier handler's ORM objects reached this one")
        kept.append(Effect(task_id=ctx.id, attempt=ctx.attempt))
        ctx.session.add(kept[-1])
        return None  # the window flushes it

    return registry


async def run_learned(
    settings: Settings, kind: str, n: int, failing: dict[int, str]
) -> tuple[int, list[int]]:
    """One task of ``kind`` first (the worker learns, on its own path, that the kind
    writes through ctx.session), then ``n`` more, those at the indexes of
    ``failing`` misbehaving as named; return (the first id, the others' ids)."""
    config = WorkerConfig(concurrency=50, lease_s=30, heartbeat_s=5, grace_s=5)
    async with Pipeline(settings, batched_registry(), worker=config) as pipe:
        [first] = enqueue_committed(settings, [TaskSpec(kind, {})])
        await pipe.settle([first])
        await pipe.learned(kind)
        specs = [
            TaskSpec(kind, {"fail": failing[i]} if i in failing else {"n": i}, retry=[0.05])
            for i in range(n)
        ]
        ids = enqueue_committed(settings, specs)
        await pipe.settle(ids)
    return first, ids


@pytest.mark.parametrize("kind", ["t.async_orm", "t.sync_orm"])
async def test_handlers_in_a_window_never_see_each_others_orm_objects(
    effects_table: Settings, ledger: PgLedger, kind: str
) -> None:
    """The window hands one session from handler to handler, emptied between them."""
    settings = effects_table
    first, ids = await run_learned(settings, kind, 40, {})
    assert set((await ledger.whereabouts(ids)).values()) == {"succeeded"}
    assert {(await ledger.show(i))["attempts"] for i in ids} == {1}
    written = [t for t, _ in effects(settings) if t != first]
    assert sorted(written) == sorted(ids)


@pytest.mark.parametrize("kind", ["t.async_write", "t.sync_write"])
async def test_windows_share_commits_and_one_failure_undoes_only_its_own_writes(
    effects_table: Settings, ledger: PgLedger, kind: str
) -> None:
    settings = effects_table
    failing = {
        7: "raise",
        12: "own-savepoint",
        19: "sql",
        25: "open-savepoint",
        31: "not json",
    }
    first, ids = await run_learned(settings, kind, 40, failing)

    unstorable = ids[31]  # a result that is not JSON ends the task dead, its write undone
    where = await ledger.whereabouts(ids)
    assert where.pop(unstorable) == "dead"
    assert set(where.values()) == {"succeeded"}
    attempts = {i: (await ledger.show(i))["attempts"] for i in where}
    retried = {ids[7], ids[19], ids[25]}
    assert {i for i, a in attempts.items() if a == 2} == retried
    assert all(attempts[i] == 1 for i in where if i not in retried)  # no one else was undone
    assert (await ledger.show(ids[0]))["result"] == {"done": ids[0]}
    written = [(t, x) for t, x in effects(settings) if t != first]
    assert sorted(t for t, _ in written) == sorted(where)  # exactly one committed write each
    transactions = {txid for _, txid in written}
    assert len(transactions) < len(ids) / 2, len(transactions)  # commits were shared


@pytest.mark.parametrize("how", ["self-rollback", "orm-flush"])
@pytest.mark.parametrize("kind", ["t.async_write", "t.sync_write"])
async def test_a_handler_that_rolls_back_its_session_sends_its_window_to_the_ordinary_path(
    effects_table: Settings, ledger: PgLedger, kind: str, how: str
) -> None:
    """A handler that rolls its session back, or whose ORM flush fails (SQLAlchemy
    then rolls the session back), ends its window's transaction: the window is
    rolled back whole; its tasks run again in their own transactions with no
    attempt counted, and only the handler at fault fails there. Nothing a failed
    attempt wrote is committed."""
    settings = effects_table
    first, ids = await run_learned(settings, kind, 20, {5: how})

    assert set((await ledger.whereabouts(ids)).values()) == {"succeeded"}
    attempts = {i: (await ledger.show(i))["attempts"] for i in ids}
    assert attempts.pop(ids[5]) == 2
    assert set(attempts.values()) == {1}  # the innocent were not charged
    written = sorted(t for t, _ in effects(settings) if t != first)
    assert written == sorted(ids)  # no write of a failed attempt, and none twice


async def test_a_sync_handler_that_outlives_its_timeout_in_a_window_frees_the_others(
    effects_table: Settings, ledger: PgLedger
) -> None:
    """A hung sync handler cannot be stopped; past its timeout (plus the margin) the
    worker ends its window's transaction from another connection. The tasks the
    window ran before it commit on the ordinary path at once, uncharged, long
    before the hung thread returns. The hung task is charged a timed-out attempt,
    written only once its thread has returned: its retry never runs beside it."""
    settings = effects_table
    release = threading.Event()
    released_at: list[float] = []
    retried_at: list[float] = []
    registry = batched_registry()

    @registry.task("t.sync_hang")
    def hang(payload: Any, ctx: TaskContext) -> Any:
        ctx.session.execute(INSERT, {"i": ctx.id})
        if payload.get("hang") and ctx.attempt == 1:
            release.wait(60)  # far past its timeout
            released_at.append(time.monotonic())
        elif payload.get("hang"):
            retried_at.append(time.monotonic())
        return None

    batch = BatchConfig(window_s=1.0, margin_s=0.5, lanes=1)
    config = WorkerConfig(concurrency=50, lease_s=30, heartbeat_s=1, grace_s=5, batch=batch)
    try:
        async with Pipeline(settings, registry, worker=config) as pipe:
            [first] = enqueue_committed(settings, [TaskSpec("t.sync_hang", {})])
            await pipe.settle([first])
            specs = [TaskSpec("t.sync_hang", {"n": i}) for i in range(10)]
            specs.append(TaskSpec("t.sync_hang", {"hang": True}, timeout=1.0, retry=[0.05]))
            ids = enqueue_committed(settings, specs)
            started = time.monotonic()
            await pipe.settle(ids[:-1], timeout=45)
            took = time.monotonic() - started
            assert pipe.worker.batcher.demoted >= 1
            assert (await pipe.statuses(ids[-1:]))[ids[-1]] == "running"  # its thread runs
            release.set()
            await pipe.settle(ids[-1:], timeout=20)
    finally:
        release.set()
    # the hung thread returns only at 60 s; the bound is generous for a loaded machine
    assert took < 45, took
    assert retried_at[0] > released_at[0]  # the retry started after the hung thread returned
    hung = await ledger.show(ids[-1])
    assert hung["status"] == "succeeded" and hung["attempts"] == 2
    assert "in a batched window" in hung["attempt_log"][0]["error"]
    assert {(await ledger.show(i))["attempts"] for i in ids[:-1]} == {1}
    written = sorted(t for t, _ in effects(settings) if t != first)
    assert written == sorted(ids)  # the hung attempt's write was rolled back with its window


async def test_no_batch_commit_gives_every_task_its_own_transaction(
    effects_table: Settings, ledger: PgLedger
) -> None:
    settings = effects_table
    config = WorkerConfig(
        concurrency=50, lease_s=30, heartbeat_s=5, grace_s=5, batch=BatchConfig(enabled=False)
    )
    ids = enqueue_committed(settings, [TaskSpec("t.async_write", {"n": i}) for i in range(20)])
    async with Pipeline(settings, batched_registry(), worker=config) as pipe:
        await pipe.settle(ids)
    assert set((await ledger.whereabouts(ids)).values()) == {"succeeded"}
    assert len({txid for _, txid in effects(settings)}) == len(ids)


def test_batch_config_validates() -> None:
    with pytest.raises(ValueError, match=r"1\.\.63"):
        BatchConfig(max_tasks=64)  # the window's own savepoint takes the 64th
    with pytest.raises(ValueError, match="margin_s"):
        BatchConfig(margin_s=-1)
    with pytest.raises(ValueError, match="window"):
        BatchConfig(window_s=0)
