"""The reconciler, one pass at a time (``run_once``), on the real services."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator

import pika
import pytest
from sqlalchemy import Engine

from ledgerq.consumers import Registry
from ledgerq.ledger import TaskSpec
from ledgerq.ledger.alerts import AlertHook, log_alert
from ledgerq.ledger.config import Settings
from ledgerq.ledger.db import async_engine, sync_engine
from ledgerq.ledger.maintenance import MaintenanceLedger
from ledgerq.ledger.store import AsyncLedger, FailOutcome
from ledgerq.ledger.topology import Topology
from ledgerq.relay.blocking import BlockingConfirmedPublisher
from ledgerq.relay.reconciler import Reconciler, ReconcilerConfig
from tests.harness import Pipeline, enqueue_committed, row, statuses
from tests.integration.test_cli import ledgerq


class Reconcilers:
    """Builds reconcilers for a test and closes them afterwards."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.made: list[tuple[Reconciler, Engine]] = []

    def __call__(
        self, alert: AlertHook = log_alert, stall_s: float = 180.0, page_size: int = 500
    ) -> Reconciler:
        engine = sync_engine(self.settings, "ledgerq-test-reconciler", pool_size=2)
        publisher = BlockingConfirmedPublisher(
            self.settings.amqp_url, Topology(self.settings.amqp_prefix)
        )
        reconciler = Reconciler(
            MaintenanceLedger(engine),
            publisher,
            ReconcilerConfig(stall_s=stall_s, page_size=page_size),
            alert,
        )
        self.made.append((reconciler, engine))
        return reconciler

    def close(self) -> None:
        for reconciler, engine in self.made:
            reconciler.publisher.close()
            engine.dispose()


@pytest.fixture
def make_reconciler(settings: Settings) -> Iterator[Reconcilers]:
    reconcilers = Reconcilers(settings)
    yield reconcilers
    reconcilers.close()


def _queue_depth(settings: Settings, purge: bool = False) -> int:
    conn = pika.BlockingConnection(pika.URLParameters(settings.amqp_url))
    try:
        channel = conn.channel()
        name = Topology(settings.amqp_prefix).queue("default")
        if purge:
            channel.queue_purge(name)
        return int(channel.queue_declare(name, passive=True).method.message_count or 0)
    finally:
        conn.close()


def _publish(settings: Settings, n: int) -> list[int]:
    ids = enqueue_committed(settings, [TaskSpec("t.r", {"i": i}) for i in range(n)])

    async def main() -> None:
        async with Pipeline(settings, Registry(), start_worker=False) as pipe:
            await pipe.relay.run_once()

    asyncio.run(main())
    return ids


def test_a_second_reconciler_does_nothing_and_says_so(
    settings: Settings, make_reconciler: Reconcilers
) -> None:
    first, second = make_reconciler(), make_reconciler()
    with first.ledger.exclusive() as got:
        assert got
        counts = second.run_once()
        assert not counts.acted
        assert "another reconciler holds the lock" in counts.line()
    assert second.run_once().acted


def test_stalled_delivery_is_published_again_with_a_growing_window(
    settings: Settings, make_reconciler: Reconcilers
) -> None:
    [task_id] = _publish(settings, 1)
    assert _queue_depth(settings, purge=True) == 0  # the message is lost
    reconciler = make_reconciler(stall_s=0.3)
    assert reconciler.run_once().republished == 0  # not stalled yet
    time.sleep(0.35)
    assert reconciler.run_once().republished == 1
    assert _queue_depth(settings) == 1
    assert row(settings, task_id)["publishes"] == 2
    time.sleep(0.35)  # the window doubled: 0.6 s now
    assert reconciler.run_once().republished == 0
    time.sleep(0.35)
    assert reconciler.run_once().republished == 1
    assert statuses(settings, [task_id]) == {task_id: "published"}


def test_pages_through_rows_by_id(settings: Settings, make_reconciler: Reconcilers) -> None:
    ids = _publish(settings, 5)
    _queue_depth(settings, purge=True)
    time.sleep(0.25)
    counts = make_reconciler(stall_s=0.2, page_size=2).run_once()
    assert counts.republished == 5 and counts.pages == 3
    assert _queue_depth(settings) == len(ids)


def test_overdue_pending_rows_are_published_when_no_relay_runs(
    settings: Settings, make_reconciler: Reconcilers
) -> None:
    [task_id] = enqueue_committed(settings, [TaskSpec("t.r", {})])
    time.sleep(0.25)
    counts = make_reconciler(stall_s=0.2).run_once()
    assert counts.overdue_published == 1
    assert statuses(settings, [task_id]) == {task_id: "published"}
    assert _queue_depth(settings) == 1


def test_expired_lease_counts_as_an_attempt_then_ends_dead(
    settings: Settings, make_reconciler: Reconcilers
) -> None:
    [retried, buried] = enqueue_committed(
        settings,
        [
            TaskSpec("t.r", {}, max_attempts=3, retry=[60]),
            TaskSpec("t.r", {}, max_attempts=1),
        ],
    )

    async def claim_and_vanish() -> None:  # a worker that claims, then dies
        engine = async_engine(settings, "ledgerq-test-claim", pool_size=1)
        await AsyncLedger(engine).claim([(retried, 0), (buried, 0)], "gone:1", lease_s=0.1)
        await engine.dispose()

    asyncio.run(claim_and_vanish())
    time.sleep(0.2)
    alerts: list[FailOutcome] = []
    counts = make_reconciler(alert=alerts.append).run_once()
    assert (counts.expired, counts.dead) == (2, 1)
    again = row(settings, retried)
    assert (again["status"], again["attempts"]) == ("pending", 1)
    assert "lease expired: worker gone:1" in again["last_error"]
    assert again["run_at"] > again["started_at"]  # its backoff (60 s) applies
    assert row(settings, buried)["status"] == "dead"
    assert [a.id for a in alerts] == [buried]


def test_reconcile_command_prints_what_it_did(settings: Settings) -> None:
    result = ledgerq(settings, "reconcile", "--json")
    assert result.returncode == 0, result.stderr
    counts = json.loads(result.stdout)
    assert counts["acted"] is True and counts["republished"] == 0 and "elapsed_s" in counts
    bad = ledgerq(settings, "reconcile", "--queue-stall", "fast")
    assert bad.returncode == 2 and "expected QUEUE=SECONDS" in bad.stderr
