"""Fan-out (``parent_id``, ``@task(on_children_done=...)``, migration 0010; m0007
on MySQL): a family completes once, when its parent and every child are
terminal, in the transaction that ends the last of them, and enqueues one
callback with the children's counts; a child of an unknown parent or of a
completed family is refused with nothing written. A transaction lives in one
database: every single-database implementation, and MariaDB."""

from __future__ import annotations

import asyncio
import threading

import pytest
from sqlalchemy.orm import Session

from ledgerq import Action, FamilyCompletedError, TaskFilter, TaskSpec, UnknownParentError
from ledgerq.compose.storage import sync_engine
from ledgerq.core.config import Settings
from ledgerq.ledger.binds import tx_for
from ledgerq.ledger.model import Outcome
from ledgerq.ledger.protocol import LedgerWithHarness
from tests.conformance.conftest import MARIADB, ONE_DATABASE, Transaction
from tests.conformance.support import UNKNOWN_ID, claim_one

IMPLEMENTATIONS = (*ONE_DATABASE, MARIADB)


async def _family(ledger: LedgerWithHarness, transaction: Transaction, children: int) -> list[int]:
    """A parent of kind conf.parent (callback conf.done) that ran and succeeded,
    and its ``children`` (pending): the parent first."""
    assert await ledger.register_children_done({"conf.parent": "conf.done"}) in (
        [],
        ["conf.parent"],
    )
    with transaction() as tx:
        parent = tx.enqueue(TaskSpec("conf.parent"))
        kids = tx.enqueue_many([TaskSpec("conf.kid", parent_id=parent)] * children)
    task = await claim_one(ledger, parent)
    await ledger.finish([Outcome.succeeded(task.fence)])
    return [parent, *kids]


async def test_a_family_completes_once_and_its_callback_counts_its_children(
    ledger: LedgerWithHarness, transaction: Transaction
) -> None:
    assert await ledger.register_children_done({"conf.parent": "conf.done"}) == ["conf.parent"]
    assert await ledger.register_children_done({"conf.parent": "conf.done"}) == []
    parent, ok, failing, stopped = await _family(ledger, transaction, 3)
    task = await claim_one(ledger, ok)
    await ledger.finish([Outcome.succeeded(task.fence)])
    task = await claim_one(ledger, failing)
    await ledger.finish([Outcome.failed(task.fence, "boom", final=True)])
    children = (await ledger.find(parent))["children"]
    assert (children["total"], children["completed_at"]) == (3, None)  # one still live

    with transaction() as tx:  # the last child ends through an operator's cancel
        tx.act(Action.cancel(), TaskFilter(ids=(stopped,)), actor="ops")
    children = (await ledger.find(parent))["children"]
    assert children["completed_at"] is not None
    callback = await ledger.show(children["callback_id"])
    assert (callback["kind"], callback["status"], callback["payload"]) == (
        "conf.done",
        "pending",
        {"parent_id": parent, "succeeded": 1, "dead": 1, "cancelled": 1},
    )
    with transaction() as tx:
        assert [r.id for r in tx.child_results(parent)] == [ok, failing, stopped]

    for spec, error in (
        (TaskSpec("conf.kid.bad", parent_id=parent), FamilyCompletedError),
        (TaskSpec("conf.kid.bad", parent_id=UNKNOWN_ID), UnknownParentError),
    ):
        with transaction() as tx, pytest.raises(error):
            tx.enqueue_many([TaskSpec("conf.kid.bad"), spec])
    with transaction() as tx:
        assert tx.list_tasks(TaskFilter(kind="conf.kid.bad")) == []


async def test_the_last_two_children_ending_at_once_make_one_callback(
    ledger: LedgerWithHarness, transaction: Transaction, databases: list[Settings]
) -> None:
    """Each ending transaction alone sees the other child still live (write skew);
    the family row's lock makes the second re-read after the first commits."""
    parent, a, b = await _family(ledger, transaction, 2)
    fences = [(await claim_one(ledger, i)).fence for i in (a, b)]
    other = sync_engine(databases[0], "ledgerq-conformance-tx2", pool_size=1)
    second_done = threading.Event()

    def second() -> None:
        with Session(other) as session, session.begin():
            assert tx_for(session, "conformance").succeed([fences[1]]) == {b}
        second_done.set()

    def both() -> None:
        with transaction() as tx:
            assert tx.succeed([fences[0]]) == {a}
            thread = threading.Thread(target=second)
            thread.start()
            assert not second_done.wait(0.3)  # waits on the family's row lock
        thread.join(30)

    try:
        await asyncio.to_thread(both)
    finally:
        other.dispose()
    assert second_done.is_set()
    children = (await ledger.find(parent))["children"]
    callback = await ledger.show(children["callback_id"])
    assert callback["payload"] == {"parent_id": parent, "succeeded": 2, "dead": 0, "cancelled": 0}
    with transaction() as tx:
        done = tx.list_tasks(TaskFilter(kind="conf.done"))
    assert [int(t["id"]) for t in done] == [children["callback_id"]]
