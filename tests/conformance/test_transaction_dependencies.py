"""Dependencies (``after=``, migration 0020): a waiting task is released in the
transaction of its last dependency's terminal write, exactly once, or cancelled
when a dependency did not succeed; bad ``after`` lists are refused with nothing
written. A transaction lives in one database: every single-database implementation."""

from __future__ import annotations

import asyncio
import threading
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from sqlalchemy import text
from sqlalchemy.orm import Session

from ledgerq import Action, TaskFilter, TaskSpec
from ledgerq.compose.storage import sync_engine
from ledgerq.core.config import Settings
from ledgerq.core.errors import InvalidTaskError
from ledgerq.ledger.after import (
    DependencyError,
    DependencyShardError,
    UnknownDependencyError,
)
from ledgerq.ledger.binds import tx_for
from ledgerq.ledger.model import ClaimedTask, Outcome
from ledgerq.ledger.pg.engines import libpq_url
from ledgerq.ledger.protocol import LedgerWithHarness
from ledgerq.ledger.split.ids import SHARD_SHIFT
from tests.conformance.conftest import ON_MARIADB, ONE_DATABASE, AsyncTransaction, Transaction
from tests.conformance.support import UNKNOWN_ID, claim_one, publish

IMPLEMENTATIONS = ONE_DATABASE


async def _succeed(ledger: LedgerWithHarness, task_id: int, result: str | None = None) -> None:
    task = await claim_one(ledger, task_id)
    assert [f.id for f in await ledger.finish([Outcome.succeeded(task.fence, result)])]


@ON_MARIADB
async def test_a_chain_and_a_join_wait_until_every_dependency_succeeded(
    ledger: LedgerWithHarness, transaction: Transaction, atransaction: AsyncTransaction
) -> None:
    with transaction() as tx:
        first = tx.enqueue(TaskSpec("conf.dep"))
        second = tx.enqueue(TaskSpec("conf.dep", after=[first]))
    async with atransaction() as atx:
        [join] = await atx.enqueue_many([TaskSpec("conf.dep", after=[first, second])])
    assert await ledger.whereabouts([first, second, join]) == {
        first: "pending",
        second: "waiting",
        join: "waiting",
    }

    await _succeed(ledger, first, '{"n": 1}')
    assert await ledger.whereabouts([second, join]) == {second: "pending", join: "waiting"}
    await _succeed(ledger, second, "[2]")
    assert await ledger.whereabouts([join]) == {join: "pending"}

    with transaction() as tx:
        assert tx.dependency_results(join) == {first: {"n": 1}, second: [2]}
    async with atransaction() as atx:
        assert await atx.dependency_results(second) == {first: {"n": 1}}
        assert await atx.dependency_results(first) == {}
    shown = await ledger.find(join)
    assert [(d["id"], d["status"]) for d in shown["dependencies"]] == [
        (first, "succeeded"),
        (second, "succeeded"),
    ]
    assert [d["id"] for d in (await ledger.find(first))["dependents"]] == [second, join]


@ON_MARIADB
async def test_a_failed_dependency_cancels_its_dependents_down_the_chain_unless_always(
    ledger: LedgerWithHarness, transaction: Transaction
) -> None:
    with transaction() as tx:
        root = tx.enqueue(TaskSpec("conf.dep"))
        child = tx.enqueue(TaskSpec("conf.dep", after=[root]))
        grandchild = tx.enqueue(TaskSpec("conf.dep", after=[child]))
        anyway = tx.enqueue(TaskSpec("conf.dep", after=[root], after_policy="always"))
    task = await claim_one(ledger, root)
    await ledger.finish([Outcome.failed(task.fence, "boom", final=True)])

    assert await ledger.whereabouts([root, child, grandchild, anyway]) == {
        root: "dead",
        child: "cancelled",
        grandchild: "cancelled",
        anyway: "pending",
    }
    assert (await ledger.show(child))["last_error"] == f"dependency {root} ended dead"
    assert (await ledger.show(grandchild))["last_error"] == f"dependency {child} ended cancelled"
    # enqueued after a task that already failed: cancelled at once, never runs
    with transaction() as tx:
        late = tx.enqueue(TaskSpec("conf.dep", after=[root]))
    assert await ledger.whereabouts([late]) == {late: "cancelled"}


