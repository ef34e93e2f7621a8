"""The broker restarts and database connections die while tasks are in flight."""

from __future__ import annotations

import asyncio

from ledgerq import TaskSpec
from ledgerq.core.config import Settings
from tests.faults.cluster import MakeCluster, terminal_count
from tests.faults.outages import kill_backends, restart_broker
from tests.harness import enqueue_committed
from tests.rabbit import RabbitNode


def _work(n: int, sleep: float) -> list[TaskSpec]:
    return [TaskSpec("fault.write", {"n": i, "sleep": sleep}, retry=[0.2]) for i in range(n)]


async def test_broker_restart_with_tasks_in_flight(
    settings: Settings, make_cluster: MakeCluster, broker_node: RabbitNode
) -> None:
    cluster = await make_cluster(workers=2)
    ids = enqueue_committed(settings, _work(400, sleep=0.02))
    restarted: list[float] = []

    async def tick(elapsed: float) -> None:
        if not restarted and await terminal_count(cluster.ledger, ids) > 60:
            await asyncio.to_thread(restart_broker, broker_node)
            restarted.append(elapsed)

    await cluster.settle(ids, timeout=150, tick=tick)
    assert restarted, "the broker restart never happened"
    await cluster.verify(ids, effects_expected=ids)


async def test_database_connections_killed_under_relay_and_workers(
    settings: Settings, make_cluster: MakeCluster
) -> None:
    cluster = await make_cluster(workers=2)
    ids = enqueue_committed(settings, _work(400, sleep=0.01))
    killed: list[int] = []

    async def tick(elapsed: float) -> None:
        # Three rounds of pg_terminate_backend on every relay and worker connection
        # (and the reconciler's, which the composition root names like a service's),
        # at a quarter, half and three quarters of the way.
        done = await terminal_count(cluster.ledger, ids)
        if len(killed) < 3 and done >= len(ids) * (len(killed) + 1) / 4:
            killed.append(kill_backends(settings))

    await cluster.settle(ids, timeout=120, tick=tick)
    assert len(killed) == 3 and sum(killed) > 0, killed
    await cluster.verify(ids, effects_expected=ids)
