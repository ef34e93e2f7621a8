"""Per-kind defaults, expiry and tags (issue 26) on every implementation: the claim
fills what a producer left unset from the kind's registered defaults, refuses and
ends an expired task, and the operator's filter matches tags."""

from __future__ import annotations

from ledgerq import Action, TaskFilter, TaskSpec
from ledgerq.ledger.model import KindDefaults
from ledgerq.ledger.routing import Subscription
from ledgerq.ledger.split.ledger import ShardLedger
from tests.conformance.conftest import ON_MARIADB
from tests.conformance.support import LEASE_S, WORKER, Enqueue, claim_one

FIXED_7 = {"kind": "fixed", "delay": 7.0}


@ON_MARIADB
async def test_registered_defaults_report_only_what_changed(ledger: ShardLedger) -> None:
    defaults = {"conf.k": KindDefaults(2, FIXED_7, 12.5)}
    assert await ledger.register_defaults(defaults) == ["conf.k"]
    assert await ledger.register_defaults(defaults) == []
    assert await ledger.register_defaults({"conf.k": KindDefaults()}) == ["conf.k"]
    assert await ledger.register_defaults({}) == []


@ON_MARIADB
async def test_the_claim_fills_what_the_producer_left_unset_from_the_kinds_defaults(
    ledger: ShardLedger, enqueue: Enqueue
) -> None:
    await ledger.register_defaults({"conf.k": KindDefaults(2, FIXED_7, 12.5)})
    unset, given, other = enqueue(
        TaskSpec("conf.k"),
        TaskSpec("conf.k", max_attempts=4, retry=[1.0], timeout=3.0),
        TaskSpec("conf.nodefaults"),
    )
    assert (await ledger.show(unset))["max_attempts"] is None  # unset until claimed

    a, b, c = [await claim_one(ledger, i) for i in (unset, given, other)]

    assert (a.max_attempts, a.retry, a.timeout_s) == (2, FIXED_7, 12.5)
    assert (b.max_attempts, b.timeout_s) == (4, 3.0) and b.retry is not None
    assert b.retry["delays"] == [1.0]
    assert (c.max_attempts, c.retry, c.timeout_s) == (5, None, None)  # the built-in defaults
    assert (await ledger.show(unset))["max_attempts"] == 2  # resolved once, in the row


@ON_MARIADB
async def test_an_expired_task_is_not_claimed_it_ends_cancelled_and_expired(
    ledger: ShardLedger, enqueue: Enqueue
) -> None:
    expired, live = enqueue(
        TaskSpec("conf.exp", expires=3600), TaskSpec("conf.exp", expires=3600, tags=["t:1"])
    )
    await ledger.backdate([expired], "expires_at", 1)  # simulate the hour passing

    won = await ledger.claim([(expired, 0), (live, 0)], WORKER, LEASE_S)

    assert [t.id for t in won] == [live]
    shown = await ledger.show(expired)
    assert (shown["status"], shown["expired"], shown["location"]) == (
        "cancelled",
        True,
        "history",
    )
    assert shown["last_error"].startswith("expired: not started by ")
    assert shown["attempt_log"] is None or shown["attempt_log"] == []
    assert await ledger.whereabouts([expired]) == {expired: "cancelled"}
    [record] = [r for r in await ledger.audit() if r["action"] == "expire"]
    assert record["actor"] == "ledgerq"


@ON_MARIADB
async def test_the_direct_claim_ends_an_expired_task_instead_of_running_it(
    ledger: ShardLedger, enqueue: Enqueue
) -> None:
    await ledger.subscribe(WORKER, [Subscription("default")], 600.0, direct=True)
    expired, live = enqueue(TaskSpec("conf.exp", expires=60), TaskSpec("conf.exp", expires=60))
    await ledger.backdate([expired], "expires_at", 1)

    won = await ledger.claim_due(["default"], 10, WORKER, LEASE_S)

    assert [t.id for t in won] == [live]
    assert (await ledger.show(expired))["expired"] is True


@ON_MARIADB
async def test_tags_are_stored_and_every_tag_of_the_filter_must_match(
    ledger: ShardLedger, enqueue: Enqueue
) -> None:
    both, one, none = enqueue(
        TaskSpec("conf.tag", tags=["tenant:7", "batch:3"]),
        TaskSpec("conf.tag", tags=["tenant:7"]),
        TaskSpec("conf.tag"),
    )

    assert (await ledger.show(both))["tags"] == ["tenant:7", "batch:3"]
    tenant = await ledger.list_tasks(TaskFilter(tags=("tenant:7",)))
    assert {r["id"] for r in tenant} == {both, one}
    assert {r["id"]: r["tags"] for r in tenant}[one] == ["tenant:7"]
    pair = await ledger.list_tasks(TaskFilter(tags=("tenant:7", "batch:3")))
    assert [r["id"] for r in pair] == [both]
    assert none in {r["id"] for r in await ledger.list_tasks(TaskFilter(kind="conf.tag"))}

    report = await ledger.act(
        Action.cancel(), TaskFilter(tags=("batch:3",)), actor="conformance", reason="tags"
    )
    assert (report.matched, report.changed) == (1, 1)
    cancelled = await ledger.list_tasks(TaskFilter(statuses=("cancelled",), tags=("batch:3",)))
    assert [(r["id"], r["tags"], r["expired"]) for r in cancelled] == [
        (both, ["tenant:7", "batch:3"], False)
    ]
