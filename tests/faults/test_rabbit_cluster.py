"""The pipeline on a real three-node RabbitMQ cluster with quorum queues, while the
node every process is connected to stops and comes back.

``LEDGERQ_AMQP_URL`` lists the three nodes, first node first, so every relay,
worker and reconciler connection starts on node 0. Stopping node 0's application
drops all of them at once: each reconnects to the next node of the list
(:mod:`ledgerq.broker.failover`), the quorum queue elects a leader among
the two nodes left, and work goes on. Tasks are enqueued before, during and after
the outage; every one must end exactly once. The test prints how long completions
stalled around the failover (the longest time in which no task ended).
"""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from ledgerq import TaskSpec
from ledgerq.core.config import Settings
from tests import rabbit
from tests.faults.cluster import Cluster, terminal_count
from tests.harness import enqueue_committed
from tests.rabbit import RabbitCluster


@pytest.fixture(scope="module")
def rabbit_cluster() -> Iterator[RabbitCluster]:
    if not rabbit.available():
        pytest.fail("the cluster test needs the RabbitMQ server installed (scripts/test.sh)")
    home = rabbit.workdir("ledgerq-cluster-")
    cluster = RabbitCluster(home)
    try:
        yield cluster.start()
    finally:
        cluster.stop()
        shutil.rmtree(home, ignore_errors=True)


def _work(n: int, start: int) -> list[TaskSpec]:
    return [TaskSpec("fault.write", {"n": start + i, "sleep": 0.01}) for i in range(n)]


async def test_a_node_stopping_under_quorum_queues_loses_and_doubles_nothing(
    settings: Settings, rabbit_cluster: RabbitCluster, tmp_path: Path
) -> None:
    clustered = replace(settings, amqp_url=rabbit_cluster.url, queue_type="quorum")
    first = rabbit_cluster.nodes[0]
    cluster = Cluster(clustered, tmp_path, workers=2)
    await cluster.open()
    try:
        await cluster.start().ready()
        ids = enqueue_committed(clustered, _work(600, 0))
        events: dict[str, float] = {}
        progress: list[tuple[float, int]] = []

        async def tick(elapsed: float) -> None:
            done = await terminal_count(cluster.ledger, ids)
            progress.append((time.monotonic(), done))
            if "stopped" not in events and done >= 150:
                await asyncio.to_thread(first.ctl, "stop_app")
                events["stopped"] = time.monotonic()
                ids.extend(enqueue_committed(clustered, _work(600, 600)))  # while it is down
            elif "started" not in events and time.monotonic() - events.get("stopped", 1e18) > 8:
                await asyncio.to_thread(first.ctl, "start_app")
                await asyncio.to_thread(first.ctl, "await_startup")
                events["started"] = time.monotonic()
                ids.extend(enqueue_committed(clustered, _work(300, 1200)))

        await cluster.settle(ids, timeout=240, tick=tick, hold=lambda: "started" not in events)
        verdict = await cluster.verify(ids, effects_expected=ids)
    finally:
        await cluster.stop()

    assert verdict.ok and len(ids) == 1500
    # The longest time, from the stop on, in which the count of ended tasks stood still.
    after_stop = [(t, n) for t, n in progress if t >= events["stopped"]]
    longest, last_change = 0.0, after_stop[0]
    for sample in after_stop[1:]:
        if sample[1] != last_change[1]:
            longest = max(longest, sample[0] - last_change[0])
            last_change = sample
    print(
        f"\ncluster failover: node 0 down {events['started'] - events['stopped']:.1f} s; "
        f"longest time without a task ending after it stopped: {longest:.1f} s "
        f"(sampling every ~0.2 s; {len(ids)} tasks, each ended once)"
    )
    assert longest < 30, f"completions stalled {longest:.1f} s after the node stopped"
    # Failed over, not waited out: tasks ended while node 0 was still down.
    down = [n for t, n in progress if events["stopped"] < t < events["started"]]
    assert down and down[-1] > down[0], "no task ended while node 0 was down"
