"""The operator's side on MariaDB through its public API alone (the seam's
``MyLedger`` methods and :mod:`ledgerq.admin`): a row another transaction
holds is waited for and judged on what that transaction committed, or on what
was there before when it rolled back (set-priority, which takes a running task,
is fenced by the epoch alone); the broker routes' windows; and the admin API on
a MySQL engine or URL.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.orm import Session

import ledgerq
from ledgerq import Action, TaskFilter, TaskSpec, admin
from ledgerq.compose.storage import async_engine, sync_engine
from ledgerq.core.config import Settings
from ledgerq.ledger.actions import MOVED_ON
from ledgerq.ledger.mysql import MyLedger, claims, plans
from ledgerq.ledger.routing import Subscription
from tests.support import until

WORKER = "ops-extras-worker"
LEASE_S = 30.0


@pytest.fixture
async def ledger(mariadb_settings: Settings) -> AsyncIterator[MyLedger]:
    mine = MyLedger(async_engine(mariadb_settings, "ledgerq-test-ops", pool_size=3))
    try:
        await mine.truncate()
        yield mine
    finally:
        await mine.dispose()


@pytest.fixture
async def engine(mariadb_settings: Settings) -> AsyncIterator[AsyncEngine]:
    opened = async_engine(mariadb_settings, "ledgerq-test-ops-holder", pool_size=2)
    try:
        yield opened
    finally:
        await opened.dispose()


def _enqueue(settings: Settings, *specs: TaskSpec) -> list[int]:
    producer = sync_engine(settings, "ledgerq-test-producer", pool_size=1)
    try:
        with Session(producer) as session, session.begin():
            return ledgerq.enqueue_many(session, list(specs))
    finally:
        producer.dispose()


async def _waiting_for_a_lock(engine: AsyncEngine) -> bool:
    async with engine.connect() as conn:
        waits = await conn.execute(
            text("SELECT COUNT(*) FROM information_schema.innodb_trx WHERE trx_state = 'LOCK WAIT'")
        )
        return bool(waits.scalar())


@pytest.mark.parametrize(
    "action", [Action.cancel(), Action.set_priority(5)], ids=["cancel", "set-priority"]
)
@pytest.mark.parametrize("holder_commits", [True, False], ids=["commits", "rolls-back"])
async def test_a_row_another_transaction_holds_is_waited_for_and_judged_anew(
    mariadb_settings: Settings,
    ledger: MyLedger,
    engine: AsyncEngine,
    action: Action,
    holder_commits: bool,
) -> None:
    [task_id] = _enqueue(mariadb_settings, TaskSpec("ops.held"))
    async with engine.connect() as holder:
        # a worker's claim, not yet committed: the row locked, its epoch bumped
        claim = claims.claim_fenced([(task_id, 0)], WORKER, LEASE_S, 1 << 20)
        assert await plans.adrive(claim, plans.async_runner(holder, "claim"))
        acting = asyncio.create_task(ledger.act(action, TaskFilter(ids=(task_id,)), actor="ops"))
        await until("the action waits for the claim's lock", lambda: _waiting_for_a_lock(engine))
        assert not acting.done()
        if holder_commits:
            await holder.commit()
        else:
            await holder.rollback()
        report = await asyncio.wait_for(acting, 30)

    shown = await ledger.show(task_id)
    if holder_commits:  # the claim won: listed at epoch 0, the row is at epoch 1 now
        assert (report.changed, report.reasons) == (0, {MOVED_ON: 1})
        assert (shown["status"], shown["priority"]) == ("running", 0)
        assert shown["cancel_requested_at"] is None
    elif action.name == "cancel":  # the claim never happened: the row as listed
        assert (report.changed, report.skipped, shown["status"]) == (1, 0, "cancelled")
    else:
        assert (report.changed, shown["status"], shown["priority"]) == (1, "pending", 5)


async def test_the_admin_api_takes_a_mysql_engine_or_url_as_its_target(
    mariadb_settings: Settings, ledger: MyLedger, engine: AsyncEngine
) -> None:
    first, second = _enqueue(mariadb_settings, TaskSpec("ops.admin"), TaskSpec("ops.admin"))

    listed = await admin.alist_tasks(engine, TaskFilter(kind="ops.admin"))
    assert [row.id for row in listed] == [second, first]
    url = engine.url.render_as_string(hide_password=False)
    report = await admin.aact(url, Action.cancel(), TaskFilter(ids=(first,)), actor="ops")
    assert report.changed == 1 and report.audit_id is not None
    assert await ledger.whereabouts([first, second]) == {first: "cancelled", second: "pending"}
    [record] = await admin.aaudit(engine)
    assert (record.id, record.actor) == (report.audit_id, "ops")


async def test_windows_count_what_is_published_to_each_live_route_and_cancel_takes_it_back(
    mariadb_settings: Settings, ledger: MyLedger, engine: AsyncEngine
) -> None:
    await ledger.subscribe("w-window", [Subscription("default", capacity=5)], 600.0)
    await ledger.subscribe(
        "w-routed", [Subscription("other", kinds=frozenset({"ops.x"}), capacity=2)], 600.0
    )
    published, pending = _enqueue(mariadb_settings, TaskSpec("ops.win"), TaskSpec("ops.win"))
    async with engine.begin() as conn:  # what a relay's publication leaves (no relay here)
        await conn.execute(
            text(
                "UPDATE ledgerq_tasks SET status = 'published', route = '', "
                "published_at = UTC_TIMESTAMP(6), publishes = 1 WHERE id = :id"
            ),
            {"id": published},
        )

    windows = {w["queue"]: w for w in await ledger.windows()}
    assert {q: (w["capacity"], w["published"], w["room"]) for q, w in windows.items()} == {
        "default": (5, 1, 4),
        "other": (2, 0, 2),
    }
    assert windows["default"]["route"] == "" and windows["other"]["route"]  # kinds: a route
    assert await ledger.unserved() == []  # the whole of "default" is served
    await ledger.subscribe("w-direct", [Subscription("default")], 600.0, direct=True)
    assert [w["queue"] for w in await ledger.windows()] == ["other"]  # claimed directly

    report = await ledger.act(Action.cancel(), TaskFilter(kind="ops.win"), actor="ops")
    assert (report.matched, report.changed) == (2, 2)
    assert await ledger.whereabouts([published, pending]) == {
        published: "cancelled",
        pending: "cancelled",
    }
    gone = await ledger.show(published)
    assert (gone["location"], gone["publishes"], gone["finished_at"] is not None) == (
        "history",
        1,
        True,
    )
    for worker in ("w-window", "w-routed", "w-direct"):
        await ledger.unsubscribe(worker)
