"""Processes SIGKILLed at chosen points: nothing committed is lost, nothing runs twice."""

from __future__ import annotations

import asyncio
import signal

import pytest
from sqlalchemy.orm import Session

from ledgerq import Registry, TaskSpec, enqueue
from ledgerq.core.config import Settings
from ledgerq.ledger.pg import PgLedger
from ledgerq.ledger.pg.engines import sync_engine
from tests.faults.cluster import MakeCluster
from tests.harness import Pipeline, enqueue_committed


def _work(n: int, sleep: float = 0.0) -> list[TaskSpec]:
    return [
        TaskSpec("fault.write", {"n": i, "sleep": sleep}, max_attempts=5, retry=[0.2])
        for i in range(n)
    ]


@pytest.mark.parametrize(
    "point", ["worker.after_receive", "worker.mid_handler", "worker.after_commit"]
)
async def test_worker_killed_at_a_crash_point_loses_nothing(
    settings: Settings, ledger: PgLedger, make_cluster: MakeCluster, point: str
) -> None:
    cluster = await make_cluster(
        workers=1, worker_env={"LEDGERQ_CRASH_AT": point, "LEDGERQ_CRASH_AFTER": "3"}
    )
    ids = enqueue_committed(settings, _work(40, sleep=0.01))
    await cluster.settle(ids)
    worker = cluster.members[1]
    assert worker.exits[:1] == [-signal.SIGKILL], worker.exits  # the crash point was reached
    verdict = await cluster.verify(ids, effects_expected=ids)
    assert verdict.terminal == {"succeeded": len(ids)}
    if point == "worker.mid_handler":
        # The claimed tasks' leases expired and the reconciler re-queued them: charged
        # (a second attempt) if the dead worker ran one task, else released as suspects.
        assert sum(c.expired for c in cluster.reconciles) >= 1
        rows = [await ledger.show(i) for i in ids]
        assert any(r["attempts"] == 2 or r["suspect"] for r in rows)


async def test_relay_killed_after_its_confirms_loses_nothing(
    settings: Settings, make_cluster: MakeCluster
) -> None:
    """The relay commits its marks, publishes, has its confirms and is killed
    before it settles the batch's failures (``relay.after_publish``): every
    message is out and confirmed, so each task runs once."""
    cluster = await make_cluster(workers=2, relay_env={"LEDGERQ_CRASH_AT": "relay.after_publish"})
    ids = enqueue_committed(settings, _work(200))  # one batch for the relay
    await cluster.settle(ids)
    assert cluster.members[0].exits[:1] == [-signal.SIGKILL]
    await cluster.verify(ids, effects_expected=ids)  # none lost, none ran twice


async def test_poison_task_that_kills_its_worker_ends_dead_while_others_flow(
    settings: Settings, ledger: PgLedger, make_cluster: MakeCluster
) -> None:
    cluster = await make_cluster(workers=2)
    [poison] = enqueue_committed(
        settings, [TaskSpec("fault.poison", {}, max_attempts=3, retry=[0.1])]
    )
    ids = enqueue_committed(settings, _work(150, sleep=0.005))
    await cluster.settle([poison, *ids], timeout=120)
    dead = await ledger.show(poison)
    assert (dead["status"], dead["attempts"]) == ("dead", 3)
    assert "lease expired" in dead["last_error"]
    verdict = await cluster.verify([poison, *ids], effects_expected=ids)
    assert verdict.terminal == {"succeeded": len(ids), "dead": 1}
    assert sum(len(m.exits) for m in cluster.members[1:]) >= 3  # it killed a worker each time


async def test_a_task_that_kills_its_worker_is_found_without_charging_its_neighbours(
    settings: Settings, ledger: PgLedger, make_cluster: MakeCluster
) -> None:
    """Healthy tasks that may not fail once share a worker with a killer. The first
    death releases them all uncharged as suspects; each then runs alone, and only
    the killer, dying alone, is charged until it is dead."""
    cluster = await make_cluster(workers=1)
    healthy = enqueue_committed(
        settings,
        [TaskSpec("fault.write", {"n": i, "sleep": 1.5}, max_attempts=1) for i in range(6)],
    )
    async with asyncio.timeout(30):  # the healthy tasks are in flight when the killer comes
        while (await ledger.stats())["by_status"].get("running", 0) < 6:
            await asyncio.sleep(0.05)
    [killer] = enqueue_committed(
        settings, [TaskSpec("fault.poison", {}, max_attempts=2, retry=[0.1])]
    )
    await cluster.settle([*healthy, killer], timeout=120)

    dead = await ledger.show(killer)
    assert (dead["status"], dead["attempts"], dead["suspect"]) == ("dead", 2, True)
    assert "lease expired" in dead["last_error"]
    verdict = await cluster.verify([*healthy, killer], effects_expected=healthy)
    assert verdict.terminal == {"succeeded": 6, "dead": 1}
    rows = [await ledger.show(i) for i in healthy]
    assert [r["attempts"] for r in rows] == [1] * 6  # nobody else paid
    assert sum(r["suspect"] for r in rows) >= 1  # they were in flight at the first death
    assert sum(c.released for c in cluster.reconciles) >= 2
    assert len(cluster.members[1].exits) >= 3  # one death with company, two alone


async def test_open_producer_transaction_does_not_hide_later_commits(
    settings: Settings, ledger: PgLedger
) -> None:
    """A relay that read "id > last seen" would skip the early id that commits late."""
    registry = Registry()

    @registry.task("t.ok")
    async def ok(payload: object, ctx: object) -> None:
        return None

    engine = sync_engine(settings, "test-slow-producer", pool_size=2)
    slow = Session(engine)
    slow.begin()
    early = enqueue(slow, "t.ok", {"who": "slow producer"})  # lower id, not committed yet
    later = enqueue_committed(settings, [TaskSpec("t.ok", {"n": i}) for i in range(20)])
    assert min(later) > early

    try:
        async with Pipeline(settings, registry) as pipe:
            await pipe.settle(later)
            assert await pipe.statuses([early]) == {}  # invisible until its commit
            slow.commit()
            await pipe.settle([early])
    finally:
        slow.close()
        engine.dispose()
    assert set((await ledger.whereabouts([early, *later])).values()) == {"succeeded"}
