"""Where a worker's claims come from, behind one protocol: :class:`ClaimSource`.

The composition root (``ledgerq.compose.worker``) chooses one of three and hands
the worker a :data:`SourceFactory`; the worker builds its pipeline's entry
(:class:`Feed`: the free slots, the dispatcher's start, the acker) and the
factory binds the source to it:

* :class:`BrokerSource`, the default: RabbitMQ deliveries into
  :class:`~.intake.Intake`, claimed by the :class:`~.claimer.Claimer`, losers
  acked at once. It alone can follow ``--shards auto`` (:meth:`resubscribe`);
* :class:`DirectSource` (``ledgerq worker --direct``): no broker at all; a
  :class:`~.direct.DirectClaimer` claims due rows straight from the ledger,
  woken by LISTEN; the worker's subscriptions say ``direct`` so no relay
  publishes its queues;
* :class:`FallbackSource` (broker-down mode): a broker source, and beside it a
  :class:`~.direct.Fallback` that runs a direct claimer while the broker
  connection has been down ``after_s`` and stops it when the broker is back.

Contract of every source: :meth:`~ClaimSource.start` begins taking work in and
calls ``announce`` (the worker's subscriber: its routes registered) once it is
safe for relays to publish to it: a broker source after its queues are
declared and consumed, so a route is never published to nothing; a direct
source before it claims, so no relay publishes what it serves meanwhile.
Stopping is in two steps so the worker can unregister in between:
:meth:`~ClaimSource.stop_intake` takes no more in (consumers cancelled, without
waiting for a broker that is away; the fallback watch ended, so a broker going
down now starts no direct claims), then :meth:`~ClaimSource.stop` finishes the
claim in flight (its tasks are dispatched and drained with the others) and
claims no more.

Races between the paths are the ledger's to settle, not the source's: the
direct claim takes only ``pending`` rows and bumps the epoch, so a message
published for a row claimed directly claims nothing (docs/guarantees.md,
broker-down mode; :mod:`.direct`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from ledgerq.broker.base import Consumption, OnDelivery
from ledgerq.consumers.acker import Acker
from ledgerq.consumers.claimer import Claimer, Slots
from ledgerq.consumers.direct import DirectClaimer, DirectConfig, Fallback, FallbackConfig
from ledgerq.consumers.handoff import Claimed
from ledgerq.consumers.intake import Intake
from ledgerq.hooks import Hooks
from ledgerq.ledger.protocol import DirectLedger, WorkerLedger

log = logging.getLogger("ledgerq.worker")

#: Starts consuming ``queues`` with ``prefetch`` into ``on_delivery`` (the broker adapter's).
Consume = Callable[[Sequence[str], int, OnDelivery], Awaitable[Consumption]]
#: Registers the worker's routes (its subscriber's first beat).
Announce = Callable[[], Awaitable[None]]


@dataclass(frozen=True)
class Feed:
    """The entry of a worker's pipeline, which a claim source feeds."""

    ledger: WorkerLedger
    acker: Acker
    slots: Slots
    #: The dispatcher's start: claimed tasks to run.
    start: Callable[[list[Claimed]], None]
    hooks: Hooks
    worker_id: str
    queues: tuple[str, ...]
    lease_s: float
    max_batch: int
    prefetch: int
    concurrency: int
    #: The kinds it serves (handlers, narrowed by ``--kinds``).
    kinds: frozenset[str]
    #: The kinds that run in lease mode (acked at claim).
    lease_kinds: frozenset[str]


class ClaimSource(Protocol):
    """Claims into the worker's slots (see the module docstring)."""

    #: Whether the worker's subscriptions say ``direct`` (no broker queue).
    direct: bool
    #: Whether it consumes broker queues by name only, so it can follow ``--shards auto``.
    reshardable: bool

    @property
    def running(self) -> bool:
        """Whether work is coming in (started, not stopped)."""
        ...

    @property
    def received(self) -> int: ...
    @property
    def claimed(self) -> int: ...
    @property
    def skipped(self) -> int: ...
    @property
    def rejected(self) -> int: ...

    async def start(self, queues: Sequence[str], announce: Announce) -> None:
        """Take work in from the broker ``queues`` (or the ledger); ``announce`` once safe."""
        ...

    async def resubscribe(self, queues: Sequence[str], announce: Announce) -> None:
        """Consume ``queues`` instead; ``announce`` the new routes before the old
        consumers are cancelled (``--shards auto``)."""
        ...

    async def stop_intake(self) -> None:
        """Take nothing more in; never waits for a broker that is away."""
        ...

    async def stop(self) -> None:
        """Finish the claim in flight, then claim no more."""
        ...


#: What the composition root chooses: a source, once the worker's feed exists.
SourceFactory = Callable[[Feed], ClaimSource]


