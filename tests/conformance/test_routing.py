"""Routing and liveness (``subscribe``, ``unsubscribe``, ``alive``, ``gone``,
``pool_members``), what inspection shows of them (``subscriptions``, ``windows``,
``unserved``), and direct claims (``claim_due``), on every implementation."""

from __future__ import annotations

from ledgerq import TaskSpec
from ledgerq.ledger.routing import Subscription
from ledgerq.ledger.split.ledger import ShardLedger
from tests.conformance.conftest import ON_MARIADB
from tests.conformance.support import LEASE_S, SUBSCRIBER, WORKER, Enqueue, publish


@ON_MARIADB
async def test_subscribe_registers_what_a_worker_serves_and_unsubscribe_lets_it_lapse(
    ledger: ShardLedger,
) -> None:
    await ledger.subscribe("w-routing", [Subscription("default", capacity=4)], 600.0)

    rows = {(r["worker"], r["queue"]): r for r in await ledger.subscriptions()}
    mine = rows[("w-routing", "default")]
    assert mine["live"] is True and mine["route"] is None
    assert (SUBSCRIBER, "other") in rows  # the suite's own subscriber is listed too

    await ledger.unsubscribe("w-routing")
    lapsed = {(r["worker"], r["queue"]): r for r in await ledger.subscriptions()}
    assert lapsed[("w-routing", "default")]["live"] is False
    live = [r for r in await ledger.subscriptions() if r["live"]]
    assert live[0]["worker"] == SUBSCRIBER  # live first


async def test_windows_show_each_live_routes_room(ledger: ShardLedger, enqueue: Enqueue) -> None:
    await ledger.unsubscribe(SUBSCRIBER)
    await ledger.subscribe("w-win", [Subscription("default", capacity=5)], 600.0)
    enqueue("conf.win", "conf.win")
    await publish(ledger)

    rows = await ledger.windows()

    default = [w for w in rows if w["queue"] == "default"]
    assert default, rows
    assert sum(w["published"] for w in default) == 2
    assert all(w["capacity"] == 5 and w["room"] == 5 - w["published"] for w in default)


@ON_MARIADB
async def test_unserved_lists_due_tasks_nobody_serves(
    ledger: ShardLedger, enqueue: Enqueue
) -> None:
    enqueue(TaskSpec("conf.unserved", queue="nowhere"), TaskSpec("conf.unserved", queue="nowhere"))

    rows = await ledger.unserved()

    nowhere = [r for r in rows if r["queue"] == "nowhere"]
    assert nowhere and all(r["kind"] == "conf.unserved" for r in nowhere)


@ON_MARIADB
async def test_alive_and_gone_decide_the_pool_members(ledger: ShardLedger) -> None:
    await ledger.alive("a@pool", 60.0)
    await ledger.alive("b@pool", 60.0)
    await ledger.alive("c@elsewhere", 60.0)

    assert await ledger.pool_members("@pool") == ["a@pool", "b@pool"]
    await ledger.gone("a@pool")
    assert await ledger.pool_members("@pool") == ["b@pool"]


@ON_MARIADB
async def test_claim_due_claims_due_tasks_of_its_queues_and_kinds(
    ledger: ShardLedger, enqueue: Enqueue
) -> None:
    await ledger.subscribe(WORKER, [Subscription("default")], 600.0, direct=True)
    ids = enqueue("conf.d1", "conf.d1", "conf.d2", TaskSpec("conf.d1", queue="other"))
    [later] = enqueue(TaskSpec("conf.d1", delay=3600))

    only = await ledger.claim_due(["default"], 10, WORKER, LEASE_S, kinds=["conf.d2"])
    assert [t.id for t in only] == [ids[2]]
    rest = await ledger.claim_due(["default"], 10, WORKER, LEASE_S)

    assert {t.id for t in rest} == set(ids[:2])  # not "other", not the delayed one
    assert all(t.epoch == 1 and t.attempts == 1 for t in rest)
    assert await ledger.whereabouts([*ids, later]) == {
        ids[0]: "running",
        ids[1]: "running",
        ids[2]: "running",
        ids[3]: "pending",
        later: "pending",
    }
    assert await ledger.claim_due(["default"], 10, WORKER, LEASE_S) == []
