"""The operator's side: ``list_tasks``, ``find``, ``audit``, ``act`` and
``release_key``, on every implementation (with shards, across them)."""

from __future__ import annotations

import pytest

from ledgerq import Action, TaskFilter, TaskSpec
from ledgerq.core.errors import TaskNotFoundError
from ledgerq.ledger.model import Outcome
from ledgerq.ledger.split.ledger import ShardLedger
from tests.conformance.conftest import ON_MARIADB
from tests.conformance.support import LEASE_S, WORKER, Enqueue, claim_one


@ON_MARIADB
async def test_list_tasks_matches_live_and_finished_newest_first(
    ledger: ShardLedger, enqueue: Enqueue
) -> None:
    ids = enqueue("conf.list", "conf.list", "conf.list", "conf.other")
    task = await claim_one(ledger, ids[0])
    await ledger.finish([Outcome.succeeded(task.fence)])

    listed = await ledger.list_tasks(TaskFilter(kind="conf.list"))

    assert [r["id"] for r in listed] == sorted(ids[:3], reverse=True)
    assert {r["id"]: r["status"] for r in listed}[ids[0]] == "succeeded"
    pending = await ledger.list_tasks(TaskFilter(statuses=("pending",), kind="conf.list"))
    assert {r["id"] for r in pending} == set(ids[1:3])
    assert len(await ledger.list_tasks(TaskFilter(limit=2))) == 2


@ON_MARIADB
async def test_find_by_id_or_business_key_with_the_audit_trail(
    ledger: ShardLedger, enqueue: Enqueue
) -> None:
    first, second = enqueue(
        TaskSpec("conf.find", business_key="order-9"), TaskSpec("conf.find", {"x": 1})
    )

    by_id = await ledger.find(second)
    assert (by_id["id"], by_id["payload"], by_id["audit"]) == (second, {"x": 1}, [])
    assert by_id["attempt_log"] == []
    assert (await ledger.find(business_key="order-9"))["id"] == first
    with pytest.raises(TaskNotFoundError):
        await ledger.find(10**12)
    with pytest.raises(TaskNotFoundError):
        await ledger.find(business_key="no-such-order")


@ON_MARIADB
async def test_act_cancels_what_it_matches_audits_it_and_skips_what_moved_on(
    ledger: ShardLedger, enqueue: Enqueue
) -> None:
    queued, also, done = enqueue("conf.act", "conf.act", "conf.act")
    task = await claim_one(ledger, done)
    await ledger.finish([Outcome.succeeded(task.fence)])

    dry = await ledger.act(Action.cancel(), TaskFilter(kind="conf.act"), actor="ops", dry_run=True)
    assert (dry.matched, dry.changed) == (3, 2) and await ledger.audit() == []
    assert await ledger.whereabouts([queued]) == {queued: "pending"}  # nothing changed
    seen: list[int] = []
    report = await ledger.act(
        Action.cancel(),
        TaskFilter(ids=(queued, also, done)),
        actor="ops",
        reason="conformance",
        batch_size=1,
        progress=lambda r: seen.append(r.changed),
    )

    assert (report.matched, report.changed, report.skipped) == (3, 2, 1)
    assert seen  # progress after each batch
    assert await ledger.whereabouts([queued, also, done]) == {
        queued: "cancelled",
        also: "cancelled",
        done: "succeeded",
    }
    records = await ledger.audit()
    assert records and all(r["action"] == "cancel" for r in records)
    assert records[0]["actor"] == "ops" and records[0]["reason"] == "conformance"
    assert [a["action"] for a in (await ledger.find(queued))["audit"]] == ["cancel"]
    oldest = min(int(r["id"]) for r in records)
    assert await ledger.audit(limit=10, before=oldest) == []


async def test_release_key_frees_an_ordering_key_held_by_a_dead_task(
    ledger: ShardLedger, enqueue: Enqueue
) -> None:
    await ledger.register_ordering({"conf.block": "block"})
    held, waiting = enqueue(
        TaskSpec("conf.block", ordering_key="acct-1", max_attempts=1),
        TaskSpec("conf.after", ordering_key="acct-1"),
    )
    [task] = await ledger.claim([(held, 0)], WORKER, LEASE_S)
    await ledger.finish([Outcome.failed(task.fence, "poison", final=True)])

    dry = await ledger.release_key("acct-1", actor="ops", dry_run=True)
    assert dry.dry_run and dry.released == [held] and dry.audit_id is None
    released = await ledger.release_key("acct-1", actor="ops", reason="refunded")

    assert released.released == [held] and released.audit_id is not None
    assert await ledger.whereabouts([held, waiting]) == {held: "dead", waiting: "pending"}
    with pytest.raises(TaskNotFoundError):
        await ledger.release_key("no-such-key", actor="ops")
