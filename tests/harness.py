"""An in-process pipeline for integration tests: real PostgreSQL, real RabbitMQ.

``Pipeline`` builds the relay and the worker through the composition root
(:func:`ledgerq.compose.open_relay`, :func:`ledgerq.compose.open_worker`), the
same wiring the ``ledgerq`` command runs, so a test can call
``relay.run_once()`` itself and watch the ledger through the storage seam
(:func:`ledgerq.compose.open_ledger`), with no subprocess and no sleep-and-hope.

Raw SQL here is only for the tests' own tables (``test_effects``) and for the
faults a test injects on purpose; task lookups go through the seam.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import replace
from types import TracebackType
from typing import Any

import pika
import psycopg
from pika.exchange_type import ExchangeType
from sqlalchemy.orm import Session

from ledgerq import Registry, TaskSpec, enqueue_many
from ledgerq.alerting.alerts import AlertHook
from ledgerq.broker.topology import Topology
from ledgerq.compose import open_ledger, open_relay, open_worker
from ledgerq.consumers.worker import Worker, WorkerConfig
from ledgerq.core.config import Settings
from ledgerq.ledger.pg import PgLedger
from ledgerq.ledger.pg.engines import libpq_url, sync_engine
from ledgerq.ledger.routing import Subscription
from ledgerq.relay.service import Relay, RelayConfig
from tests.support import spawn

TERMINAL = ("succeeded", "dead", "cancelled")

#: The tests' own table, written by handlers through ``ctx.session``.
EFFECTS_DDL = """CREATE TABLE IF NOT EXISTS test_effects (
    id bigserial PRIMARY KEY, task_id bigint NOT NULL, attempt int NOT NULL)"""


def db(settings: Settings) -> psycopg.Connection[tuple[Any, ...]]:
    """A raw connection: for the tests' own tables and for injected faults only."""
    return psycopg.connect(libpq_url(settings.database_url), autocommit=True)


def effects(settings: Settings) -> list[tuple[int, int]]:
    """``(task_id, attempt)`` of every row in ``test_effects``, in insertion order."""
    with db(settings) as conn:
        return [
            (int(a), int(b))
            for a, b in conn.execute("SELECT task_id, attempt FROM test_effects ORDER BY id")
        ]


def enqueue_committed(settings: Settings, specs: Sequence[TaskSpec]) -> list[int]:
    """Enqueue as a producer does, in its own committed transaction."""
    engine = sync_engine(settings, "ledgerq-test-producer", pool_size=1)
    try:
        with Session(engine) as session, session.begin():
            return enqueue_many(session, specs)
    finally:
        engine.dispose()


async def subscribe_queues(
    ledger: PgLedger,
    *queues: str,
    capacity: int = 10_000,
    worker: str = "test-subscriber",
    ttl_s: float = 600.0,
) -> None:
    """Register a live whole-queue subscriber (every kind and shard, the queue's own
    broker queue) with room for ``capacity`` tasks, so a relay publishes to
    ``queues`` while no ledgerq worker runs: for tests that consume from the broker
    themselves or look at what the relay did. Without a live subscriber the relay
    publishes nothing (the window: docs/design.md)."""
    await ledger.subscribe(
        worker, [Subscription(q, capacity=capacity) for q in queues or ("default",)], ttl_s
    )


class Poll:
    """A relay's wake-up that never fires: the relay just polls (for ``relay.run``
    in tests that run several relays on one event loop)."""

    async def wait(self, timeout: float) -> bool:
        await asyncio.sleep(timeout)
        return False