@ON_MARIADB
async def test_a_dependent_the_ledger_cancels_keeps_its_tags_and_expiry_in_history(
    ledger: LedgerWithHarness, transaction: Transaction
) -> None:
    """The release writes the history row itself (not through the bury fragment):
    every column a task carries arrives, so it is found by its tags like any other."""
    with transaction() as tx:
        root = tx.enqueue(TaskSpec("conf.dep"))
        tagged = tx.enqueue(
            TaskSpec("conf.dep", after=[root], tags=["tenant:7", "etl"], expires=3600)
        )
    with transaction() as tx:
        tx.act(Action.cancel(), TaskFilter(ids=(root,)), actor="ops")
    shown = await ledger.show(tagged)
    assert (shown["status"], shown["tags"]) == ("cancelled", ["tenant:7", "etl"])
    assert shown["expires_at"] is not None and not shown["expired"]
    with transaction() as tx:
        found = tx.list_tasks(TaskFilter(tags=("tenant:7",), statuses=("cancelled",)))
    assert [int(t["id"]) for t in found] == [tagged]


@ON_MARIADB
async def test_bad_after_lists_are_refused_with_nothing_written(
    ledger: LedgerWithHarness, transaction: Transaction
) -> None:
    with transaction() as tx:
        real = tx.enqueue(TaskSpec("conf.dep"))
    cases: list[tuple[list[int], type[DependencyError]]] = [
        ([real, UNKNOWN_ID], UnknownDependencyError),
        ([real, (3 << SHARD_SHIFT) + 1], DependencyShardError),
        ([real + 1], UnknownDependencyError),  # its own id, had it been next: not yet a task
    ]
    for after, error in cases:
        with transaction() as tx:
            with pytest.raises(error):
                tx.enqueue(TaskSpec("conf.dep.bad", after=after))
            with pytest.raises(error):
                tx.enqueue_many([TaskSpec("conf.dep.bad"), TaskSpec("conf.dep.bad", after=after)])
    for options in ({"after": "12"}, {"after": [0]}, {"after": [real], "after_policy": "x"}):
        with pytest.raises(InvalidTaskError):
            TaskSpec("conf.dep.bad", **options)
    with pytest.raises(InvalidTaskError, match="unique"):
        TaskSpec("conf.dep.bad", business_key="k", unique=True, after=[real])
    with transaction() as tx:
        assert tx.list_tasks(TaskFilter(kind="conf.dep.bad")) == []


async def test_the_ledger_refuses_a_task_naming_itself(
    ledger: LedgerWithHarness, transaction: Transaction, databases: list[Settings]
) -> None:
    with transaction() as tx:
        real = tx.enqueue(TaskSpec("conf.dep"))
    with psycopg.connect(libpq_url(databases[0].database_url)) as conn:
        # The ledger's own guard: a task naming itself (SQLSTATE LQD01).
        with pytest.raises(psycopg.Error) as caught:
            conn.execute(
                "SELECT ledgerq_after_add(ARRAY[%s], ARRAY[%s], ARRAY[false])", (real, real)
            )
        assert caught.value.sqlstate == "LQD01"


@ON_MARIADB
async def test_two_dependencies_ending_at_once_release_their_join_exactly_once(
    ledger: LedgerWithHarness, transaction: Transaction, databases: list[Settings]
) -> None:
    """Each ending transaction alone sees the other dependency still live (write
    skew); the row lock makes the second re-read after the first commits."""
    with transaction() as tx:
        a, b = tx.enqueue_many([TaskSpec("conf.dep"), TaskSpec("conf.dep")])
        join = tx.enqueue(TaskSpec("conf.dep", after=[a, b]))
    fences = [(await claim_one(ledger, i)).fence for i in (a, b)]
    other = sync_engine(databases[0], "ledgerq-conformance-tx2", pool_size=1)
    second_done = threading.Event()

    def second() -> None:
        with Session(other) as session, session.begin():
            # waits on the join's lock
            assert tx_for(session, "conformance").succeed([fences[1]]) == {b}
        second_done.set()

    def both() -> None:
        with transaction() as tx:
            assert tx.succeed([fences[0]]) == {a}
            thread = threading.Thread(target=second)
            thread.start()
            assert not second_done.wait(0.3)  # blocked behind this transaction's lock
        thread.join(30)

    await asyncio.to_thread(both)
    other.dispose()
    assert second_done.is_set()
    assert await ledger.whereabouts([a, b, join]) == {
        a: "succeeded",
        b: "succeeded",
        join: "pending",
    }


