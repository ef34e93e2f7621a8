"""The worker: deliveries in, claims, handlers, terminal statuses, then acks.

It is made of parts, one job each, that hand typed values along
(:mod:`.handoff`)::

    broker ──Delivery──▶ Intake ──Arrival──▶ Claimer ──Claimed──▶ Dispatcher
                                                │                     │
                                   (skipped: acked at once)        Ended
                                                                      ▼
                              Acker ◀──deliveries, after commit── Finisher

* :class:`~.intake.Intake` parses each delivery, rejects what names no task;
* :class:`~.claimer.Claimer` claims arrivals into free handler slots, one
  compare-and-set per batch, and acks the deliveries whose claim lost;
* :class:`~.dispatcher.Dispatcher` runs each claimed task's handler
  (:class:`~.execute.TaskRunner`, or :class:`~.group.GroupCommitter`);
* :class:`~.finisher.Finisher` writes outcomes in one round trip per batch and
  only then hands the deliveries to the :class:`~.acker.Acker`;
* :class:`~.leases.Leases` heartbeats every task from claim to finish.

Where claims come from is one :class:`~.sources.ClaimSource`, chosen by the
composition root: the broker (Intake and Claimer, as drawn), the ledger itself
(``ledgerq worker --direct``: a :class:`~.direct.DirectClaimer` claims due tasks
straight into the same slots and dispatcher, and the Acker stays idle), or the
broker with a fallback to the ledger while it is down (:mod:`.sources`). The
worker builds the pipeline's entry (:class:`~.sources.Feed`) and the source is
bound to it. The cross-cutting observers (alerts, fault probes, metrics) come
as one :class:`~ledgerq.hooks.Hooks`.

Acks go to the channel the delivery came on; if that channel died the ack is
dropped, never sent on a new channel, and the broker's redelivery is skipped
because the row moved on. :meth:`Worker.stop` shuts the parts down in the
order that loses nothing: stop consuming, finish the claim in flight, give
handlers the grace, write and ack every outcome, then stop heartbeating.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from sqlalchemy import Engine
from sqlalchemy.ext.asyncio import AsyncEngine

from ledgerq.consumers.acker import Acker
from ledgerq.consumers.batch import Batcher
from ledgerq.consumers.claimer import Slots
from ledgerq.consumers.dispatcher import Dispatcher
from ledgerq.consumers.execute import TaskRunner
from ledgerq.consumers.finisher import Finisher
from ledgerq.consumers.group import GroupCommitter
from ledgerq.consumers.hung import HungThreads
from ledgerq.consumers.leases import Leases
from ledgerq.consumers.liveness import Liveness
from ledgerq.consumers.registry import Registry
from ledgerq.consumers.shard_pool import ShardPool
from ledgerq.consumers.sources import Feed, SourceFactory
from ledgerq.consumers.subscriber import Subscriber
from ledgerq.consumers.worker_config import WorkerConfig
from ledgerq.hooks import NO_HOOKS, Hooks
from ledgerq.ledger.protocol import RoutingLedger, WorkerLedger
from ledgerq.ledger.routing import Subscription

__all__ = ["Worker", "WorkerConfig", "WorkerCounts"]

log = logging.getLogger("ledgerq.worker")


@dataclass(frozen=True)
class WorkerCounts:
    received: int
    claimed: int
    skipped: int
    succeeded: int
    retried: int
    dead: int
    rejected: int
    #: Ended ``cancelled`` (an operator's request, or the handler raised Cancelled).
    cancelled: int = 0


class Worker:
    def __init__(
        self,
        ledger: WorkerLedger,
        registry: Registry,
        config: WorkerConfig,
        *,
        source: SourceFactory,
        sync_engine: Engine | None,
        async_engine: AsyncEngine,
        hooks: Hooks = NO_HOOKS,
        shard_engines: Sequence[tuple[Engine | None, AsyncEngine]] = (),
        routing: RoutingLedger | None = None,
        windows: bool = True,
    ) -> None:
        """``source``: where its claims come from (:mod:`.sources`), bound to the
        pipeline built here. ``shard_engines``: with ledger shards, the handlers'
        (sync, async) engines of each shard, so a task's ``ctx.session`` is on its
        own shard's database; batch windows are then off (a window is one
        transaction, in one database). ``routing``: where the worker registers what
        it serves (None: nowhere, so its queues are published to as if no worker
        had subscribed: unit tests). ``windows``: batched commit for ``ctx.session``
        handlers (False: each in a transaction of its own; the MySQL ledger has no
        batched window yet)."""
        self.config = config
        self.hooks = hooks
        self._stopping: asyncio.Task[None] | None = None
        self._pool = ThreadPoolExecutor(config.concurrency, thread_name_prefix="ledgerq-handler")
        self.acker = Acker(max_waiting=max(8, config.effective_prefetch // 4))
        self.leases = Leases(ledger, config.lease_s, config.heartbeat_s)
        self.finisher = Finisher(
            ledger,
            self.acker,
            self.leases,
            max_batch=config.max_batch,
            grace_s=config.grace_s,
            alert=hooks.alert,
            probe=hooks.probe,
            observer=hooks.observer,
        )
        self.runner = TaskRunner(
            registry,
            config.worker_id,
            self._pool,
            sync_engine,
            async_engine,
            on_context=self.leases.attach,
            default_timeout_s=config.default_timeout_s,
            probe=hooks.probe,
            observer=hooks.observer,
            shard_engines=shard_engines,
            hung=HungThreads(config.hang_limit_s),
        )
        slots = Slots(config.concurrency)
        group = GroupCommitter(
            async_engine,
            config.worker_id,
            config.default_timeout_s,
            shard_engines=[engines[1] for engines in shard_engines],
        )
        if shard_engines or not windows:
            self.batcher = Batcher(self.runner, config.batch, None, None)
        else:
            self.batcher = Batcher(self.runner, config.batch, sync_engine, async_engine)
        self.dispatcher = Dispatcher(
            registry, self.runner, group, self.batcher, slots, self.leases, self.finisher.put
        )
        self.source = source(
            Feed(
                ledger,
                self.acker,
                slots,
                self.dispatcher.start,
                hooks,
                worker_id=config.worker_id,
                queues=config.queues,
                lease_s=config.lease_s,
                max_batch=config.max_batch,
                prefetch=config.effective_prefetch,
                concurrency=config.concurrency,
                kinds=config.serves(registry.kinds()),
                lease_kinds=frozenset(h.kind for h in registry if h.lease),
            )
        )
        self.liveness = (
            None if routing is None else Liveness(routing, config.worker_id, config.liveness_s)
        )
        self._kinds = registry.kinds()
        served = config.serves(self._kinds)
        #: It runs a kind with sticky_retry: it consumes a personal route too.
        self._sticky = any(h.sticky_retry_s is not None for h in registry if h.kind in served)
        self.subscriptions = config.subscriptions(self._kinds, sticky=self._sticky)
        self.subscriber = (
            None
            if routing is None
            else Subscriber(
                routing,
                config.worker_id,
                self.subscriptions,
                ttl_s=config.lease_s,
                every_s=config.heartbeat_s,
                direct=self.source.direct,
            )
        )
        self.pool = (
            None
            if routing is None or config.auto_shards is None
            else ShardPool(
                routing,
                config.worker_id,
                config.pool_tag,
                config.auto_shards,
                self.reshard,
                every_s=config.pool_refresh_s,
            )
        )
        if config.auto_shards is not None and not self.source.reshardable:
            raise ValueError("--shards auto routes through RabbitMQ: no direct claims")

    @property
    def counts(self) -> WorkerCounts:
        return WorkerCounts(
            received=self.source.received,
            claimed=self.source.claimed,
            skipped=self.source.skipped,
            succeeded=self.finisher.succeeded,
            retried=self.finisher.retried,
            dead=self.finisher.dead,
            rejected=self.source.rejected,
            cancelled=self.finisher.cancelled,
        )

    @property
    def consuming(self) -> bool:
        """Whether deliveries are coming in (started, and not stopping)."""
        return self.source.running and not self.finisher.closing

    @property
    def threads_running(self) -> int:
        """Sync handlers whose thread has not returned (one past its timeout included)."""
        return self.runner.threads_running

    async def start(self) -> None:
        if self.liveness is not None:  # first: its tasks are rescued if it dies from here on
            await self.liveness.start()
        self.finisher.start()
        self.leases.start()
        if self.pool is not None:  # after the first beat: it counts itself in
            self.pool.shards = await self.pool.compute()
            self._subscribe(self.pool.shards)
        await self.source.start(_broker_names(self.subscriptions), self._announce)
        if self.pool is not None:
            await self.pool.start()

    async def _announce(self) -> None:
        """Register what it serves (the source says when: :mod:`.sources`)."""
        if self.subscriber is not None:
            await self.subscriber.start()

    async def stop(self) -> None:
        """Stop consuming and claiming; let in-flight handlers finish within the grace;
        write their outcomes; ack. Unclaimed deliveries stay unacked (the broker
        requeues them when the channel closes). Nothing in it waits for the broker or
        the database beyond the grace: with the broker away the consumers are dropped
        and acks of deliveries from the lost channel skipped; with the database away
        outcomes are retried until the grace is over, then given back unwritten
        (:attr:`Finisher.unwritten`). A second call waits for the first
        (the lanes of one process are stopped together, then each closes), and a
        caller cancelled while it waits does not cancel the stop."""
        if self._stopping is None:
            self._stopping = asyncio.create_task(self._stop(), name="ledgerq-worker-stop")
        await asyncio.shield(self._stopping)

    def _subscribe(self, shards: frozenset[int]) -> None:
        self.subscriptions = self.config.subscriptions(self._kinds, shards, sticky=self._sticky)
        if self.subscriber is not None:
            self.subscriber.subscriptions = self.subscriptions

    async def reshard(self, shards: frozenset[int]) -> None:
        """Serve ``shards`` from now on (``--shards auto``, consumers.shard_pool):
        consume the new route's broker queue (declared first), rewrite the
        subscriptions (the old route's row goes at once, and the reconciler
        returns what was published there to pending), then cancel the old
        consumers; deliveries already received from them are claimed or skipped
        as ever and acked on their channel. Raises if the broker or the database
        refuses: nothing is switched then but the consumers (the next refresh
        tries again)."""
        if self.finisher.closing:
            return

        async def announce() -> None:
            self._subscribe(shards)
            if self.subscriber is not None:
                await self.subscriber.beat()

        subscriptions = self.config.subscriptions(self._kinds, shards, sticky=self._sticky)
        await self.source.resubscribe(_broker_names(subscriptions), announce)

    async def _stop(self) -> None:
        self.finisher.stopping()
        if self.pool is not None:  # first: no switch while stopping
            await self.pool.stop()
        await self.source.stop_intake()  # never waits for a broker that is away
        if self.subscriber is not None:
            await self.subscriber.stop()
        await self.source.stop()  # the claim in flight: its tasks drain with the others
        await self.dispatcher.drain(self.config.grace_s)
        await self.batcher.close()
        await self.finisher.close()  # every outcome written and acked
        await self.leases.stop()
        if self.liveness is not None:
            await self.liveness.stop()
        self._pool.shutdown(wait=False, cancel_futures=True)
        log.info("worker stopped: %s (%d acks sent)", self.counts, self.acker.acks_sent)


def _broker_names(subscriptions: Sequence[Subscription]) -> list[str]:
    """The broker queues a worker consumes: each subscription's route, and its own."""
    return [name for s in subscriptions for name in s.broker_names]
