"""Retention: the database's clock, history's day partitions and the purge of
finished tasks, on every single-database implementation and on MySQL / MariaDB."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

from ledgerq.ledger.model import HistoryDay, Outcome
from ledgerq.ledger.protocol import LedgerWithHarness
from tests.conformance.conftest import MARIADB, ONE_DATABASE
from tests.conformance.support import LEASE_S, WORKER, Enqueue

IMPLEMENTATIONS = (*ONE_DATABASE, MARIADB)

#: A day no other test partitions (dropped before and after).
FAR_DAY = date(2099, 1, 1)


async def test_database_now_is_the_databases_clock(ledger: LedgerWithHarness) -> None:
    now = await ledger.database_now()
    assert now.tzinfo is not None
    assert abs(now - datetime.now(UTC)) < timedelta(seconds=60)


async def test_a_day_partition_is_added_once_listed_and_dropped_once(
    ledger: LedgerWithHarness,
) -> None:
    await ledger.drop_history_day("succeeded", FAR_DAY)
    try:
        assert await ledger.add_history_day("succeeded", FAR_DAY) == 0  # no rows moved
        assert await ledger.add_history_day("succeeded", FAR_DAY) is None  # it exists
        assert HistoryDay("succeeded", FAR_DAY) in await ledger.history_days()
        assert await ledger.drop_history_day("succeeded", FAR_DAY) == 0
        assert await ledger.drop_history_day("succeeded", FAR_DAY) is None
        assert HistoryDay("succeeded", FAR_DAY) not in await ledger.history_days()
    finally:
        await ledger.drop_history_day("succeeded", FAR_DAY)


async def test_purge_deletes_finished_tasks_before_the_cutoff_and_nothing_live(
    ledger: LedgerWithHarness, enqueue: Enqueue
) -> None:
    done, dead, live = enqueue("conf.r", "conf.r", "conf.r")
    won = {t.id: t for t in await ledger.claim([(done, 0), (dead, 0)], WORKER, LEASE_S)}
    await ledger.finish(
        [Outcome.succeeded(won[done].fence), Outcome.failed(won[dead].fence, "x", final=True)]
    )
    now = await ledger.database_now()
    later, earlier = now + timedelta(hours=1), now - timedelta(hours=1)

    assert await ledger.count_purgeable({"succeeded": later, "dead": earlier}) == {
        "succeeded": 1,
        "dead": 0,
    }
    assert await ledger.purge_history_batch("dead", earlier, 10) == 0
    assert await ledger.purge_history_batch("succeeded", later, 10) == 1

    assert await ledger.whereabouts([done, dead, live]) == {dead: "dead", live: "pending"}
    assert await ledger.count_purgeable({"succeeded": later}) == {"succeeded": 0}


async def test_a_day_created_takes_its_rows_and_dropping_it_removes_them_alone(
    ledger: LedgerWithHarness, enqueue: Enqueue
) -> None:
    today = (await ledger.database_now()).astimezone(UTC).date()
    await ledger.drop_history_day("succeeded", today)
    try:
        await ledger.seed_history(30)  # finished now: waiting outside a day of its own
        [dead] = enqueue("conf.r")
        [won] = await ledger.claim([(dead, 0)], WORKER, LEASE_S)
        await ledger.finish([Outcome.failed(won.fence, "x", final=True)])

        assert await ledger.add_history_day("succeeded", today) == 30
        assert await ledger.drop_history_day("succeeded", today) == 30
        later = await ledger.database_now() + timedelta(hours=1)
        assert await ledger.count_purgeable({"succeeded": later, "dead": later}) == {
            "succeeded": 0,
            "dead": 1,
        }
        assert await ledger.whereabouts([dead]) == {dead: "dead"}
    finally:
        await ledger.add_history_day("succeeded", today)


async def test_a_purge_batch_deletes_at_most_its_limit(ledger: LedgerWithHarness) -> None:
    await ledger.seed_history(25)
    later = await ledger.database_now() + timedelta(hours=1)
    batches = [await ledger.purge_history_batch("succeeded", later, 10) for _ in range(4)]
    assert batches == [10, 10, 5, 0]


async def test_dependency_edges_prune_to_a_count(ledger: LedgerWithHarness) -> None:
    # On MySQL / MariaDB there are none (dependencies are refused there): 0.
    later = await ledger.database_now() + timedelta(hours=1)
    assert await ledger.prune_dependencies(later, 10) == 0


async def test_a_varied_history_seeded_in_chunks_is_counted_by_status(
    ledger: LedgerWithHarness,
) -> None:
    await ledger.seed_varied_history(100, chunk=40)  # 90% succeeded, 7% dead, 3% cancelled
    later = await ledger.database_now() + timedelta(hours=1)
    everything = {"succeeded": later, "dead": later, "cancelled": later}
    assert await ledger.count_purgeable(everything) == {"succeeded": 90, "dead": 7, "cancelled": 3}
    await ledger.seed_varied_history(10)  # after the first: ids never meet
    assert sum((await ledger.count_purgeable(everything)).values()) == 110