async def test_release_stuck_makes_a_missed_release_once(
    ledger: LedgerWithHarness, transaction: Transaction, databases: list[Settings]
) -> None:
    with transaction() as tx:
        dep = tx.enqueue(TaskSpec("conf.dep"))
        waiting = tx.enqueue(TaskSpec("conf.dep", after=[dep]))
    assert await ledger.release_stuck(10) == []  # its dependency is live
    url = libpq_url(databases[0].database_url)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("ALTER TABLE ledgerq_history DISABLE TRIGGER ledgerq_history_after")
    try:
        await _succeed(ledger, dep)  # ends with no release: the miss the net is for
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("ALTER TABLE ledgerq_history ENABLE TRIGGER ledgerq_history_after")
    assert await ledger.whereabouts([waiting]) == {waiting: "waiting"}
    assert await ledger.release_stuck(10) == [(waiting, "released")]
    assert await ledger.release_stuck(10) == []
    assert await ledger.whereabouts([waiting]) == {waiting: "pending"}


@ON_MARIADB
async def test_a_waiting_task_keeps_its_place_in_its_ordering_key_without_holding_its_dependency(
    ledger: LedgerWithHarness, transaction: Transaction
) -> None:
    with transaction() as tx:
        first = tx.enqueue(TaskSpec("conf.dep", ordering_key="k"))
        waiting = tx.enqueue(TaskSpec("conf.dep", ordering_key="k", after=[first]))
        behind = tx.enqueue(TaskSpec("conf.dep", ordering_key="k"))
    assert await publish(ledger) == {first}  # not held by the waiting task after it
    await _succeed(ledger, first)
    assert await publish(ledger) == {waiting}  # then the waiting one, in key order
    await _succeed(ledger, waiting)
    assert await publish(ledger) == {behind}


def _stamps(databases: list[Settings], task_id: int) -> list[datetime | None]:
    """The ``ended_at`` of each edge of ``task_id`` (as the dependent), by dependency
    (MySQL's DATETIME is UTC without a zone)."""
    engine = sync_engine(databases[0], "ledgerq-conformance-stamps", pool_size=1)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                text(
                    "SELECT ended_at FROM ledgerq_dependencies WHERE task_id = :id"
                    " ORDER BY depends_on"
                ),
                {"id": task_id},
            ).all()
    finally:
        engine.dispose()
    return [r[0] if r[0] is None or r[0].tzinfo else r[0].replace(tzinfo=UTC) for r in rows]


def _finished(transaction: Transaction, task_id: int) -> datetime | None:
    with transaction() as tx:
        [found] = tx.ended_results([task_id])
    return found.finished_at


