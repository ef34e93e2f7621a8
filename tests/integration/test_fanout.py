"""Fan-out with completion, on the real pipeline.

A parent spawns children with ``ctx.spawn`` (or a producer names it with
``parent_id``); when the parent and every child are terminal, the ledger's
history trigger (migration 0010) enqueues exactly one ``on_children_done``
callback with the children's counts by outcome. The callbacks of
``tests.apps.fanout_app`` record their payloads in ``fanout_callbacks``, so a
second callback would show as a second row.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator, Sequence
from typing import Any

import psycopg
import pytest
from sqlalchemy.orm import Session

from ledgerq import TaskSpec, enqueue
from ledgerq.consumers.registry import default_registry
from ledgerq.consumers.worker import WorkerConfig
from ledgerq.ledger.config import Settings
from ledgerq.ledger.errors import FamilyCompletedError, UnknownParentError
from ledgerq.ledger.pg import PgLedger
from ledgerq.ledger.pg.engines import sync_engine
from tests.apps import fanout_app
from tests.apps.fanout_app import CALLBACKS_DDL
from tests.harness import Pipeline, db, enqueue_committed
from tests.support import spawn

WORKER = WorkerConfig(concurrency=16, lease_s=30, heartbeat_s=1, grace_s=5)


def callbacks(settings: Settings) -> list[dict[str, Any]]:
    with db(settings) as conn:
        return [
            dict(row[0])
            for row in conn.execute("SELECT payload FROM fanout_callbacks ORDER BY id")
        ]


@pytest.fixture
def fanout_settings(settings: Settings) -> Iterator[Settings]:
    assert fanout_app.parent is not None  # the app's kinds are in the default registry
    with db(settings) as conn:
        conn.execute("DROP TABLE IF EXISTS fanout_callbacks")
        conn.execute(CALLBACKS_DDL)
    yield settings


async def wait_for_callbacks(
    pipe: Pipeline, settings: Settings, count: int, timeout: float = 90
) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while len(got := callbacks(settings)) < count:
        assert time.monotonic() < deadline, f"{len(got)} callbacks after {timeout} s: {got}"
        await pipe.relay.run_once()
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.5)  # a second callback would have had time to come
    await pipe.relay.run_once()
    return callbacks(settings)


async def test_a_parent_gets_one_callback_with_the_counts(
    fanout_settings: Settings, ledger: PgLedger
) -> None:
    [parent] = enqueue_committed(
        fanout_settings, [TaskSpec("fan.parent", {"n": 20, "fail": [3, 7]})]
    )
    async with Pipeline(fanout_settings, default_registry, worker=WORKER) as pipe:
        got = await wait_for_callbacks(pipe, fanout_settings, 1)
    assert got == [{"parent_id": parent, "succeeded": 18, "dead": 2, "cancelled": 0}]
    children = await ledger.children(parent)
    assert len(children) == 20


async def test_a_producer_child_needs_a_known_parent(fanout_settings: Settings) -> None:
    engine = sync_engine(fanout_settings, "ledgerq-test-producer", pool_size=1)
    try:
        with Session(engine) as session, pytest.raises(UnknownParentError, match="123456"):
            enqueue(session, "fan.child", {}, parent_id=123456)
    finally:
        engine.dispose()
