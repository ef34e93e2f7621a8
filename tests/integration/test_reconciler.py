"""The reconciler, one pass at a time (``run_once``), on the real services."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from datetime import UTC, datetime

import pika
import pytest

from ledgerq import Registry, TaskSpec
from ledgerq.alerting.alerts import AlertHook, log_alert
from ledgerq.broker.topology import Topology
from ledgerq.compose import open_reconciler
from ledgerq.core.config import Settings
from ledgerq.ledger.model import Finished
from ledgerq.ledger.pg import PgLedger
from ledgerq.relay.reconciler import Reconciler, ReconcilerConfig
from tests.harness import Pipeline, enqueue_committed, subscribe_queues
from tests.support import ledgerq


class Reconcilers:
    """Builds reconcilers (through the composition root) for a test; the fixture
    closes them afterwards."""

    def __init__(self, settings: Settings, stack: AsyncExitStack) -> None:
        self.settings = settings
        self.stack = stack

    async def __call__(
        self, alert: AlertHook = log_alert, stall_s: float = 180.0, page_size: int = 500
    ) -> Reconciler:
        return await self.stack.enter_async_context(
            open_reconciler(
                self.settings, ReconcilerConfig(stall_s=stall_s, page_size=page_size), alert=alert
            )
        )


@pytest.fixture
async def make_reconciler(settings: Settings) -> AsyncIterator[Reconcilers]:
    async with AsyncExitStack() as stack:
        yield Reconcilers(settings, stack)


def _queue_depth(settings: Settings, purge: bool = False) -> int:
    conn = pika.BlockingConnection(pika.URLParameters(settings.amqp_url))
    try:
        channel = conn.channel()
        name = Topology(settings.amqp_prefix).task_queue("default").name
        if purge:
            channel.queue_purge(name)
        return int(channel.queue_declare(name, passive=True).method.message_count or 0)
    finally:
        conn.close()


async def _publish(settings: Settings, n: int) -> list[int]:
    ids = enqueue_committed(settings, [TaskSpec("t.r", {"i": i}) for i in range(n)])
    async with Pipeline(settings, Registry(), start_worker=False) as pipe:
        # A live whole-queue subscriber (its broker queue is "<prefix>.q.default",
        # the one _queue_depth reads): without one the relay publishes nothing, and
        # the reconciler would take the published rows back instead of re-publishing.
        await subscribe_queues(pipe.ledger, "default")
        assert (await pipe.relay.run_once()).published == n  # the window holds them all
    return ids


async def test_a_second_reconciler_does_nothing_and_says_so(
    settings: Settings, make_reconciler: Reconcilers
) -> None:
    first, second = await make_reconciler(), await make_reconciler()
    async with first.ledger.exclusive() as got:
        assert got
        counts = await second.run_once()
        assert not counts.acted
        assert "another reconciler holds the lock" in counts.line()
    assert (await second.run_once()).acted


async def test_stalled_delivery_is_published_again_with_a_growing_window(
    settings: Settings, make_reconciler: Reconcilers, ledger: PgLedger
) -> None:
    [task_id] = await _publish(settings, 1)
    assert _queue_depth(settings, purge=True) == 0  # the message is lost
    # Time moves only through the seam (backdate), so a slow machine cannot
    # carry a pass across a window's edge.
    reconciler = await make_reconciler(stall_s=30)
    assert (await reconciler.run_once()).republished == 0  # not stalled yet
    assert await ledger.backdate([task_id], "published_at", 31) == 1
    assert (await reconciler.run_once()).republished == 1
    assert _queue_depth(settings) == 1
    assert (await ledger.show(task_id))["publishes"] == 2
    # The window doubled: 60 s now.
    assert await ledger.backdate([task_id], "published_at", 31) == 1
    assert (await reconciler.run_once()).republished == 0
    assert await ledger.backdate([task_id], "published_at", 61) == 1
    assert (await reconciler.run_once()).republished == 1
    assert await ledger.whereabouts([task_id]) == {task_id: "published"}


async def test_pages_through_rows_by_id(settings: Settings, make_reconciler: Reconcilers) -> None:
    ids = await _publish(settings, 5)
    _queue_depth(settings, purge=True)
    await asyncio.sleep(0.25)
    counts = await (await make_reconciler(stall_s=0.2, page_size=2)).run_once()
    assert counts.republished == 5 and counts.pages == 3
    assert _queue_depth(settings) == len(ids)


async def test_a_worker_dead_with_several_tasks_costs_none_of_them_an_attempt(
    settings: Settings, make_reconciler: Reconcilers, ledger: PgLedger
) -> None:
    ids = enqueue_committed(settings, [TaskSpec("t.r", {}, max_attempts=1) for _ in range(3)])
    await ledger.claim([(i, 0) for i in ids], "gone:3", lease_s=0.1)
    await asyncio.sleep(0.2)
    alerts: list[Finished] = []
    counts = await (await make_reconciler(alert=alerts.append)).run_once()
    assert (counts.expired, counts.dead, counts.released) == (3, 0, 3)
    assert alerts == []
    for task_id in ids:
        row = await ledger.show(task_id)
        assert (row["status"], row["attempts"], row["suspect"]) == ("pending", 0, True)
        assert datetime.fromisoformat(row["run_at"]) <= datetime.now(UTC)  # due at once
    assert "3 tasks in flight; attempt 1 not charged" in row["last_error"]


async def test_overdue_pending_rows_are_published_when_no_relay_runs(
    settings: Settings, make_reconciler: Reconcilers, ledger: PgLedger
) -> None:
    [task_id] = enqueue_committed(settings, [TaskSpec("t.r", {})])
    await subscribe_queues(ledger, "default")  # a live window to publish into
    await asyncio.sleep(0.25)
    counts = await (await make_reconciler(stall_s=0.2)).run_once()
    assert counts.overdue_published == 1
    assert await ledger.whereabouts([task_id]) == {task_id: "published"}
    assert _queue_depth(settings) == 1


async def test_expired_lease_counts_as_an_attempt_then_ends_dead(
    settings: Settings, make_reconciler: Reconcilers, ledger: PgLedger
) -> None:
    [retried, buried] = enqueue_committed(
        settings,
        [
            TaskSpec("t.r", {}, max_attempts=3, retry=[60]),
            TaskSpec("t.r", {}, max_attempts=1),
        ],
    )
    # Two workers, each running one task alone, then dying.
    await ledger.claim([(retried, 0)], "gone:1", lease_s=0.1)
    await ledger.claim([(buried, 0)], "gone:2", lease_s=0.1)
    await asyncio.sleep(0.2)
    alerts: list[Finished] = []
    counts = await (await make_reconciler(alert=alerts.append)).run_once()
    assert (counts.expired, counts.dead, counts.released) == (2, 1, 0)
    again = await ledger.show(retried)
    assert (again["status"], again["attempts"], again["suspect"]) == ("pending", 1, False)
    assert "lease expired: worker gone:1" in again["last_error"]
    # Its backoff (60 s) applies.
    assert datetime.fromisoformat(again["run_at"]) > datetime.fromisoformat(again["started_at"])
    assert (await ledger.show(buried))["status"] == "dead"
    assert [a.id for a in alerts] == [buried]


def test_reconcile_command_prints_what_it_did(settings: Settings) -> None:
    result = ledgerq(settings, "reconcile", "--json")
    assert result.returncode == 0, result.stderr
    counts = json.loads(result.stdout)
    assert counts["acted"] is True and counts["republished"] == 0 and "elapsed_s" in counts
    bad = ledgerq(settings, "reconcile", "--queue-stall", "fast")
    assert bad.returncode == 64 and "expected QUEUE=SECONDS" in bad.stderr  # EX_USAGE
