"""Broker-down mode (issue 16): the broker's application stops mid-run, for longer
than the workers' ``--broker-fallback``; tasks enqueued meanwhile complete
through the ledger-direct path; the broker comes back, the relay and the
consumers take over again, and the total-queue check passes: every committed
task ended once, no attempt doubled (each succeeded at its first attempt, one
effect each)."""

from __future__ import annotations

import asyncio
import time

from ledgerq import TaskSpec
from ledgerq.core.config import Settings
from tests.faults.cluster import WORKER_ARGS, MakeCluster, terminal_count
from tests.harness import db, enqueue_committed
from tests.rabbit import RabbitNode

FALLBACK_S = 1.0


def _work(n: int, sleep: float, tag: str) -> list[TaskSpec]:
    return [TaskSpec("fault.write", {"n": i, "sleep": sleep, "tag": tag}) for i in range(n)]


def _attempts(settings: Settings, ids: list[int]) -> set[int]:
    with db(settings) as conn:
        rows = conn.execute(
            "SELECT DISTINCT attempts FROM ledgerq_history WHERE id = ANY(%s)", (ids,)
        ).fetchall()
    return {int(r[0]) for r in rows}


async def test_tasks_complete_while_the_broker_is_down(
    settings: Settings, make_cluster: MakeCluster, broker_node: RabbitNode
) -> None:
    cluster = await make_cluster(workers=2, start=False)
    for member in cluster.members[1:]:
        member.args = (*WORKER_ARGS, "--broker-fallback", str(FALLBACK_S))
    await cluster.start().ready()
    before = enqueue_committed(settings, _work(300, sleep=0.01, tag="before"))
    during: list[int] = []
    down_for: list[float] = []

    async def outage(elapsed: float) -> None:
        if down_for or await terminal_count(cluster.ledger, before) < 60:
            return
        await asyncio.to_thread(broker_node.ctl, "stop_app")
        stopped = time.monotonic()
        try:
            for chunk in range(5):  # keep enqueueing while it is down
                during.extend(enqueue_committed(settings, _work(40, 0.01, f"during-{chunk}")))
                await asyncio.sleep(0.3)
            deadline = time.monotonic() + 60
            while await terminal_count(cluster.ledger, during) < len(during):
                assert time.monotonic() < deadline, "the direct path did not drain the outage"
                cluster.supervise()
                await asyncio.sleep(0.2)
        finally:
            down_for.append(time.monotonic() - stopped)
            await asyncio.to_thread(broker_node.ctl, "start_app")
            await asyncio.to_thread(broker_node.ctl, "await_startup")

    await cluster.settle(before, timeout=180, tick=outage)
    assert down_for, "the broker never went down"
    after = enqueue_committed(settings, _work(100, sleep=0.01, tag="after"))
    ids = before + during + after
    await cluster.settle(ids, timeout=120)
    await cluster.verify(ids, effects_expected=ids)
    assert _attempts(settings, ids) == {1}  # nothing ran twice
    print(f"broker down {down_for[0]:.1f}s; {len(during)} tasks enqueued and done meanwhile")
