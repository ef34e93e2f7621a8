"""What result() waiters and ``ctx.children`` read (the seam's ``ended_results`` and
``child_results``, sync and async), and the wake-up they are sent: every statement
that ends tasks sends one ``NOTIFY ledgerq_ended`` with the ended ids, on commit
only. Every single-database implementation (a transaction lives in one)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from ledgerq import Action, TaskFilter, TaskSpec
from ledgerq.core.config import Settings
from ledgerq.ledger.model import Outcome
from ledgerq.ledger.pg.engines import libpq_url
from ledgerq.ledger.protocol import LedgerWithHarness
from tests.conformance.conftest import ON_MARIADB, ONE_DATABASE, AsyncTransaction, Transaction
from tests.conformance.support import UNKNOWN_ID, claim_one

IMPLEMENTATIONS = ONE_DATABASE


@pytest.fixture
def listener(databases: list[Settings]) -> Iterator[psycopg.Connection[Any]]:
    """A connection LISTENing on ``ledgerq_ended`` in the implementation's database."""
    with psycopg.connect(libpq_url(databases[0].database_url), autocommit=True) as conn:
        conn.execute("LISTEN ledgerq_ended")
        yield conn


def told(conn: psycopg.Connection[Any]) -> list[set[int]]:
    """The id sets notified so far (each notification's payload)."""
    conn.execute("SELECT 1")  # the notifications of the commits before this arrive with it
    return [{int(i) for i in n.payload.split(",")} for n in conn.notifies(timeout=0)]


@ON_MARIADB
async def test_ended_results_reads_live_and_ended_tasks_in_one_snapshot(
    ledger: LedgerWithHarness, transaction: Transaction, atransaction: AsyncTransaction
) -> None:
    with transaction() as tx:
        live, done, failed = tx.enqueue_many([TaskSpec("conf.res", max_attempts=1)] * 3)
    ran, broke = await claim_one(ledger, done), await claim_one(ledger, failed)
    await ledger.finish(
        [Outcome.succeeded(ran.fence, '{"total": 3}'), Outcome.failed(broke.fence, "boom")]
    )

    with transaction() as tx:
        found = {r.id: r for r in tx.ended_results([live, done, failed, UNKNOWN_ID])}
    async with atransaction() as atx:
        afound = {r.id: r for r in await atx.ended_results([done, UNKNOWN_ID])}

    assert set(found) == {live, done, failed} and set(afound) == {done}
    assert (found[live].status, found[live].done, found[live].finished_at) == (
        "pending",
        False,
        None,
    )
    assert (found[done].status, found[done].value, found[done].error) == (
        "succeeded",
        {"total": 3},
        None,
    )
    assert found[done].succeeded and found[done].finished_at is not None
    assert (found[failed].status, found[failed].error, found[failed].attempts) == (
        "dead",
        "boom",
        1,
    )
    assert afound[done] == found[done]


@ON_MARIADB
async def test_child_results_pages_a_family_in_id_order(
    ledger: LedgerWithHarness, transaction: Transaction, atransaction: AsyncTransaction
) -> None:
    with transaction() as tx:
        [parent] = tx.enqueue_many([TaskSpec("conf.res")])
    with transaction() as tx:
        children = tx.enqueue_many([TaskSpec("conf.res", parent_id=parent)] * 5)
    for child in children[:3]:
        task = await claim_one(ledger, child)
        await ledger.finish([Outcome.succeeded(task.fence, str(child))])

    pages: list[list[int]] = []
    after = 0
    with transaction() as tx:
        while page := tx.child_results(parent, after=after, limit=2):
            pages.append([r.id for r in page])
            after = page[-1].id
    async with atransaction() as atx:
        everything = await atx.child_results(parent, limit=100)

    assert pages == [children[0:2], children[2:4], children[4:5]]
    assert [(r.status, r.value) for r in everything] == [
        *[("succeeded", c) for c in children[:3]],
        ("pending", None),
        ("pending", None),
    ]
    with transaction() as tx, pytest.raises(ValueError, match="limit"):
        tx.child_results(parent, limit=0)


