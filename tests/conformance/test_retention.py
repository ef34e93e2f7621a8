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