@ON_MARIADB
async def test_edges_are_stamped_when_their_dependent_ends_and_pruned_once_it_is_gone(
    ledger: LedgerWithHarness, transaction: Transaction, databases: list[Settings]
) -> None:
    """Migration 0022: the release trigger stamps a dependent's edges with its end;
    retention's prune deletes edges stamped before its cutoff whose dependent is not
    live, oldest first, at most a batch at a time."""
    with transaction() as tx:
        dep, failing = tx.enqueue_many([TaskSpec("conf.dep"), TaskSpec("conf.dep")])
        ran = tx.enqueue(TaskSpec("conf.dep", after=[dep, failing], after_policy="always"))
        stopped = tx.enqueue(TaskSpec("conf.dep", after=[failing]))
    await _succeed(ledger, dep)
    task = await claim_one(ledger, failing)
    await ledger.finish([Outcome.failed(task.fence, "boom", final=True)])
    # the dependencies' ends stamp nothing of theirs (they depend on nothing); the
    # dependent cancelled by the ledger is stamped in that same transaction
    assert _stamps(databases, ran) == [None, None]  # released, still live
    [cancelled_at] = _stamps(databases, stopped)
    assert cancelled_at == _finished(transaction, stopped)
    await _succeed(ledger, ran)
    ended_at = _finished(transaction, ran)
    assert _stamps(databases, ran) == [ended_at, ended_at]

    now = await ledger.database_now()
    assert await ledger.prune_dependencies(now - timedelta(hours=1), 10) == 0  # too recent
    assert await ledger.prune_dependencies(now + timedelta(hours=1), 2) == 2  # a batch
    assert await ledger.prune_dependencies(now + timedelta(hours=1), 2) == 1  # the rest
    assert _stamps(databases, ran) == [] and _stamps(databases, stopped) == []
    assert (await ledger.find(ran))["dependencies"] == []
    assert (await ledger.find(dep))["dependents"] == []


@ON_MARIADB
async def test_a_dependent_retried_from_history_keeps_its_edges_and_is_stamped_again(
    ledger: LedgerWithHarness, transaction: Transaction, databases: list[Settings]
) -> None:
    with transaction() as tx:
        dep = tx.enqueue(TaskSpec("conf.dep"))
        dependent = tx.enqueue(TaskSpec("conf.dep", after=[dep]))
    with transaction() as tx:
        tx.act(Action.cancel(), TaskFilter(ids=(dep,)), actor="ops")
    [first_end] = _stamps(databases, dependent)
    assert first_end is not None  # cancelled with its dependency
    with transaction() as tx:
        assert tx.act(Action.retry(), TaskFilter(ids=(dependent,)), actor="ops").changed == 1

    later = await ledger.database_now() + timedelta(hours=1)
    assert await ledger.prune_dependencies(later, 10) == 0  # live again: kept
    with transaction() as tx:
        assert tx.dependency_results(dependent) == {dep: None}  # what a retry reads
        tx.act(Action.cancel(), TaskFilter(ids=(dependent,)), actor="ops")
    [second_end] = _stamps(databases, dependent)
    assert second_end == _finished(transaction, dependent)
    assert second_end is not None and second_end > first_end
    assert await ledger.prune_dependencies(later, 10) == 1


@ON_MARIADB
async def test_a_dependency_ending_while_its_dependent_is_enqueued_releases_it_either_way(
    ledger: LedgerWithHarness, transaction: Transaction, databases: list[Settings]
) -> None:
    """THE race: the producer's lock on the dependency and the finish's serialise
    them. Producer first: the finish waits for its commit, then sees the new edge.
    Finish first: the producer waits for its commit, then finds the dependency ended."""
    first, second = await _claimed_pair(ledger, transaction)
    other = sync_engine(databases[0], "ledgerq-conformance-tx2", pool_size=1)
    done = threading.Event()
    waiting: list[int] = []

    def finish(fence: tuple[int, int]) -> None:
        with Session(other) as session, session.begin():
            assert tx_for(session, "conformance").succeed([fence]) == {fence[0]}
        done.set()

    def enqueue(after: int) -> None:
        with Session(other) as session, session.begin():
            waiting.append(
                tx_for(session, "conformance").enqueue(TaskSpec("conf.dep", after=[after]))
            )
        done.set()

    def producer_first() -> None:
        with transaction() as tx:
            waiting.append(tx.enqueue(TaskSpec("conf.dep", after=[first.id])))
            thread = threading.Thread(target=finish, args=(first.fence,))
            thread.start()
            assert not done.wait(0.3)  # the finish waits for the producer's commit
        thread.join(30)

    def finish_first() -> None:
        with transaction() as tx:
            assert tx.succeed([second.fence]) == {second.id}
            thread = threading.Thread(target=enqueue, args=(second.id,))
            thread.start()
            assert not done.wait(0.3)  # the producer waits for the finish's commit
        thread.join(30)

    try:
        await asyncio.to_thread(producer_first)
        assert done.is_set()
        done.clear()
        await asyncio.to_thread(finish_first)
        assert done.is_set()
    finally:
        other.dispose()
    assert await ledger.whereabouts([first.id, second.id, *waiting]) == {
        first.id: "succeeded",
        second.id: "succeeded",
        waiting[0]: "pending",
        waiting[1]: "pending",
    }


