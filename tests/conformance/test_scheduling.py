"""Scheduling: pauses, rate limits, the settings workers register for their kinds,
and the periodic enqueuer's ``enqueue``, on every implementation."""

from __future__ import annotations

import pytest

from ledgerq import TaskSpec
from ledgerq.core.errors import InvalidTaskError
from ledgerq.ledger.routing import Subscription
from ledgerq.ledger.scheduling import RateLimit
from ledgerq.ledger.split.ledger import ShardLedger
from tests.conformance.conftest import ON_MARIADB
from tests.conformance.support import LEASE_S, WORKER, Enqueue


@ON_MARIADB
async def test_a_paused_queue_gives_nothing_until_it_is_resumed(
    ledger: ShardLedger, enqueue: Enqueue
) -> None:
    await ledger.subscribe(WORKER, [Subscription("default")], 600.0, direct=True)
    ids = enqueue("conf.p", "conf.p")

    paused = await ledger.pause("queue", "default", actor="conformance", reason="maintenance")
    assert (paused.action, paused.changed) == ("pause", True)
    assert (await ledger.pause("queue", "default", actor="conformance")).changed is False
    [row] = await ledger.pauses()
    assert (row["scope"], row["name"], row["actor"], row["reason"]) == (
        "queue",
        "default",
        "conformance",
        "maintenance",
    )
    assert await ledger.claim_due(["default"], 10, WORKER, LEASE_S) == []

    resumed = await ledger.resume("queue", "default", actor="conformance")
    assert (resumed.action, resumed.changed) == ("resume", True)
    assert (await ledger.resume("queue", "default", actor="conformance")).changed is False
    assert await ledger.pauses() == []
    won = await ledger.claim_due(["default"], 10, WORKER, LEASE_S)
    assert {t.id for t in won} == set(ids)


@ON_MARIADB
async def test_limits_set_by_an_operator_and_registered_by_workers_show_in_kinds(
    ledger: ShardLedger, enqueue: Enqueue
) -> None:
    enqueue("conf.limited", "conf.limited")

    await ledger.set_limit("conf.limited", RateLimit(2.0, 2.0), actor="conformance")
    [row] = [k for k in await ledger.kinds() if k["kind"] == "conf.limited"]
    assert int(row["pending"]) == 2

    assert await ledger.register_limits({"conf.worker": RateLimit(5.0, 5.0)}) == ["conf.worker"]
    assert await ledger.register_limits({"conf.worker": RateLimit(5.0, 5.0)}) == []
    assert await ledger.register_limits({"conf.worker": RateLimit(1.0, 1.0)}) == ["conf.worker"]
    assert {"conf.limited", "conf.worker"} <= {k["kind"] for k in await ledger.kinds()}

    await ledger.set_limit("conf.limited", None, actor="conformance")
    assert "conf.limited" not in {k["kind"] for k in await ledger.kinds()} or all(
        k.get("rate_per_s") is None for k in await ledger.kinds() if k["kind"] == "conf.limited"
    )
    with pytest.raises(InvalidTaskError, match="kind"):
        await ledger.set_limit("no such kind", RateLimit(1.0, 1.0), actor="conformance")
    audited = [
        (r["actor"], r["options"])
        for r in await ledger.audit()
        if (r["action"], r["selection"]) == ("set-limit", {"kind": "conf.limited"})
    ]  # newest first; on shards, one record per shard
    assert audited[0] == ("conformance", {"rate_per_s": None, "burst": None})
    assert audited[-1] == ("conformance", {"rate_per_s": 2.0, "burst": 2.0})
    assert {r["selection"]["kind"] for r in await ledger.audit()} == {"conf.limited"}


@ON_MARIADB
async def test_registered_orderings_report_only_what_changed_and_show_in_kinds(
    ledger: ShardLedger,
) -> None:
    assert await ledger.register_ordering({"conf.o": "block", "conf.r": "release"}) == ["conf.o"]
    assert await ledger.register_ordering({"conf.o": "block"}) == []
    assert [(k["kind"], k["ordering"]) for k in await ledger.kinds()] == [("conf.o", "block")]
    assert await ledger.register_ordering({"conf.o": "release"}) == ["conf.o"]
    assert await ledger.kinds() == []


@ON_MARIADB
async def test_registered_windows_and_callbacks_report_only_what_changed(
    ledger: ShardLedger,
) -> None:
    assert await ledger.register_sticky({"conf.s": 30.0, "conf.plain": None}) == ["conf.s"]
    assert await ledger.register_sticky({"conf.s": 30.0, "conf.plain": None}) == []
    assert await ledger.register_sticky({"conf.s": 5.0}) == ["conf.s"]
    assert await ledger.register_sticky({"conf.s": None}) == ["conf.s"]

    assert await ledger.register_children_done({"conf.parent": "conf.done"}) == ["conf.parent"]
    assert await ledger.register_children_done({"conf.parent": "conf.done"}) == []
    assert await ledger.register_children_done({"conf.parent": None}) == ["conf.parent"]


@ON_MARIADB
async def test_enqueue_commits_the_specs_in_the_ledgers_own_transaction(
    ledger: ShardLedger,
) -> None:
    ids = await ledger.enqueue([TaskSpec("conf.periodic", {"n": 1}), TaskSpec("conf.periodic")])

    assert len(ids) == 2
    assert await ledger.whereabouts(ids) == {i: "pending" for i in ids}
    assert (await ledger.show(ids[0]))["payload"] == {"n": 1}
    assert await ledger.enqueue([]) == []