class Pipeline:
    """The relay plus one worker, built by the composition root, in this event loop."""

    def __init__(
        self,
        settings: Settings,
        registry: Registry,
        *,
        worker: WorkerConfig | None = None,
        relay: RelayConfig | None = None,
        alert: AlertHook | None = None,
        start_worker: bool = True,
    ) -> None:
        self.settings = settings
        self.registry = registry
        self.worker_config = worker or WorkerConfig(
            concurrency=8, lease_s=30, heartbeat_s=5, grace_s=5
        )
        self.relay_config = relay or RelayConfig(batch_size=200, confirm_timeout=5)
        self.alert = alert
        self.start_worker = start_worker
        self.topology = Topology(settings.amqp_prefix)
        self._worker: Worker | None = None
        self._stack = AsyncExitStack()

    async def __aenter__(self) -> Pipeline:
        async with AsyncExitStack() as stack:
            self.ledger: PgLedger = await stack.enter_async_context(
                open_ledger(self.settings, "ledgerq-test", pool_size=2)
            )
            self.relay: Relay = await stack.enter_async_context(
                open_relay(self.settings, self.relay_config)
            )
            if self.start_worker:
                self._worker = await stack.enter_async_context(
                    open_worker(self.settings, self.registry, self.worker_config, alert=self.alert)
                )
            self._stack = stack.pop_all()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._stack.__aexit__(et, e, tb)

    @property
    def worker(self) -> Worker:
        assert self._worker is not None, "this pipeline was opened with start_worker=False"
        return self._worker

    def with_worker_config(self, **changes: Any) -> WorkerConfig:
        return replace(self.worker_config, **changes)

    async def statuses(self, ids: Sequence[int]) -> dict[int, str]:
        """Where each task is now: a live status, a terminal status, or absent."""
        return await self.ledger.whereabouts(ids)

    async def settle(
        self, ids: Sequence[int], *, timeout: float = 30.0, until: Sequence[str] = TERMINAL
    ) -> dict[int, str]:
        """Run the relay until every id has a status in ``until``; return the statuses."""
        deadline = time.monotonic() + timeout
        while True:
            await self.relay.run_once()
            now = await self.statuses(ids)
            if len(now) == len(ids) and all(s in until for s in now.values()):
                return now
            if time.monotonic() > deadline:
                raise AssertionError(f"not settled after {timeout}s: {now}")
            await asyncio.sleep(0.05)

    async def learned(self, kind: str, *, timeout: float = 10.0) -> None:
        """Wait until the worker has learned that ``kind`` writes through
        ``ctx.session`` (it learns once the handler's run is over on the loop, which
        for a sync handler can be a moment after its commit made the task terminal)."""
        deadline = time.monotonic() + timeout
        while kind not in self.worker.runner.session_kinds:
            if time.monotonic() > deadline:
                raise AssertionError(f"the worker did not learn {kind} within {timeout}s")
            await asyncio.sleep(0.01)


async def stop_worker_during_alert(
    settings: Settings, alert_started: Callable[[], bool], grace_s: float = 2.0
) -> tuple[int | None, str, float]:
    """Run a ``ledgerq worker`` process until one task has ended dead and its alert
    is under way (``alert_started``), then SIGTERM it: its exit code, its output,
    and the seconds it took to exit. The alert settings come from the environment."""
    [task_id] = enqueue_committed(settings, [TaskSpec("test.fail", {}, max_attempts=1)])
    worker = spawn(
        settings, "-v", "worker", "--app", "tests.apps.slow_app", "--grace", str(grace_s)
    )
    try:
        async with Pipeline(settings, Registry(), start_worker=False) as pipe:
            assert await pipe.settle([task_id]) == {task_id: "dead"}
        deadline = time.monotonic() + 10
        while not alert_started() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert alert_started(), "the worker never started the alert"
    finally:
        stopping = time.monotonic()
        worker.send_signal(signal.SIGTERM)
        output, _ = await asyncio.to_thread(worker.communicate, timeout=60)
    return worker.returncode, output, time.monotonic() - stopping


def declare_broker_queues(settings: Settings, names: Sequence[str]) -> None:
    """Declare and bind the broker queues ``names`` (``queue`` or ``queue@route``) the
    way a worker does at start, with the suite's own broker user."""
    topology = Topology(settings.amqp_prefix, settings.queue_type)
    connection = pika.BlockingConnection(pika.URLParameters(settings.amqp_url))
    try:
        channel = connection.channel()
        exchanges, base_queues = topology.base()
        for exchange in exchanges:
            channel.exchange_declare(
                exchange.name, ExchangeType(exchange.type), durable=exchange.durable
            )
        for spec in (*base_queues, *(topology.task_queue(name) for name in names)):
            channel.queue_declare(spec.name, durable=spec.durable, arguments=dict(spec.arguments))
            channel.queue_bind(spec.name, spec.exchange, spec.routing_key)
    finally:
        connection.close()


async def subscribe_like_worker(
    settings: Settings,
    ledger: PgLedger,
    registry: Registry,
    config: WorkerConfig,
    *,
    capacity: int = 10_000,
    worker: str = "test-subscriber",
    ttl_s: float = 600.0,
) -> tuple[Subscription, ...]:
    """Stand in for a worker with ``registry`` and ``config`` before it starts: declare
    its broker queues (the same kinds and shards, so the same routes) and register its
    subscriptions live under ``worker``, with room for ``capacity`` tasks. A relay
    then publishes into the queues that worker will consume, so a test can build a
    backlog in RabbitMQ for it. Returns the subscriptions (``.broker_name``,
    ``.route``); ``ledger.unsubscribe(worker)`` ends the stand-in."""
    subscriptions = tuple(
        replace(s, capacity=capacity) for s in config.subscriptions(registry.kinds())
    )
    declare_broker_queues(settings, [s.broker_name for s in subscriptions])
    await ledger.subscribe(worker, subscriptions, ttl_s)
    return subscriptions