async def _claimed_pair(
    ledger: LedgerWithHarness, transaction: Transaction
) -> tuple[ClaimedTask, ClaimedTask]:
    with transaction() as tx:
        a, b = tx.enqueue_many([TaskSpec("conf.dep"), TaskSpec("conf.dep")])
    return await claim_one(ledger, a), await claim_one(ledger, b)


@ON_MARIADB
async def test_release_stuck_makes_the_release_a_stale_snapshot_missed(
    ledger: LedgerWithHarness, transaction: Transaction, databases: list[Settings]
) -> None:
    """A dependency ended in a REPEATABLE READ transaction whose snapshot predates
    its dependent's commit: the end cannot see the edge (on both servers); the
    reconciler's safety net makes the release, once."""
    dep, _ = await _claimed_pair(ledger, transaction)
    stale = sync_engine(databases[0], "ledgerq-conformance-stale", pool_size=1)
    repeatable = stale.execution_options(isolation_level="REPEATABLE READ")
    try:
        with Session(repeatable) as session, session.begin():
            old = tx_for(session, "conformance")
            old.list_tasks(TaskFilter(kind="conf.dep"))  # the snapshot is taken here
            with transaction() as tx:
                waiting = tx.enqueue(TaskSpec("conf.dep", after=[dep.id]))
            assert old.succeed([dep.fence]) == {dep.id}
    finally:
        stale.dispose()
    assert await ledger.whereabouts([waiting]) == {waiting: "waiting"}
    assert await ledger.release_stuck(10) == [(waiting, "released")]
    assert await ledger.release_stuck(10) == []
    assert await ledger.whereabouts([waiting]) == {waiting: "pending"}


@ON_MARIADB
async def test_a_cascading_cancel_follows_dependents_even_those_that_would_run_anyway(
    ledger: LedgerWithHarness, transaction: Transaction
) -> None:
    with transaction() as tx:
        root, other = tx.enqueue_many([TaskSpec("conf.dep"), TaskSpec("conf.dep")])
        plain = tx.enqueue(TaskSpec("conf.dep", after=[root]))
        anyway = tx.enqueue(TaskSpec("conf.dep", after=[root], after_policy="always"))
        anyway_other = tx.enqueue(TaskSpec("conf.dep", after=[other], after_policy="always"))
    with transaction() as tx:
        cascaded = tx.act(Action.cancel(cascade=True), TaskFilter(ids=(root,)), actor="ops")
        tx.act(Action.cancel(), TaskFilter(ids=(other,)), actor="ops")
    assert (cascaded.changed, cascaded.cascaded) == (1, 1)
    assert await ledger.whereabouts([root, plain, anyway, other, anyway_other]) == {
        root: "cancelled",
        plain: "cancelled",  # by the ledger: its dependency was cancelled
        anyway: "cancelled",  # by the cascade (always would have run it)
        other: "cancelled",
        anyway_other: "pending",  # no cascade: always runs it
    }


@ON_MARIADB
async def test_a_dependency_that_expires_cancels_its_dependents(
    ledger: LedgerWithHarness, transaction: Transaction
) -> None:
    with transaction() as tx:
        dep = tx.enqueue(TaskSpec("conf.dep", expires=60))
        waiting = tx.enqueue(TaskSpec("conf.dep", after=[dep]))
        always = tx.enqueue(TaskSpec("conf.dep", after=[dep], after_policy="always"))
    await ledger.backdate([dep], "expires_at", 1)

    assert await ledger.expire_due(10) == [dep]

    assert await ledger.whereabouts([dep, waiting, always]) == {
        dep: "cancelled",
        waiting: "cancelled",  # in the expiry's own transaction, not by the safety net
        always: "pending",
    }
    assert await ledger.release_stuck(10) == []
