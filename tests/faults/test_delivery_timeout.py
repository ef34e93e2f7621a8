"""RabbitMQ's consumer delivery timeout must not turn a long task into a duplicate.

The broker closes a channel whose delivery stayed unacked past
``consumer_timeout`` (30 min by default) and requeues everything unacked on it.
ledgerq keeps the delivery unacked while the handler runs (the ack follows the
terminal commit), so a long task meets this. What happens then: the requeued
message is redelivered on the reopened channel, its claim loses (the row is
``running`` under a newer epoch), and it is acked and skipped; the original
attempt finishes, commits ``succeeded`` with its writes, and drops its ack
because its channel is gone. One execution, one effect.

This test lowers the broker's timeout to 2 s (and its check interval) for its
duration, then restores both.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from ledgerq import TaskSpec
from ledgerq.core.config import Settings
from ledgerq.ledger.pg import PgLedger
from tests.faults.cluster import MakeCluster
from tests.harness import enqueue_committed
from tests.rabbit import RabbitNode


@pytest.fixture
def short_consumer_timeout(broker_node: RabbitNode) -> Iterator[None]:
    """Lower the fault suite's own node's delivery timeout to 2 s, and restore it."""

    def get_env(key: str) -> str:
        out = broker_node.ctl("eval", f"application:get_env(rabbit, {key}).")
        return out.strip().removeprefix("{ok,").removesuffix("}")

    saved = {key: get_env(key) for key in ("consumer_timeout", "channel_tick_interval")}
    broker_node.ctl("eval", "application:set_env(rabbit, consumer_timeout, 2000).")
    broker_node.ctl("eval", "application:set_env(rabbit, channel_tick_interval, 500).")
    try:
        yield
    finally:
        for key, value in saved.items():
            if value.isdigit():
                broker_node.ctl("eval", f"application:set_env(rabbit, {key}, {value}).")
            else:
                broker_node.ctl("eval", f"application:unset_env(rabbit, {key}).")


async def _run_once_past_the_timeout(
    kind: str, ledger: PgLedger, tmp_path: Path, make_cluster: MakeCluster, settings: Settings
) -> str:
    """One 6 s task of ``kind`` on one worker, past the 2 s delivery timeout: it
    must run once and succeed, and the worker exit cleanly. The worker's log."""
    cluster = await make_cluster(workers=1)
    ids = enqueue_committed(settings, [TaskSpec(kind, {"sleep": 6.0})])
    await cluster.settle(ids, timeout=60)
    await cluster.verify(ids, effects_expected=ids)
    done = await ledger.show(ids[0])
    assert (done["status"], done["attempts"]) == ("succeeded", 1)
    assert (await cluster.stop())["worker-0"] == [0]
    return (tmp_path / "worker-0.log").read_text()


async def test_long_task_past_the_delivery_timeout_runs_once(
    settings: Settings,
    ledger: PgLedger,
    tmp_path: Path,
    make_cluster: MakeCluster,
    short_consumer_timeout: None,
) -> None:
    # The worker's lease (2 s, heartbeat 0.5 s) keeps the task alive in the ledger
    # while the broker gives up on the delivery.
    log = await _run_once_past_the_timeout("fault.write", ledger, tmp_path, make_cluster, settings)
    # The broker did time the delivery out: the original ack was dropped, and the
    # redelivery was received and skipped rather than run.
    assert "came on a channel that is gone; not acked" in log, log[-3000:]
    assert "received=2, claimed=1, skipped=1, succeeded=1" in log, log[-3000:]


async def test_a_lease_mode_task_past_the_delivery_timeout_is_never_redelivered(
    settings: Settings,
    ledger: PgLedger,
    tmp_path: Path,
    make_cluster: MakeCluster,
    short_consumer_timeout: None,
) -> None:
    """``@task(lease=True)``: the delivery is acked as soon as the claim commits, so
    the broker's consumer timeout has nothing to time out: no channel is closed, no
    delivery redelivered, and the task runs once, held by the ledger's lease alone."""
    log = await _run_once_past_the_timeout("fault.lease", ledger, tmp_path, make_cluster, settings)
    assert "came on a channel that is gone" not in log, log[-3000:]
    assert "received=1, claimed=1, skipped=0, succeeded=1" in log, log[-3000:]


async def test_a_lease_mode_task_whose_worker_dies_is_published_again_by_the_reconciler(
    settings: Settings, ledger: PgLedger, make_cluster: MakeCluster
) -> None:
    """Acked at its claim, a lease-mode task is not in RabbitMQ any more when its
    worker dies: the broker cannot redeliver it. Its lease expires, the reconciler
    sends it back to pending, the relay publishes it again, and it runs once more:
    one effect."""
    cluster = await make_cluster(workers=1)
    ids = enqueue_committed(settings, [TaskSpec("fault.lease", {"sleep": 3.0})])
    for _ in range(200):
        if (await ledger.show(ids[0]) or {}).get("status") == "running":
            break
        await asyncio.sleep(0.05)
    assert cluster.kill("worker-0")
    await cluster.settle(ids, timeout=90)
    await cluster.verify(ids, effects_expected=ids)
    done = await ledger.show(ids[0])
    assert done["status"] == "succeeded" and "lease expired" in str(done["attempt_log"])
