"""The operator's compare-and-set on MariaDB in its two steps (lock, then write:
ledger/mysql/operations_plans.py), against the races between them: a task that
moves on after the action listed it is skipped, never overwritten, and a task
another transaction holds makes the action wait for it, then judge its latest
version; a release of an ordering key in the caller's transaction holds a second
release of it until that transaction ends (ledger/mysql/keys.py). And the pauses
(ledger/mysql/operations_pauses.py): stored, audited, and their published tasks
taken back."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

import pymysql
import pytest
from sqlalchemy import Engine, TextClause
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

import ledgerq
from ledgerq import Action, TaskFilter, TaskSpec
from ledgerq.compose.storage import async_engine, sync_engine
from ledgerq.core.config import Settings
from ledgerq.ledger.actions import MOVED_ON
from ledgerq.ledger.binds import tx_for
from ledgerq.ledger.model import Outcome
from ledgerq.ledger.mysql import MyLedger
from ledgerq.ledger.mysql.operations import adrive
from ledgerq.ledger.mysql.operations_plans import OPQ, act
from ledgerq.ledger.mysql.plans import Answer, async_runner
from ledgerq.ledger.operations import release_key
from tests.support import until

WORKER = "ops-race-worker"
WAITING = """SELECT COUNT(*) FROM information_schema.innodb_trx t
JOIN information_schema.processlist p ON p.id = t.trx_mysql_thread_id
WHERE t.trx_state = 'LOCK WAIT' AND p.db = %s"""


@pytest.fixture
async def ledger(mariadb_settings: Settings) -> AsyncIterator[MyLedger]:
    opened = MyLedger(async_engine(mariadb_settings, "ledgerq-test-ops", pool_size=2))
    try:
        await opened.truncate()
        yield opened
    finally:
        await opened.dispose()


@pytest.fixture
def engine(mariadb_settings: Settings, ledger: MyLedger) -> Iterator[Engine]:
    opened = sync_engine(mariadb_settings, "ledgerq-test-ops-sync", pool_size=2)
    yield opened
    opened.dispose()


def enqueued(engine: Engine, *kinds: str) -> list[int]:
    with Session(engine) as session, session.begin():
        return ledgerq.enqueue_many(session, [TaskSpec(kind) for kind in kinds])


async def test_a_task_claimed_after_the_listing_is_skipped_as_moved_on(
    ledger: MyLedger, engine: Engine
) -> None:
    stays, claimed = enqueued(engine, "ops.race", "ops.race")
    raced: list[int] = []

    async with ledger.engine.connect() as conn:
        statement_of = async_runner(conn, "test")

        async def run(statement: TextClause, params: Mapping[str, Any]) -> Answer:
            answer = await statement_of(statement, params)
            if statement is OPQ.list_tasks and not raced:
                # between the listing and the lock, a worker claims one of them
                raced.extend(t.id for t in await ledger.claim([(claimed, 0)], WORKER, 30.0))
            return answer

        plan = act(Action.cancel(), TaskFilter(kind="ops.race"), actor="ops")
        report = await adrive(plan, run, conn.commit)
        await conn.commit()

    assert raced == [claimed]
    assert (report.matched, report.changed, report.reasons) == (2, 1, {MOVED_ON: 1})
    assert await ledger.whereabouts([stays, claimed]) == {stays: "cancelled", claimed: "running"}
    assert [a["outcome"] for a in (await ledger.find(claimed))["audit"]] == [MOVED_ON]
    assert [a["outcome"] for a in (await ledger.find(stays))["audit"]] == ["changed"]


def lock_waits(settings: Settings) -> int:
    """Transactions on the test's database waiting for a row lock now."""
    url = make_url(settings.database_url)
    with (
        pymysql.connect(host=url.host, port=url.port or 3306, user=url.username or "root",
                        password=url.password or "", autocommit=True) as conn,
        conn.cursor() as cursor,
    ):  # fmt: skip
        cursor.execute(WAITING, (url.database,))
        [(count,)] = cursor.fetchall()
        return int(count)


async def test_a_task_held_by_another_transaction_is_waited_for_then_judged_anew(
    ledger: MyLedger, engine: Engine, mariadb_settings: Settings
) -> None:
    [task_id] = enqueued(engine, "ops.held")
    [task] = await ledger.claim([(task_id, 0)], WORKER, 30.0)

    with Session(engine) as holder, holder.begin():
        # a handler's transaction ends the task (succeed, fenced) and has not committed
        assert tx_for(holder, "test").succeed([task.fence]) == {task_id}
        cancelling = asyncio.create_task(
            ledger.act(Action.cancel(), TaskFilter(ids=(task_id,)), actor="ops")
        )
        # the action lists the task (running: the end is not committed) and waits
        await until("the action waits on the row's lock", lambda: lock_waits(mariadb_settings) > 0)
        assert not cancelling.done()
    report = await cancelling

    assert (report.matched, report.changed, report.reasons) == (1, 0, {MOVED_ON: 1})
    assert report.asked_to_stop == 0
    assert await ledger.whereabouts([task_id]) == {task_id: "succeeded"}


