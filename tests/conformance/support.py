"""What the conformance tests share: the names they use, and the steps a relay
and a worker take, written against the protocols only (never an implementation)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from ledgerq.ledger.model import ClaimedTask
from ledgerq.ledger.protocol import RelayLedger, RoutingLedger, WorkerLedger
from ledgerq.ledger.routing import Subscription

WORKER = "conformance-worker"
SETTLE_S = 60.0
LEASE_S = 30.0
#: The live whole-queue subscriber every test starts with (conftest's ``ledger``).
SUBSCRIBER = "conformance-subscriber"
UNKNOWN_ID = 10**12

Enqueue = Callable[..., list[int]]


async def window(
    ledger: RoutingLedger, capacity: int, *queues: str, kinds: frozenset[str] | None = None
) -> None:
    """Make ``SUBSCRIBER``'s live subscriptions these: each of ``queues`` ("default"
    and "other" if none) whole, with room for ``capacity`` tasks; or, with
    ``kinds=...``, only those kinds of it (a route of its own)."""
    await ledger.subscribe(
        SUBSCRIBER,
        [Subscription(q, kinds, capacity=capacity) for q in queues or ("default", "other")],
        600.0,
    )


def when(value: Any) -> datetime:
    """A timestamp as ``show`` returns it (ISO text)."""
    assert isinstance(value, str), value
    return datetime.fromisoformat(value)


async def claim_one(ledger: WorkerLedger, task_id: int, epoch: int = 0) -> ClaimedTask:
    [won] = await ledger.claim([(task_id, epoch)], WORKER, LEASE_S)
    return won


def databases(ledger: Any) -> list[RelayLedger]:
    """The one-database ledgers under ``ledger``: a sharded ledger's shards (each
    shard has relays of its own), or the ledger itself."""
    return list(getattr(ledger, "shards", None) or [ledger])


async def publish(ledger: Any, ids: Sequence[int] | None = None) -> set[int]:
    """The relay's step, on each database of ``ledger``: lock due rows and mark them
    published (all, or ``ids``)."""
    published: set[int] = set()
    for relay in databases(ledger):
        async with relay.publish_batch(100) as batch:
            rows = [r for r in batch.rows if ids is None or r.id in ids]
            published |= await batch.mark_published(rows)
    return published
