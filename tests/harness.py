"""An in-process pipeline for integration tests: real PostgreSQL, real RabbitMQ.

``Pipeline`` wires the same parts the CLI does (AsyncLedger, ConfirmedPublisher,
Relay, Worker) so a test can call ``relay.run_once()`` itself and watch the
ledger, with no subprocess and no sleep-and-hope.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Sequence
from dataclasses import replace
from types import TracebackType
from typing import Any

import psycopg
from aio_pika.abc import AbstractRobustConnection
from sqlalchemy import Engine
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.orm import Session

from ledgerq.consumers.registry import Registry
from ledgerq.consumers.worker import Worker, WorkerConfig
from ledgerq.ledger import TaskSpec, enqueue_many
from ledgerq.ledger.alerts import AlertHook, log_alert
from ledgerq.ledger.config import Settings
from ledgerq.ledger.db import async_engine, libpq_url, sync_engine
from ledgerq.ledger.store import AsyncLedger
from ledgerq.ledger.topology import Topology
from ledgerq.relay.amqp import ConfirmedPublisher, connect
from ledgerq.relay.service import Relay, RelayConfig

TERMINAL = ("succeeded", "dead", "cancelled")


def db(settings: Settings) -> psycopg.Connection[tuple[Any, ...]]:
    return psycopg.connect(libpq_url(settings.database_url), autocommit=True)


def statuses(settings: Settings, ids: Iterable[int]) -> dict[int, str]:
    """Where each task is now: a live status, a terminal status, or absent."""
    wanted = list(ids)
    with db(settings) as conn:
        rows = conn.execute(
            "SELECT id, status FROM ledgerq_tasks WHERE id = ANY(%(ids)s) "
            "UNION ALL SELECT id, status FROM ledgerq_history WHERE id = ANY(%(ids)s)",
            {"ids": wanted},
        ).fetchall()
    return {int(r[0]): str(r[1]) for r in rows}


def row(settings: Settings, task_id: int) -> dict[str, Any]:
    with db(settings) as conn, conn.cursor(row_factory=psycopg.rows.dict_row) as cur:
        found = cur.execute(
            "SELECT *, 'live' AS location FROM ledgerq_tasks WHERE id = %(id)s UNION ALL "
            "SELECT *, 'history' AS location FROM ledgerq_history WHERE id = %(id)s",
            {"id": task_id},
        ).fetchone()
    assert found is not None, f"task {task_id} is in neither table"
    return dict(found)


def enqueue_committed(settings: Settings, specs: Sequence[TaskSpec]) -> list[int]:
    engine = sync_engine(settings, "ledgerq-test-producer", pool_size=1)
    try:
        with Session(engine) as session, session.begin():
            return enqueue_many(session, specs)
    finally:
        engine.dispose()


class Pipeline:
    """Relay plus one worker, in this event loop."""

    def __init__(
        self,
        settings: Settings,
        registry: Registry,
        *,
        worker: WorkerConfig | None = None,
        relay: RelayConfig | None = None,
        alert: AlertHook = log_alert,
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

    async def __aenter__(self) -> Pipeline:
        self.engine: AsyncEngine = async_engine(self.settings, "ledgerq-test", pool_size=12)
        self.sync_engine: Engine = sync_engine(self.settings, "ledgerq-test-sync", pool_size=8)
        self.ledger = AsyncLedger(self.engine)
        self.connection: AbstractRobustConnection = await connect(self.settings.amqp_url)
        self.publisher = ConfirmedPublisher(self.connection, self.topology)
        self.relay = Relay(self.ledger, self.publisher, self.relay_config)
        self.worker = Worker(
            self.ledger,
            self.registry,
            self.topology,
            self.worker_config,
            sync_engine=self.sync_engine,
            alert=self.alert,
        )
        if self.start_worker:
            await self.worker.start(self.connection)
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.start_worker:
            await self.worker.stop()
        await self.publisher.close()
        await self.connection.close()
        await self.engine.dispose()
        self.sync_engine.dispose()

    def with_worker_config(self, **changes: Any) -> WorkerConfig:
        return replace(self.worker_config, **changes)

    async def settle(
        self, ids: Sequence[int], *, timeout: float = 30.0, until: Sequence[str] = TERMINAL
    ) -> dict[int, str]:
        """Run the relay until every id has a status in ``until``; return the statuses."""
        deadline = time.monotonic() + timeout
        while True:
            await self.relay.run_once()
            now = statuses(self.settings, ids)
            if len(now) == len(ids) and all(s in until for s in now.values()):
                return now
            if time.monotonic() > deadline:
                raise AssertionError(f"not settled after {timeout}s: {now}")
            await asyncio.sleep(0.05)
