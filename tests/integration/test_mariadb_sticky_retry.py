"""Sticky retries on MariaDB (tests/integration/test_sticky_retry.py's, on the MySQL
ledger): ``@task(..., sticky_retry=seconds)`` sends a retry to the worker that ran
the failed attempt while it is live and within the window, then to any worker.

Real ``ledgerq worker`` processes of one app (tests/apps/sticky_app.py) share
one route, fed by a real ``ledgerq relay`` (and ``ledgerq reconcile``, which
takes back what a stopped worker's personal route held), so without the hold
each retry would land on either (20 tasks all landing on their first worker by
chance: 1 in 2**20). The lapses are checked on the ledger's own rule: the
relay's batch (``publish_batch``) and the direct claim (``claim_due``).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator

import pytest

from ledgerq import TaskSpec
from ledgerq.compose.storage import async_engine
from ledgerq.core.config import Settings
from ledgerq.ledger.model import Outcome
from ledgerq.ledger.mysql import MyLedger
from ledgerq.ledger.routing import Subscription, sticky_route
from tests.conftest import delete_broker_objects
from tests.mariadb_broker import Processes, fresh, query, routed, until

WORKER = ("worker", "--app", "tests.apps.sticky_app", "--concurrency", "4", "--grace", "5")


@pytest.fixture
async def mariadb(mariadb_settings: Settings) -> AsyncIterator[Settings]:
    """The MariaDB ledger emptied, a private AMQP prefix (its objects deleted after)."""
    current = await fresh(mariadb_settings)
    yield current
    delete_broker_objects(current, routed(current))


@pytest.fixture
async def ledger(mariadb: Settings) -> AsyncIterator[MyLedger]:
    opened = MyLedger(async_engine(mariadb, "ledgerq-test-sticky", pool_size=2))
    try:
        yield opened
    finally:
        await opened.dispose()


@pytest.fixture
def processes(mariadb: Settings) -> Iterator[Processes]:
    started = Processes(mariadb)
    try:
        yield started
    finally:
        started.stop_all()


def _attempt_workers(settings: Settings, ids: list[int]) -> dict[int, list[str]]:
    """Each finished task's attempts' workers, in order (history's log)."""
    listed = ", ".join(str(int(i)) for i in ids)
    rows = query(settings, f"SELECT id, attempt_log FROM ledgerq_history WHERE id IN ({listed})")
    return {int(i): [entry["worker"] for entry in json.loads(log)] for i, log in rows}


def _finished(settings: Settings, ids: list[int]) -> dict[int, str]:
    listed = ", ".join(str(int(i)) for i in ids)
    rows = query(settings, f"SELECT id, status FROM ledgerq_history WHERE id IN ({listed})")
    return {int(i): str(s) for i, s in rows}


def _live_workers(settings: Settings) -> set[str]:
    rows = query(
        settings,
        "SELECT worker FROM ledgerq_subscriptions"
        " WHERE expires_at > UTC_TIMESTAMP(6) AND sticky_route IS NOT NULL",
    )
    return {str(r[0]) for r in rows}


def _flaky(n: int, delay: float) -> list[TaskSpec]:
    return [TaskSpec("sticky.flaky", {"n": k}, retry=[delay], max_attempts=3) for k in range(n)]


async def test_each_retry_runs_on_the_worker_whose_attempt_failed(
    mariadb: Settings, ledger: MyLedger, processes: Processes
) -> None:
    for _ in range(2):
        processes.spawn(*WORKER)
    until(lambda: len(_live_workers(mariadb)) == 2, "both workers subscribed")
    routes = query(mariadb, "SELECT DISTINCT sticky_route FROM ledgerq_subscriptions")
    assert len(routes) == 2, routes  # each its own personal route
    ids = await ledger.enqueue(_flaky(20, 1.0))
    processes.spawn("relay")
    until(lambda: len(_finished(mariadb, ids)) == len(ids), "every task finished", 90)
    assert set(_finished(mariadb, ids).values()) == {"succeeded"}
    runs = _attempt_workers(mariadb, ids)
    assert all(len(w) == 2 for w in runs.values()), runs
    assert all(first == second for first, second in runs.values()), runs
    assert len({first for first, _ in runs.values()}) == 2, "both workers ran first attempts"


async def test_a_retry_held_for_a_worker_that_stopped_runs_on_another(
    mariadb: Settings, ledger: MyLedger, processes: Processes
) -> None:
    first = processes.spawn(*WORKER)
    until(lambda: len(_live_workers(mariadb)) == 1, "the first worker subscribed")
    [gone] = _live_workers(mariadb)
    ids = await ledger.enqueue(_flaky(4, 4.0))
    listed = ", ".join(str(i) for i in ids)
    processes.spawn("relay")
    processes.spawn("reconcile", "--every", "1", "--stall", "2")

    def held() -> bool:
        [(n,)] = query(
            mariadb,
            f"SELECT COUNT(*) FROM ledgerq_tasks WHERE id IN ({listed}) AND status = 'pending'"
            f" AND sticky_worker = '{gone}'"
            " AND sticky_until > UTC_TIMESTAMP(6) + INTERVAL 30 SECOND",
        )
        return int(n) == len(ids)

    until(held, "every first attempt failed on the first worker, its retry held for it")
    out = processes.stop(first)  # within the hold: its subscriptions go at once
    assert first.returncode == 0, out
    processes.spawn(*WORKER)
    until(lambda: len(_finished(mariadb, ids)) == len(ids), "every task finished", 90)
    assert set(_finished(mariadb, ids).values()) == {"succeeded"}
    runs = _attempt_workers(mariadb, ids)
    assert all(w[0] == gone and w[1] != gone for w in runs.values()), runs


async def _held_route(ledger: MyLedger, task_id: int) -> str:
    """Where the relay's next batch would publish ``task_id`` (its window's route);
    the batch rolls back (nothing published)."""

    class Rollback(Exception):
        pass

    route = ""
    try:
        async with ledger.publish_batch(100) as batch:
            [row] = [r for r in batch.rows if r.id == task_id]
            route = row.route or ""
            raise Rollback
    except Rollback:
        pass
    return route


async def test_the_hold_lapses_with_its_window_or_its_worker(
    mariadb: Settings, ledger: MyLedger
) -> None:
    own = sticky_route("w-a")
    await ledger.subscribe("w-a", [Subscription("default", frozenset({"k"}), None, 5, own)], 600)
    await ledger.subscribe("w-b", [Subscription("default", frozenset({"k"}), None, 5)], 600)
    shared = Subscription("default", frozenset({"k"})).route or ""
    [task_id] = await ledger.enqueue([TaskSpec("k", {})])

    def hold(seconds: int, worker: str = "w-a") -> None:
        query(
            mariadb,
            f"UPDATE ledgerq_tasks SET sticky_worker = '{worker}',"
            f" sticky_until = UTC_TIMESTAMP(6) + INTERVAL {seconds} SECOND WHERE id = {task_id}",
        )

    assert await _held_route(ledger, task_id) == shared  # no hold: the shared route
    hold(3600)
    assert await _held_route(ledger, task_id) == own  # held: only w-a's own route
    hold(-1)
    assert await _held_route(ledger, task_id) == shared  # the window ran out
    hold(3600, worker="w-b")
    assert await _held_route(ledger, task_id) == shared  # w-b has no personal route
    hold(3600)
    assert {w["route"] for w in await ledger.windows()} == {shared, own}
    await ledger.unsubscribe("w-a")
    assert await _held_route(ledger, task_id) == shared  # w-a left: any worker
    assert {w["route"] for w in await ledger.windows()} == {shared}


async def test_the_direct_claim_leaves_a_held_retry_until_its_hold_lapses(
    mariadb: Settings, ledger: MyLedger
) -> None:
    own = sticky_route("w-a")
    await ledger.subscribe("w-a", [Subscription("default", None, None, 5, own)], 600)
    await ledger.subscribe("w-d", [Subscription("default")], 600, direct=True)
    [task_id] = await ledger.enqueue([TaskSpec("k", {})])
    query(
        mariadb,
        "UPDATE ledgerq_tasks SET sticky_worker = 'w-a',"
        f" sticky_until = UTC_TIMESTAMP(6) + INTERVAL 1 HOUR WHERE id = {task_id}",
    )
    assert await ledger.claim_due(["default"], 10, "w-d", 30.0) == []  # held for w-a
    query(
        mariadb,
        "UPDATE ledgerq_tasks SET sticky_until = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND"
        f" WHERE id = {task_id}",
    )
    assert [t.id for t in await ledger.claim_due(["default"], 10, "w-d", 30.0)] == [task_id]


async def test_a_failed_attempt_of_a_sticky_kind_is_held_for_its_worker(
    mariadb: Settings, ledger: MyLedger
) -> None:
    assert await ledger.register_sticky({"k": 60.0, "plain": None}) == ["k"]
    ids = await ledger.enqueue([TaskSpec("k", {}), TaskSpec("plain", {})])
    await ledger.subscribe("w-d", [Subscription("default")], 600, direct=True)
    claimed = await ledger.claim_due(["default"], 10, "w-d", 30.0)
    assert sorted(t.id for t in claimed) == ids
    await ledger.finish([Outcome(t.id, t.epoch, "retry", delay=5.0, error="boom") for t in claimed])
    rows = query(
        mariadb,
        "SELECT id, sticky_worker, TIMESTAMPDIFF(MICROSECOND, run_at, sticky_until) / 1e6"
        f" FROM ledgerq_tasks WHERE id IN ({ids[0]}, {ids[1]}) ORDER BY id",
    )
    assert [(int(i), w) for i, w, _ in rows] == [(ids[0], "w-d"), (ids[1], None)]
    assert float(rows[0][2]) == pytest.approx(60.0, abs=0.01)  # due + the window
    assert rows[1][2] is None
