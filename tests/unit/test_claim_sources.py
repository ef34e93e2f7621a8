"""The worker's claim sources (consumers/sources.py) and the composition root's
choice among them (compose/worker.py ``claim_source``), with no broker and no
database: a consume that records what it was asked, and a ledger never called."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import cast

import pytest

from ledgerq.broker.base import OnDelivery
from ledgerq.compose.worker import claim_source
from ledgerq.consumers.acker import Acker
from ledgerq.consumers.claimer import Slots
from ledgerq.consumers.direct import DirectConfig, FallbackConfig
from ledgerq.consumers.sources import (
    BrokerSource,
    ClaimSource,
    DirectSource,
    FallbackSource,
    Feed,
)
from ledgerq.consumers.worker import WorkerConfig
from ledgerq.core.config import Settings
from ledgerq.hooks import NO_HOOKS
from ledgerq.ledger.protocol import DirectLedger, WorkerLedger


class Consumed:
    """One consume call: its queues, and whether it was cancelled."""

    def __init__(self, queues: Sequence[str], log: list[str]) -> None:
        self.queues = list(queues)
        self.log = log

    async def cancel(self) -> None:
        self.log.append(f"cancel {','.join(self.queues)}")


class Broker:
    def __init__(self) -> None:
        self.log: list[str] = []
        self.up = True

    async def consume(self, queues: Sequence[str], prefetch: int, into: OnDelivery) -> Consumed:
        self.log.append(f"consume {','.join(queues)} prefetch {prefetch}")
        return Consumed(queues, self.log)


def feed() -> Feed:
    return Feed(
        cast(WorkerLedger, object()),
        Acker(max_waiting=8),
        Slots(4),
        lambda claimed: None,
        NO_HOOKS,
        worker_id="w:1",
        queues=("default",),
        lease_s=60,
        max_batch=10,
        prefetch=8,
        concurrency=4,
        kinds=frozenset({"k"}),
        lease_kinds=frozenset(),
    )


def choose(
    config: WorkerConfig, broker: Broker | None, fallback: FallbackConfig | None
) -> tuple[ClaimSource, bool]:
    claims = cast(DirectLedger, object())
    wired = None if broker is None else (broker.consume, lambda: broker.up)
    factory, listens = claim_source(
        Settings(), config, wired, claims, asyncio.Event(), None, fallback
    )
    return factory(feed()), listens


@pytest.mark.parametrize(
    ("config", "broker", "fallback", "kind", "listens"),
    [
        (WorkerConfig(), False, FallbackConfig(), DirectSource, True),
        (WorkerConfig(), True, FallbackConfig(), FallbackSource, True),
        (WorkerConfig(), True, None, BrokerSource, False),
        (WorkerConfig(kinds=frozenset({"k"})), True, FallbackConfig(), BrokerSource, False),
        (WorkerConfig(shards=frozenset({0})), True, FallbackConfig(), BrokerSource, False),
    ],
)
def test_the_composition_root_chooses_one_source(
    config: WorkerConfig, broker: bool, fallback: FallbackConfig | None, kind: type, listens: bool
) -> None:
    source, listening = choose(config, Broker() if broker else None, fallback)
    assert source.direct is (kind is DirectSource)
    assert source.reshardable is (kind is BrokerSource)
    assert type(source) is kind and listening is listens


async def test_a_broker_source_announces_only_once_its_queues_are_consumed() -> None:
    broker = Broker()
    source = BrokerSource(feed(), broker.consume)

    async def announce() -> None:
        broker.log.append("announce")

    await source.start(["q.a"], announce)
    assert source.running
    await source.resubscribe(["q.b"], announce)  # the new consumed first, the old cancelled last
    await source.stop_intake()
    await source.stop()
    assert broker.log == [
        "consume q.a prefetch 8",
        "announce",
        "consume q.b prefetch 8",
        "announce",
        "cancel q.a",
        "cancel q.b",
    ]


async def test_a_direct_source_announces_before_it_claims_and_cannot_reshard() -> None:
    source = DirectSource(
        feed(), cast(DirectLedger, object()), asyncio.Event(), DirectConfig(poll_s=0.05)
    )
    seen: list[bool] = []

    async def announce() -> None:
        seen.append(source.running)

    source.claimer.slots.take(4)  # no free slot: the loop waits, the ledger is never asked
    await source.start(["default"], announce)
    assert seen == [False] and source.running
    with pytest.raises(ValueError, match="routes through RabbitMQ"):
        await source.resubscribe(["q.b"], announce)
    await source.stop_intake()
    await source.stop()
    assert not source.running and source.claimed == 0


async def test_a_fallback_source_stops_watching_before_it_stops_consuming() -> None:
    broker = Broker()
    source = FallbackSource(
        feed(),
        broker.consume,
        cast(DirectLedger, object()),
        asyncio.Event(),
        DirectConfig(),
        lambda: broker.up,
        FallbackConfig(after_s=60, check_s=0.01),
    )

    async def announce() -> None:
        broker.log.append("announce")

    await source.start(["default"], announce)
    broker.up = False  # down, but not for after_s: no direct claims
    await source.stop_intake()
    await source.stop()
    assert not source.claimer.running and source.fallback.fallbacks == 0
    assert broker.log == ["consume default prefetch 8", "announce", "cancel default"]
