"""The relay commits its ``published`` marks before it publishes (relay/service.py).

A relay SIGKILLed between that commit and the publish leaves ``published`` rows
with no message: the reconciler's stalled-delivery step re-publishes them after
the stall window and every task runs exactly once. A publish the broker refuses
(a real nack: a reject-publish policy on the suite's own node) or cannot take
(the broker's application stopped) while the relay is alive returns its rows to
``pending`` at once, epoch + 1, without waiting for the stall window.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import signal
import time

from ledgerq import Registry, TaskSpec
from ledgerq.core.config import Settings
from tests.faults.cluster import MakeCluster
from tests.harness import Pipeline, enqueue_committed, subscribe_queues
from tests.rabbit import RabbitNode


def _work(n: int) -> list[TaskSpec]:
    return [
        TaskSpec("fault.write", {"n": i, "sleep": 0.0}, max_attempts=5, retry=[0.2])
        for i in range(n)
    ]


async def test_relay_killed_after_its_commit_before_the_publish_runs_each_task_once(
    settings: Settings, make_cluster: MakeCluster
) -> None:
    cluster = await make_cluster(workers=2, relay_env={"LEDGERQ_CRASH_AT": "relay.after_commit"})
    ids = enqueue_committed(settings, _work(200))
    await cluster.settle(ids)
    assert cluster.members[0].exits[:1] == [-signal.SIGKILL]  # died holding unsent rows
    # Those rows were committed published with no message: only the reconciler's
    # stalled-delivery step could have sent them.
    assert sum(c.republished for c in cluster.reconciles) >= 1
    verdict = await cluster.verify(ids, effects_expected=ids)
    assert verdict.terminal == {"succeeded": len(ids)}


async def _row(pipe: Pipeline, task_id: int) -> tuple[str, int, int]:
    row = await pipe.ledger.show(task_id)
    return str(row["status"]), int(row["epoch"]), int(row["publishes"])


async def test_a_nacked_publish_returns_its_rows_to_pending_at_once(
    settings: Settings, broker_node: RabbitNode
) -> None:
    async with Pipeline(settings, Registry(), start_worker=False) as pipe:
        await subscribe_queues(pipe.ledger, "refusing")
        name = pipe.topology.task_queue("refusing").name
        policy = f"nack-{settings.amqp_prefix}"
        # Applied when the relay declares the queue: every publish to it is nacked.
        broker_node.ctl(
            "set_policy",
            "--apply-to",
            "queues",
            policy,
            f"^{re.escape(name)}$",
            json.dumps({"max-length": 0, "overflow": "reject-publish"}),
        )
        try:
            [task_id] = enqueue_committed(settings, [TaskSpec("t.noop", {}, queue="refusing")])
            _, epoch, _ = await _row(pipe, task_id)
            started = time.monotonic()
            counts = await pipe.relay.run_once()
            assert (counts.claimed, counts.nacked, counts.published) == (1, 1, 0)
            # Back at once (well inside any stall window), fenced: epoch + 1. "At once"
            # is the row read right after the pass (no waiting); the bound on the pass
            # is a backstop far below the 180 s stall window, generous for a loaded machine.
            assert await _row(pipe, task_id) == ("pending", epoch + 1, 0)
            assert time.monotonic() - started < 30.0
        finally:
            broker_node.ctl("clear_policy", policy)
            await asyncio.to_thread(_delete_queue, broker_node, name)
        # Without the policy (the queue declared anew) the next batch publishes it.
        async with asyncio.timeout(30):
            while (await pipe.relay.run_once()).published == 0:
                await asyncio.sleep(0.1)
        # (a first try may come back unroutable, the queue being redeclared: epoch + 1 again)
        status, now, publishes = await _row(pipe, task_id)
        assert (status, publishes) == ("published", 1) and now > epoch


def _delete_queue(node: RabbitNode, name: str) -> None:
    node.ctl("delete_queue", name)


async def test_a_publish_to_a_stopped_broker_returns_its_rows_to_pending_at_once(
    settings: Settings, broker_node: RabbitNode
) -> None:
    async with Pipeline(settings, Registry(), start_worker=False) as pipe:
        await subscribe_queues(pipe.ledger, "default")
        [warm] = enqueue_committed(settings, [TaskSpec("t.noop", {})])
        assert (await pipe.relay.run_once()).published == 1  # connected, queue declared
        [task_id] = enqueue_committed(settings, [TaskSpec("t.noop", {})])
        _, epoch, _ = await _row(pipe, task_id)
        await asyncio.to_thread(broker_node.ctl, "stop_app")
        try:
            # The relay commits its marks, then the publish fails (the connection is
            # gone, or its confirm never comes): the rows are pending again, now.
            try:
                published = (await pipe.relay.run_once()).published
            except Exception:  # the broker away before anything went out
                published = 0
            assert published == 0
            assert await _row(pipe, task_id) == ("pending", epoch + 1, 0)
        finally:
            await asyncio.to_thread(broker_node.ctl, "start_app")
        async with asyncio.timeout(60):  # the publisher reconnects; the row goes out
            while await pipe.statuses([task_id]) != {task_id: "published"}:
                with contextlib.suppress(Exception):
                    await pipe.relay.run_once()
                await asyncio.sleep(0.2)
        assert (await _row(pipe, task_id))[1] > epoch
        assert await pipe.statuses([warm]) == {warm: "published"}