class BrokerSource:
    direct = False
    reshardable = True

    def __init__(self, feed: Feed, consume: Consume) -> None:
        self.feed = feed
        self.claimer = Claimer(
            feed.ledger,
            feed.acker,
            feed.slots,
            feed.start,
            worker_id=feed.worker_id,
            lease_s=feed.lease_s,
            max_batch=feed.max_batch,
            observer=feed.hooks.observer,
            lease_kinds=feed.lease_kinds,
        )
        self.intake = Intake(feed.acker, self.claimer.offer, feed.hooks.probe)
        self._consume = consume
        self._consumption: Consumption | None = None

    @property
    def running(self) -> bool:
        return self._consumption is not None

    @property
    def received(self) -> int:
        return self.intake.received

    @property
    def claimed(self) -> int:
        return self.claimer.claimed

    @property
    def skipped(self) -> int:
        return self.claimer.skipped

    @property
    def rejected(self) -> int:
        return self.intake.rejected

    async def start(self, queues: Sequence[str], announce: Announce) -> None:
        self.claimer.start_loop()
        self._consumption = await self._consume(queues, self.feed.prefetch, self.intake)
        await announce()  # after the declaration: never routed to nothing
        log.info(
            "worker %s consuming %s (concurrency %d, prefetch %d)",
            self.feed.worker_id,
            ", ".join(queues),
            self.feed.concurrency,
            self.feed.prefetch,
        )

    async def resubscribe(self, queues: Sequence[str], announce: Announce) -> None:
        """Declared and consumed first; the deliveries already received from the old
        consumers are claimed or skipped as ever and acked on their channel."""
        if self._consumption is None:
            return
        consumption = await self._consume(queues, self.feed.prefetch, self.intake)
        old, self._consumption = self._consumption, consumption
        try:
            await announce()
        finally:
            await old.cancel()

    async def stop_intake(self) -> None:
        if self._consumption is not None:  # never waits for a broker that is away
            await self._consumption.cancel()

    async def stop(self) -> None:
        await self.claimer.stop()


def _direct_claimer(
    feed: Feed, ledger: DirectLedger, wake: asyncio.Event, config: DirectConfig
) -> DirectClaimer:
    return DirectClaimer(
        ledger,
        feed.slots,
        feed.start,
        wake,
        queues=feed.queues,
        worker_id=feed.worker_id,
        lease_s=feed.lease_s,
        config=config,
        observer=feed.hooks.observer,
        kinds=feed.kinds,
    )


class DirectSource:
    direct = True
    reshardable = False
    received = skipped = rejected = 0

    def __init__(
        self, feed: Feed, ledger: DirectLedger, wake: asyncio.Event, config: DirectConfig
    ) -> None:
        """``wake`` is set on every enqueue notification
        (:class:`~ledgerq.ledger.pg.notify.Wakeup`)."""
        self.claimer = _direct_claimer(feed, ledger, wake, config)

    @property
    def running(self) -> bool:
        return self.claimer.running

    @property
    def claimed(self) -> int:
        return self.claimer.claimed

    async def start(self, queues: Sequence[str], announce: Announce) -> None:
        await announce()  # first: no relay publishes these queues now
        self.claimer.start_loop()

    async def resubscribe(self, queues: Sequence[str], announce: Announce) -> None:
        raise ValueError("--shards auto routes through RabbitMQ: no direct claims")

    async def stop_intake(self) -> None:
        return None

    async def stop(self) -> None:
        await self.claimer.stop()


class FallbackSource:
    direct = False
    reshardable = False

    def __init__(
        self,
        feed: Feed,
        consume: Consume,
        ledger: DirectLedger,
        wake: asyncio.Event,
        config: DirectConfig,
        broker_up: Callable[[], bool],
        fallback: FallbackConfig,
    ) -> None:
        self.broker = BrokerSource(feed, consume)
        self.claimer = _direct_claimer(feed, ledger, wake, config)
        self.fallback = Fallback(self.claimer, broker_up, fallback)

    @property
    def running(self) -> bool:
        return self.broker.running or self.claimer.running

    @property
    def received(self) -> int:
        return self.broker.received

    @property
    def claimed(self) -> int:
        return self.broker.claimed + self.claimer.claimed

    @property
    def skipped(self) -> int:
        return self.broker.skipped

    @property
    def rejected(self) -> int:
        return self.broker.rejected

    async def start(self, queues: Sequence[str], announce: Announce) -> None:
        await self.broker.start(queues, announce)
        self.fallback.start()

    async def resubscribe(self, queues: Sequence[str], announce: Announce) -> None:
        raise ValueError("--shards auto routes through RabbitMQ: no direct claims")

    async def stop_intake(self) -> None:
        await self.fallback.stop()  # first: a broker down now must not start direct claims
        await self.broker.stop_intake()

    async def stop(self) -> None:
        await self.broker.stop()
        await self.claimer.stop()
