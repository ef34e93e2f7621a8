"""The broker restarts and database connections die while tasks are in flight."""

from __future__ import annotations

from ledgerq.ledger import TaskSpec
from ledgerq.ledger.config import Settings
from tests.faults.cluster import terminal_count
from tests.faults.conftest import MakeCluster
from tests.faults.outages import kill_backends, restart_broker
from tests.harness import enqueue_committed


def _work(n: int, sleep: float) -> list[TaskSpec]:
    return [TaskSpec("fault.write", {"n": i, "sleep": sleep}, retry=[0.2]) for i in range(n)]


def test_broker_restart_with_tasks_in_flight(settings: Settings, make_cluster: MakeCluster) -> None:
    cluster = make_cluster(workers=2)
    ids = enqueue_committed(settings, _work(400, sleep=0.02))
    restarted: list[float] = []

    def tick(elapsed: float) -> None:
        if not restarted and terminal_count(settings, ids) > 60:
            restart_broker()
            restarted.append(elapsed)

    cluster.settle(ids, timeout=150, tick=tick)
    assert restarted, "the broker restart never happened"
    cluster.verify(ids, effects_expected=ids)


def test_database_connections_killed_under_relay_and_workers(
    settings: Settings, make_cluster: MakeCluster
) -> None:
    cluster = make_cluster(workers=2)
    ids = enqueue_committed(settings, _work(400, sleep=0.01))
    killed: list[int] = []

    def tick(elapsed: float) -> None:
        # Three rounds of pg_terminate_backend on every relay and worker connection,
        # at a quarter, half and three quarters of the way.
        done = terminal_count(settings, ids)
        if len(killed) < 3 and done >= len(ids) * (len(killed) + 1) / 4:
            killed.append(kill_backends(settings))

    cluster.settle(ids, timeout=120, tick=tick)
    assert len(killed) == 3 and sum(killed) > 0, killed
    cluster.verify(ids, effects_expected=ids)
