"""The operator's side: ``list_tasks``, ``find``, ``audit``, ``act`` and
``release_key``, on every implementation (with shards, across them)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import groupby

import pytest

from ledgerq import Action, TaskFilter, TaskSpec
from ledgerq.core.errors import TaskNotFoundError
from ledgerq.ledger.model import Outcome
from ledgerq.ledger.split.ledger import ShardLedger
from tests.conformance.conftest import ON_MARIADB, AsyncTransaction, Transaction
from tests.conformance.support import LEASE_S, WORKER, Enqueue, claim_one, when


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
    [newer] = enqueue(TaskSpec("conf.find", business_key="order-9"))
    assert (await ledger.find(business_key="order-9"))["id"] == newer  # the newest
    with pytest.raises(TaskNotFoundError):
        await ledger.find(10**12)
    with pytest.raises(TaskNotFoundError):
        await ledger.find(business_key="no-such-order")
    with pytest.raises(TaskNotFoundError, match="name a task id or a business key"):
        await ledger.find()


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


@ON_MARIADB
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


NOT_STARTED = "running: only a task that has not started can be rescheduled"


@ON_MARIADB
async def test_each_action_changes_only_the_statuses_it_is_for(
    ledger: ShardLedger, enqueue: Enqueue
) -> None:
    pending, later, running, dead, cancelled = enqueue(
        TaskSpec("conf.acts"),
        TaskSpec("conf.acts", delay=3600),
        TaskSpec("conf.acts"),
        TaskSpec("conf.acts", max_attempts=1),
        TaskSpec("conf.acts"),
    )
    task = await claim_one(ledger, running)
    failed = await claim_one(ledger, dead)
    await ledger.finish([Outcome.failed(failed.fence, "boom", final=True)])
    await ledger.act(Action.cancel(), TaskFilter(ids=(cancelled,)), actor="ops")
    every = TaskFilter(kind="conf.acts")

    retried = await ledger.act(Action.retry(), every, actor="ops", batch_size=2)

    assert (retried.matched, retried.changed, retried.skipped) == (5, 3, 2)
    assert await ledger.whereabouts([pending, later, running, dead, cancelled]) == {
        pending: "pending",
        later: "pending",
        running: "running",
        dead: "pending",
        cancelled: "pending",
    }
    revived = await ledger.show(dead)
    assert (revived["location"], revived["attempts"], revived["epoch"]) == ("live", 0, 2)
    assert revived["last_error"] == "boom" and len(revived["attempt_log"]) == 1
    assert when((await ledger.show(later))["run_at"]) < when(revived["created_at"]) + timedelta(
        minutes=5
    )  # due now

    both = TaskFilter(ids=(pending, running))
    assert (await ledger.act(Action.set_priority(7), both, actor="ops")).changed == 2
    assert (await ledger.act(Action.set_attempts(9), both, actor="ops")).changed == 2
    assert [(await ledger.show(i))["priority"] for i in (pending, running)] == [7, 7]
    assert [(await ledger.show(i))["max_attempts"] for i in (pending, running)] == [9, 9]
    an_hour = datetime.now(UTC) + timedelta(hours=1)
    moved = await ledger.act(Action.reschedule(an_hour), both, actor="ops")
    assert (moved.changed, moved.reasons) == (1, {NOT_STARTED: 1})
    shown = await ledger.show(pending)
    assert abs(when(shown["run_at"]) - an_hour) < timedelta(seconds=1) and shown["epoch"] == 1

    stop = await ledger.act(Action.cancel(), TaskFilter(ids=(running,)), actor="ops")
    assert (stop.changed, stop.asked_to_stop) == (1, 1)
    asked = await ledger.show(running)
    assert asked["status"] == "running" and asked["cancel_requested_at"] is not None
    assert (await ledger.heartbeat([task.fence], LEASE_S)).cancelling == {running}
    # (newest first; with shards, one record per shard an action met)
    actions = [action for action, _ in groupby(r["action"] for r in await ledger.audit())]
    assert actions == ["cancel", "reschedule", "set-attempts", "set-priority", "retry", "cancel"]
    outcomes = {a["action"]: a["outcome"] for a in (await ledger.find(running))["audit"]}
    assert outcomes["retry"].startswith("running") and outcomes["cancel"] == "changed"


@ON_MARIADB
async def test_act_and_list_tasks_in_the_callers_transaction(
    ledger: ShardLedger, transaction: Transaction, atransaction: AsyncTransaction
) -> None:
    with transaction() as tx:
        first, second = tx.enqueue_many([TaskSpec("conf.tx"), TaskSpec("conf.tx")])

    with transaction(commit=False) as tx:
        report = tx.act(Action.cancel(), TaskFilter(ids=(first,)), actor="ops")
        assert report.changed == 1 and report.audit_id is not None
        assert [r["status"] for r in tx.list_tasks(TaskFilter(ids=(first,)))] == ["cancelled"]
    assert await ledger.whereabouts([first]) == {first: "pending"}  # rolled back
    assert await ledger.audit() == []  # and its audit record with it
    async with atransaction() as atx:
        await atx.act(Action.cancel(), TaskFilter(ids=(second,)), actor="ops", reason="tx")
        listed = await atx.list_tasks(TaskFilter(kind="conf.tx"))
        assert {r["id"]: r["status"] for r in listed} == {first: "pending", second: "cancelled"}
    assert await ledger.whereabouts([second]) == {second: "cancelled"}
    [record] = await ledger.audit()
    assert (record["action"], record["reason"], record["changed"]) == ("cancel", "tx", 1)
