"""The testing protocol (``backdate``, ``truncate``, the seeds, the drain measures)
and the seam's housekeeping (``ping``, ``autovacuum_off``, ``count_expired``,
``dispose``), on every implementation."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from ledgerq.ledger.model import Outcome
from ledgerq.ledger.split.ledger import ShardLedger
from tests.conformance.conftest import ON_MARIADB
from tests.conformance.support import LEASE_S, WORKER, Enqueue, publish, when


async def test_backdate_moves_only_the_named_timestamp_of_the_named_tasks(
    ledger: ShardLedger, enqueue: Enqueue
) -> None:
    moved, kept = enqueue("conf.t", "conf.t")
    before = datetime.now(UTC)

    assert await ledger.backdate([moved], "run_at", 600) == 1
    assert when((await ledger.show(moved))["run_at"]) < before - timedelta(seconds=590)
    assert when((await ledger.show(kept))["run_at"]) > before - timedelta(seconds=60)

    await publish(ledger)
    await ledger.claim([(moved, 0)], WORKER, LEASE_S)
    assert await ledger.backdate([moved, kept], "published_at", 60) == 2
    assert await ledger.backdate([moved], "lease_until", 5) == 1
    assert await ledger.count_expired() == 1
    assert await ledger.backdate([moved], "lease_until", -600) == 1  # the future
    assert await ledger.count_expired() == 0
    assert await ledger.backdate([], "run_at", 1) == 0


async def test_the_drain_measures_count_only_real_finished_tasks(
    ledger: ShardLedger, enqueue: Enqueue
) -> None:
    ids = enqueue("conf.m", "conf.m", "conf.m")
    await publish(ledger)
    won = await ledger.claim([(i, 0) for i in ids], WORKER, LEASE_S)
    await ledger.finish([Outcome.succeeded(t.fence) for t in won])
    await ledger.seed_history(5)  # synthetic: never counted

    assert await ledger.count_finished() == 3
    count, span = await ledger.drain_span()
    assert count == 3 and span is not None and span >= 0
    timings = {t.id: t for t in await ledger.timings([*ids, 10**12])}
    assert set(timings) == set(ids)
    for t in timings.values():
        assert t.published is not None and t.started is not None and t.finished is not None
        assert t.created <= t.started <= t.finished

    await ledger.clear_finished()
    assert await ledger.count_finished() == 0
    assert (await ledger.stats())["total"] == 5  # the synthetic rows stay


@ON_MARIADB
async def test_the_drain_measures_tasks_claimed_straight_from_the_ledger(
    ledger: ShardLedger, enqueue: Enqueue
) -> None:
    ids = enqueue("conf.m", "conf.m", "conf.m")
    won = await ledger.claim_due(["default"], 10, WORKER, LEASE_S)
    assert {t.id for t in won} == set(ids)
    await ledger.finish([Outcome.succeeded(t.fence) for t in won])
    await ledger.seed_history(5)  # synthetic: never counted

    assert await ledger.count_finished() == 3
    count, span = await ledger.drain_span()  # from the first start: never published
    assert count == 3 and span is not None and span >= 0
    timings = {t.id: t for t in await ledger.timings([*ids, 10**12])}
    assert set(timings) == set(ids)
    for t in timings.values():
        assert t.published is None and t.started is not None and t.finished is not None
        assert t.created <= t.started <= t.finished
    assert await ledger.timings([]) == []

    await ledger.clear_finished()
    assert await ledger.count_finished() == 0
    assert (await ledger.stats())["total"] == 5  # the synthetic rows stay


async def test_seed_varied_history_adds_rows_of_mixed_status_and_truncate_empties(
    ledger: ShardLedger, enqueue: Enqueue
) -> None:
    [live] = enqueue("conf.live")
    await ledger.seed_varied_history(100, chunk=40)

    stats = await ledger.stats()
    assert stats["total"] == 101
    assert {"succeeded", "dead", "cancelled", "pending"} <= set(stats["by_status"])

    await ledger.truncate()
    assert (await ledger.stats())["total"] == 0
    assert await ledger.whereabouts([live]) == {}


@ON_MARIADB
async def test_ping_and_the_autovacuum_check_answer(ledger: ShardLedger) -> None:
    assert await ledger.ping() is True
    reasons = await ledger.autovacuum_off()  # (empty where autovacuum runs)
    assert all(isinstance(why, str) and "autovacuum" in why for why in reasons)


@ON_MARIADB
async def test_dispose_closes_the_pools_and_the_ledger_reconnects_on_demand(
    ledger: ShardLedger,
) -> None:
    assert await ledger.ping() is True
    await ledger.dispose()
    assert await ledger.ping() is True  # (the fixture disposes it once more)