@pytest.mark.parametrize("commit", [True, False], ids=["committed", "rolled-back"])
async def test_a_release_in_the_callers_transaction_holds_a_second_release_until_it_ends(
    ledger: MyLedger, engine: Engine, mariadb_settings: Settings, commit: bool
) -> None:
    await ledger.register_ordering({"ops.block": "block"})
    with Session(engine) as session, session.begin():
        [held] = ledgerq.enqueue_many(session, [TaskSpec("ops.block", ordering_key="k-1")])
    [task] = await ledger.claim([(held, 0)], WORKER, 30.0)
    await ledger.finish([Outcome.failed(task.fence, "poison", final=True)])

    with Session(engine) as caller, caller.begin():
        first = release_key(caller, "k-1", actor="ops:caller")
        assert first.released == [held]
        second = asyncio.create_task(ledger.release_key("k-1", actor="ops:second"))
        # the second saw the death unreleased (not committed) and waits on its release row
        await until("the second release waits", lambda: lock_waits(mariadb_settings) > 0)
        assert not second.done()
        if not commit:
            caller.rollback()
    report = await second

    if commit:  # the caller's release stands; the second's insert met it and wrote none
        assert (report.released, report.moved_on) == ([], 1)
    else:  # rolled back: the second releases the death itself
        assert (report.released, report.moved_on) == ([held], 0)
    outcomes = [(a["actor"], a["outcome"]) for a in (await ledger.find(held))["audit"]]
    expected = [("ops:caller", "changed"), ("ops:second", MOVED_ON)]  # by audit id
    assert outcomes == (expected if commit else [("ops:second", "changed")])
    after = await ledger.release_key("k-1", actor="ops", dry_run=True)
    assert (after.held, after.released) == (False, [])


async def test_pauses_are_stored_audited_and_take_back_published_tasks(
    ledger: MyLedger, engine: Engine, mariadb_settings: Settings
) -> None:
    published, other, running = enqueued(engine, "ops.p", "ops.q", "ops.p")
    await ledger.claim([(running, 0)], WORKER, 30.0)
    # (no relay on MySQL yet: the test publishes the row itself)
    execute(mariadb_settings, "UPDATE ledgerq_tasks SET status = 'published' WHERE id IN (%s, %s)",
            (published, other))  # fmt: skip

    paused = await ledger.pause("kind", "ops.p", actor="ops", reason="provider down")
    again = await ledger.pause("kind", "ops.p", actor="someone else")

    assert (paused.changed, paused.unpublished, again.changed) == (True, 1, False)
    [row] = await ledger.pauses()
    assert (row["scope"], row["name"], row["actor"], row["reason"]) == (
        "kind",
        "ops.p",
        "ops",
        "provider down",
    )
    assert [(k["kind"], k["paused"], k["pending"]) for k in await ledger.kinds()] == [
        ("ops.p", True, 1)
    ]
    assert await ledger.whereabouts([published, other, running]) == {
        published: "pending",
        other: "published",
        running: "running",
    }
    assert (await ledger.show(published))["epoch"] == 1  # its message claims nothing
    resumed = await ledger.resume("kind", "ops.p", actor="ops")
    assert resumed.changed and not (await ledger.resume("kind", "ops.p", actor="ops")).changed
    assert await ledger.pauses() == [] and await ledger.kinds() == []
    records = await ledger.audit()
    assert [(r["action"], r["selection"], r["changed"]) for r in records] == [
        ("resume", {"kind": "ops.p"}, 0),
        ("pause", {"kind": "ops.p"}, 1),
    ]
    assert [a["action"] for a in (await ledger.find(published))["audit"]] == ["pause"]


def execute(settings: Settings, statement: str, args: tuple[object, ...]) -> None:
    url = make_url(settings.database_url)
    with (
        pymysql.connect(host=url.host, port=url.port or 3306, user=url.username or "root",
                        password=url.password or "", database=url.database,
                        autocommit=True) as conn,
        conn.cursor() as cursor,
    ):  # fmt: skip
        cursor.execute(statement, args)
