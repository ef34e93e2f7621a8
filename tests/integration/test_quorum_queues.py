"""Quorum queues (``LEDGERQ_QUEUE_TYPE=quorum``) on the real broker: the pipeline and
the reconciler work on them, they are declared as quorum queues with the delivery
limit and the dead-letter exchange, and a queue that exists as the other type is a
configuration error at start, never a retry loop."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import pika
import pika.exceptions
import pytest

from ledgerq import AsyncTaskContext, Registry, TaskSpec
from ledgerq.broker.base import QueueMismatchError
from ledgerq.broker.topology import DELIVERY_LIMIT
from ledgerq.compose import open_ledger, open_reconciler, open_relay, open_worker, topology
from ledgerq.consumers.worker import WorkerConfig
from ledgerq.core.config import Settings
from ledgerq.relay.service import RelayConfig
from tests.harness import Pipeline, enqueue_committed
from tests.support import ledgerq


def _redeclare(settings: Settings, name: str, arguments: dict[str, Any]) -> str | None:
    """Declare ``name`` again with ``arguments``; RabbitMQ's refusal, or None."""
    connection = pika.BlockingConnection(pika.URLParameters(settings.amqp_url))
    try:
        connection.channel().queue_declare(name, durable=True, arguments=arguments)
    except pika.exceptions.ChannelClosedByBroker as exc:
        return str(exc.reply_text)
    finally:
        if connection.is_open:
            connection.close()
    return None


class _NeverWoken:
    async def wait(self, timeout: float) -> bool:
        await asyncio.sleep(timeout)
        return False


@pytest.fixture
def quorum(settings: Settings) -> Settings:
    return replace(settings, queue_type="quorum")


async def test_the_pipeline_and_the_reconciler_run_on_quorum_queues(quorum: Settings) -> None:
    registry = Registry()
    ran: list[int] = []

    @registry.task("t.q")
    async def record(payload: Any, ctx: AsyncTaskContext) -> None:
        ran.append(payload["n"])

    ids = enqueue_committed(quorum, [TaskSpec("t.q", {"n": n}, priority=n % 10) for n in range(60)])
    async with Pipeline(quorum, registry) as pipe:
        done = await pipe.settle(ids)
        name = pipe.worker.subscriptions[0].broker_name  # the worker's routed queue
    assert set(done.values()) == {"succeeded"} and sorted(ran) == list(range(60))
    async with open_reconciler(quorum) as reconciler:
        assert (await reconciler.run_once()).acted

    spec = topology(quorum).task_queue(name)
    assert spec.arguments["x-queue-type"] == "quorum"
    # What the broker holds: a quorum queue (a classic declaration is refused), with
    # the delivery limit and the dead-letter exchange it was declared with.
    classic = dict(topology(replace(quorum, queue_type="classic")).task_queue(name).arguments)
    assert "inequivalent arg 'x-queue-type'" in str(_redeclare(quorum, spec.name, classic))
    other_limit = {**spec.arguments, "x-delivery-limit": DELIVERY_LIMIT + 1}
    assert "x-delivery-limit" in str(_redeclare(quorum, spec.name, other_limit))
    no_dlx = {k: v for k, v in spec.arguments.items() if k != "x-dead-letter-exchange"}
    assert "x-dead-letter-exchange" in str(_redeclare(quorum, spec.name, no_dlx))
    assert _redeclare(quorum, spec.name, dict(spec.arguments)) is None  # the same: accepted


async def test_a_queue_of_the_other_type_stops_the_services_with_the_setting_to_change(
    settings: Settings, quorum: Settings
) -> None:
    registry = Registry()
    registry.task("t.q")(lambda payload, ctx: None)
    async with open_worker(settings, registry, WorkerConfig(concurrency=1)) as worker:
        [subscription] = worker.subscriptions  # the classic queues exist now
    with pytest.raises(QueueMismatchError, match="LEDGERQ_QUEUE_TYPE"):
        async with open_worker(quorum, registry, WorkerConfig(concurrency=1)):
            pass
    with pytest.raises(QueueMismatchError, match="LEDGERQ_QUEUE_TYPE"):
        async with open_reconciler(quorum) as reconciler:
            await reconciler.run_once()
    # The relay declares on its first publish: its loop stops there, it does not retry.
    # (It publishes only to a live subscriber's route: the classic worker's, as
    # another worker still running there would keep it.)
    async with open_ledger(settings, "ledgerq-test", pool_size=1) as ledger:
        await ledger.subscribe("test-subscriber", [subscription], 600.0)
    enqueue_committed(quorum, [TaskSpec("t.q", {})])
    with pytest.raises(QueueMismatchError, match="LEDGERQ_QUEUE_TYPE"):
        async with open_relay(quorum, RelayConfig(poll_interval=0.05)) as relay:
            await asyncio.wait_for(relay.run(asyncio.Event(), _NeverWoken()), 10)
    done = ledgerq(settings, "--queue-type", "quorum", "reconcile")
    assert done.returncode == 78, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("ledgerq: RabbitMQ refused to declare queue") and "drain" in line