async def test_each_ending_statement_notifies_its_ids_once_on_commit_while_someone_waits(
    ledger: LedgerWithHarness,
    transaction: Transaction,
    atransaction: AsyncTransaction,
    listener: psycopg.Connection[Any],
) -> None:
    with transaction() as tx:
        quiet, a, b, c, kept, late = tx.enqueue_many([TaskSpec("conf.res", max_attempts=2)] * 6)
    tquiet, ta, tb, tkept, tlate = [await claim_one(ledger, i) for i in (quiet, a, b, kept, late)]
    assert told(listener) == []  # enqueues and claims do not

    # nobody waits: ends are not told (the commit pays no notification)
    await ledger.finish([Outcome.succeeded(tquiet.fence)])
    assert told(listener) == []
    with transaction(commit=False) as tx:
        tx.announce_waiting("conformance-registry", 60.0)  # rolled back: still nobody
    await ledger.finish([Outcome.succeeded(tlate.fence, "1")])
    assert told(listener) == []
    with transaction() as tx:
        tx.announce_waiting("conformance-registry", 60.0)
        tx.announce_waiting("conformance-registry", 60.0)  # renewed: one row

    # the worker's finish: one notification for the ended, none for a retry
    await ledger.finish(
        [
            Outcome.succeeded(ta.fence),
            Outcome.failed(tb.fence, "x", final=True),
            Outcome.failed(tkept.fence, "again"),
        ]
    )
    assert told(listener) == [{a, b}]

    # an operator's cancel, rolled back, then committed
    with transaction(commit=False) as tx:
        tx.act(Action.cancel(), TaskFilter(ids=(c,)), actor="ops")
    assert told(listener) == []
    with transaction() as tx:
        tx.act(Action.cancel(), TaskFilter(ids=(c,)), actor="ops")
    assert told(listener) == [{c}]

    async with atransaction() as atx:
        await atx.withdraw_waiting("conformance-registry")
    with transaction() as tx:
        [again] = tx.enqueue_many([TaskSpec("conf.res")])
        tx.act(Action.cancel(), TaskFilter(ids=(again,)), actor="ops")
    assert told(listener) == []


async def test_the_ledgers_own_cancels_of_dependents_are_told_too(
    ledger: LedgerWithHarness,
    transaction: Transaction,
    listener: psycopg.Connection[Any],
) -> None:
    """A dependency cancelled: its dependents, and theirs, end ``cancelled`` in the
    same transaction (the release trigger, migration 0020), each told to waiters like
    any end (0022), so a waiter on a dependent returns without waiting for a poll."""
    with transaction() as tx:
        root = tx.enqueue(TaskSpec("conf.res"))
        child = tx.enqueue(TaskSpec("conf.res", after=[root]))
        grandchild = tx.enqueue(TaskSpec("conf.res", after=[child]))
        tx.announce_waiting("conformance-registry", 60.0)
    with transaction() as tx:
        tx.act(Action.cancel(), TaskFilter(ids=(root,)), actor="ops")
    assert sorted(told(listener), key=min) == [{root}, {child}, {grandchild}]
    assert await ledger.whereabouts([child, grandchild]) == {
        child: "cancelled",
        grandchild: "cancelled",
    }

    with transaction() as tx:  # nobody waits: the ledger's cancels are not told either
        tx.withdraw_waiting("conformance-registry")
        other = tx.enqueue(TaskSpec("conf.res"))
        tx.enqueue(TaskSpec("conf.res", after=[other]))
    with transaction() as tx:
        tx.act(Action.cancel(), TaskFilter(ids=(other,)), actor="ops")
    assert told(listener) == []


async def test_an_announcement_that_ran_out_no_longer_counts(
    ledger: LedgerWithHarness,
    transaction: Transaction,
    atransaction: AsyncTransaction,
    listener: psycopg.Connection[Any],
) -> None:
    async with atransaction() as atx:
        await atx.announce_waiting("conformance-gone", 0.0)  # a crashed process's
    with transaction() as tx:
        [task] = tx.enqueue_many([TaskSpec("conf.res")])
        tx.act(Action.cancel(), TaskFilter(ids=(task,)), actor="ops")
    assert told(listener) == []


async def test_a_large_statement_notifies_once_with_an_empty_payload(
    ledger: LedgerWithHarness,
    transaction: Transaction,
    listener: psycopg.Connection[Any],
) -> None:
    with transaction() as tx:
        ids = tx.enqueue_many([TaskSpec("conf.res")] * 450)
        tx.announce_waiting("conformance-registry", 60.0)
    with transaction() as tx:
        tx.act(Action.cancel(), TaskFilter(ids=tuple(ids)), actor="ops")
    listener.execute("SELECT 1")
    payloads = [n.payload for n in listener.notifies(timeout=0)]
    assert payloads == [""]  # over 400 ids: "anything may have ended"
