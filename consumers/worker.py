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

With ``direct`` (``ledgerq worker --direct``) there is no broker: a
:class:`~.direct.DirectClaimer` claims due tasks straight from the ledger into
the same slots and dispatcher, and Intake, Claimer and Acker stay idle
(:mod:`.direct`).

Acks go to the channel the delivery came on; if that channel died the ack is
dropped, never sent on a new channel, and the broker's redelivery is skipped
because the row moved on. :meth:`Worker.stop` shuts the parts down in the
order that loses nothing: stop consuming, finish the claim in flight, give
handlers the grace, write and ack every outcome, then stop heartbeating.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import secrets
import socket
from collections.abc import Awaitable, Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from sqlalchemy import Engine
from sqlalchemy.ext.asyncio import AsyncEngine

from ledgerq.consumers.acker import Acker
from ledgerq.consumers.batch import BatchConfig, Batcher
from ledgerq.consumers.claimer import Claimer, Slots
from ledgerq.consumers.direct import DirectClaimer, DirectConfig, Fallback, FallbackConfig
from ledgerq.consumers.dispatcher import Dispatcher
from ledgerq.consumers.execute import TaskRunner
from ledgerq.consumers.finisher import Finisher
from ledgerq.consumers.group import GroupCommitter
from ledgerq.consumers.hung import HungThreads
from ledgerq.consumers.intake import Intake
from ledgerq.consumers.leases import Leases
from ledgerq.consumers.liveness import Liveness
from ledgerq.consumers.registry import Registry
from ledgerq.consumers.shard_pool import REFRESH_S, ShardPool
from ledgerq.consumers.subscriber import Subscriber
from ledgerq.ledger.alerts import AlertHook, log_alert
from ledgerq.ledger.observer import NO_OBSERVER, Observer
from ledgerq.ledger.protocol import DirectLedger, RoutingLedger, WorkerLedger
from ledgerq.ledger.routing import Subscription
from ledgerq.ledger.sharding import MAX_SHARDS
from ledgerq.ledger.validation import check_name
from ledgerq.relay.broker.base import Consumption, OnDelivery
from ledgerq.relay.probes import Probe, no_probe

log = logging.getLogger("ledgerq.worker")

#: Starts consuming ``queues`` with ``prefetch`` into ``on_delivery`` (the broker adapter's).
Consume = Callable[[Sequence[str], int, OnDelivery], Awaitable[Consumption]]


@dataclass(frozen=True)
class WorkerConfig:
    queues: tuple[str, ...] = ("default",)
    #: The kinds of those queues this worker serves (``--kinds``), of those its
    #: registry has handlers for; None: all of those. Routed by RabbitMQ, not
    #: filtered here: see :mod:`ledgerq.ledger.routing`.
    kinds: frozenset[str] | None = None
    #: The shards it serves (``--shards``); None: all.
    shards: frozenset[int] | None = None
    #: ``--shards auto``: the shard count (LEDGERQ_SHARDS) the live workers of its
    #: pool split among themselves (consumers.shard_pool); None: static ``shards``.
    auto_shards: int | None = None
    #: With ``auto_shards``: seconds between two reads of the pool's members.
    pool_refresh_s: float = REFRESH_S
    #: Handlers running at once (async tasks on the loop, or threads for sync ones).
    concurrency: int = 100
    #: Unacked deliveries the broker may push; 0 means twice the concurrency.
    prefetch: int = 0
    #: Connections handlers' ``ctx.session`` may hold at once (per kind: sync/async).
    db_pool: int = 10
    lease_s: float = 60.0
    heartbeat_s: float = 15.0
    #: Liveness beats stopped this long (while other workers' went on): the worker
    #: is presumed dead and its running tasks rescued (consumers.liveness).
    liveness_s: float = 5.0
    #: On SIGTERM, how long in-flight handlers get to finish.
    grace_s: float = 30.0
    #: A handler with no timeout of its own (task or @task option) gets this one,
    #: so a task that always hangs still ends ``dead`` after its attempts.
    default_timeout_s: float | None = 1800.0
    #: A sync handler's thread still running this long past its timeout ends the
    #: worker process (exit 70, crash-only), so that its retry never overlaps it
    #: (consumers.hung). Until then the attempt keeps its lease and its retry waits.
    hang_limit_s: float = 60.0
    max_batch: int = 500
    #: Batched commit for handlers that write through ``ctx.session`` (consumers.batch).
    batch: BatchConfig = field(default_factory=BatchConfig)
    #: Unique per process start (a restarted container often has the same host
    #: name and pid 1): the reconciler counts a dead worker's tasks by this id.
    worker_id: str = field(
        default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
    )

    def __post_init__(self) -> None:
        if not self.queues:
            raise ValueError("a worker needs at least one queue")
        if not 1 <= self.concurrency <= 10_000:
            raise ValueError(f"concurrency must be 1..10000, got {self.concurrency}")
        if not 1 <= self.db_pool <= 1000:
            raise ValueError(f"db_pool must be 1..1000, got {self.db_pool}")
        if self.prefetch < 0:
            raise ValueError(f"prefetch must be >= 0, got {self.prefetch}")
        if not 0 < self.heartbeat_s < self.lease_s or self.liveness_s <= 0:
            raise ValueError(
                "heartbeat_s must be positive and shorter than lease_s, and liveness_s positive"
            )
        if self.grace_s < 0 or self.hang_limit_s <= 0:
            raise ValueError("grace_s must be >= 0 and hang_limit_s positive")
        if self.default_timeout_s is not None and self.default_timeout_s <= 0:
            raise ValueError("default_timeout_s must be positive (or None for no limit)")
        for name in self.queues:
            check_name(name, "queue")
        if frozenset() in (self.kinds, self.shards):
            raise ValueError("kinds and shards, when given, must name at least one each")
        self._join_pool()

    def _join_pool(self) -> None:
        """``--shards auto``: check, and end the worker id with the pool's tag."""
        if self.auto_shards is None:
            return
        if self.shards is not None or not 1 <= self.auto_shards <= MAX_SHARDS:
            raise ValueError(f"auto shards: a shard count of 1..{MAX_SHARDS} and no static shards")
        if self.pool_refresh_s <= 0:
            raise ValueError("pool_refresh_s must be positive")
        if not self.worker_id.endswith(self.pool_tag):  # the pool is read from the ids
            object.__setattr__(self, "worker_id", self.worker_id + self.pool_tag)

    @property
    def pool_tag(self) -> str:
        """With ``auto_shards``, the end of the id of every worker of its pool: a
        digest of the queues, ``kinds`` and shard count ("" without)."""
        if self.auto_shards is None:
            return ""
        kinds = "*" if self.kinds is None else ",".join(sorted(self.kinds))
        text = f"{','.join(sorted(self.queues))};{kinds};{self.auto_shards}"
        return "+auto." + hashlib.blake2b(text.encode(), digest_size=4).hexdigest()

    def serves(self, registered: Iterable[str]) -> frozenset[str]:
        """The kinds served: those registered (handlers), narrowed by ``kinds``."""
        kinds = frozenset(registered)
        return kinds if self.kinds is None else kinds & self.kinds

    def subscriptions(
        self, registered: Iterable[str], shards: frozenset[int] | None = None
    ) -> tuple[Subscription, ...]:
        """What this worker serves, one per queue: exactly the kinds it has handlers
        for (narrowed by ``kinds``), its shards (``shards`` if given: those of
        ``--shards auto`` now), and its prefetch as its share of the route's
        window (a task of a kind no live worker registers waits in the ledger,
        unattempted)."""
        kinds = self.serves(registered)
        served = self.shards if shards is None else shards
        return tuple(Subscription(q, kinds, served, self.effective_prefetch) for q in self.queues)

    @property
    def effective_prefetch(self) -> int:
        return self.prefetch or 2 * self.concurrency


@dataclass(frozen=True)
class DirectSource:
    """What a worker without a broker claims from (consumers/direct.py)."""

    ledger: DirectLedger
    #: Set on every enqueue notification (:class:`~ledgerq.ledger.pg.notify.Wakeup`).
    wake: asyncio.Event
    config: DirectConfig = field(default_factory=DirectConfig)
    #: Beside a broker (broker-down mode): whether its connection is up, and when
    #: to fall back. Without a broker (``--direct``) both are None.
    broker_up: Callable[[], bool] | None = None
    fallback: FallbackConfig | None = None


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
        consume: Consume | None,
        direct: DirectSource | None = None,
        sync_engine: Engine | None,
        async_engine: AsyncEngine,
        alert: AlertHook = log_alert,
        probe: Probe = no_probe,
        observer: Observer = NO_OBSERVER,
        shard_engines: Sequence[tuple[Engine | None, AsyncEngine]] = (),
        routing: RoutingLedger | None = None,
    ) -> None:
        """``shard_engines``: with ledger shards, the handlers' (sync, async) engines of
        each shard, so a task's ``ctx.session`` is on its own shard's database; batch
        windows are then off (a window is one transaction, in one database).
        ``routing``: where the worker registers what it serves (None: nowhere, so
        its queues are published to as if no worker had subscribed: unit tests)."""
        self.config = config
        self._consume = consume
        self._consumption: Consumption | None = None
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
            alert=alert,
            probe=probe,
            observer=observer,
        )
        self.runner = TaskRunner(
            registry,
            config.worker_id,
            self._pool,
            sync_engine,
            async_engine,
            on_context=self.leases.attach,
            default_timeout_s=config.default_timeout_s,
            probe=probe,
            observer=observer,
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
        if shard_engines:
            self.batcher = Batcher(self.runner, config.batch, None, None)
        else:
            self.batcher = Batcher(self.runner, config.batch, sync_engine, async_engine)
        self.dispatcher = Dispatcher(
            registry, self.runner, group, self.batcher, slots, self.leases, self.finisher.put
        )
        self.claimer = Claimer(
            ledger,
            self.acker,
            slots,
            self.dispatcher.start,
            worker_id=config.worker_id,
            lease_s=config.lease_s,
            max_batch=config.max_batch,
            observer=observer,
            lease_kinds=frozenset(h.kind for h in registry if h.lease),
        )
        self.intake = Intake(self.acker, self.claimer.offer, probe)
        if consume is None and (direct is None or direct.fallback is not None):
            raise ValueError(
                "a worker without a broker claims directly (and falls back to nothing)"
            )
        if consume is not None and direct is not None and direct.fallback is None:
            raise ValueError("a direct source beside a broker is its fallback: give it one")
        self.direct = (
            None
            if direct is None
            else DirectClaimer(
                direct.ledger,
                slots,
                self.dispatcher.start,
                direct.wake,
                queues=config.queues,
                worker_id=config.worker_id,
                lease_s=config.lease_s,
                config=direct.config,
                observer=observer,
                kinds=config.serves(registry.kinds()),
            )
        )
        self.fallback = (
            None
            if self.direct is None or direct is None or direct.fallback is None
            else Fallback(self.direct, direct.broker_up or (lambda: True), direct.fallback)
        )
        self.liveness = (
            None if routing is None else Liveness(routing, config.worker_id, config.liveness_s)
        )
        self._kinds = registry.kinds()
        self.subscriptions = config.subscriptions(self._kinds)
        self.subscriber = (
            None
            if routing is None
            else Subscriber(
                routing,
                config.worker_id,
                self.subscriptions,
                ttl_s=config.lease_s,
                every_s=config.heartbeat_s,
                direct=consume is None,
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
        if config.auto_shards is not None and (consume is None or direct is not None):
            raise ValueError("--shards auto routes through RabbitMQ: no direct claims")

    @property
    def counts(self) -> WorkerCounts:
        return WorkerCounts(
            received=self.intake.received,
            claimed=self.claimer.claimed + (self.direct.claimed if self.direct else 0),
            skipped=self.claimer.skipped,
            succeeded=self.finisher.succeeded,
            retried=self.finisher.retried,
            dead=self.finisher.dead,
            rejected=self.intake.rejected,
            cancelled=self.finisher.cancelled,
        )

    @property
    def consuming(self) -> bool:
        """Whether deliveries are coming in (started, and not stopping)."""
        started = self._consumption is not None or (self.direct is not None and self.direct.running)
        return started and not self.finisher.closing

    @property
    def threads_running(self) -> int:
        """Sync handlers whose thread has not returned (one past its timeout included)."""
        return self.runner.threads_running

    async def start(self) -> None:
        if self.liveness is not None:  # first: its tasks are rescued if it dies from here on
            await self.liveness.start()
        self.finisher.start()
        self.leases.start()
        if self.direct is not None and self.fallback is None:
            if self.subscriber is not None:  # first: no relay publishes these queues now
                await self.subscriber.start()
            self.direct.start_loop()
            return
        self.claimer.start_loop()
        assert self._consume is not None
        if self.pool is not None:  # after the first beat: it counts itself in
            self.pool.shards = await self.pool.compute()
            self._subscribe(self.pool.shards)
        names = [s.broker_name for s in self.subscriptions]
        self._consumption = await self._consume(names, self.config.effective_prefetch, self.intake)
        if self.subscriber is not None:
            await self.subscriber.start()  # after the declaration: never routed to nothing
        if self.pool is not None:
            await self.pool.start()
        log.info(
            "worker %s consuming %s (concurrency %d, prefetch %d)",
            self.config.worker_id,
            ", ".join(names),
            self.config.concurrency,
            self.config.effective_prefetch,
        )
        if self.fallback is not None:
            self.fallback.start()

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
        self.subscriptions = self.config.subscriptions(self._kinds, shards)
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
        if self._consume is None or self._consumption is None or self.finisher.closing:
            return
        subscriptions = self.config.subscriptions(self._kinds, shards)
        names = [s.broker_name for s in subscriptions]
        consumption = await self._consume(names, self.config.effective_prefetch, self.intake)
        old, self._consumption = self._consumption, consumption
        self._subscribe(shards)
        try:
            if self.subscriber is not None:
                await self.subscriber.beat()
        finally:
            await old.cancel()

    async def _stop(self) -> None:
        self.finisher.stopping()
        if self.pool is not None:  # first: no switch while stopping
            await self.pool.stop()
        if self.fallback is not None:  # first: a broker down now must not start direct claims
            await self.fallback.stop()
        if self._consumption is not None:  # never waits for a broker that is away
            await self._consumption.cancel()
        if self.subscriber is not None:
            await self.subscriber.stop()
        await self.claimer.stop()
        if self.direct is not None:
            await self.direct.stop()
        await self.dispatcher.drain(self.config.grace_s)
        await self.batcher.close()
        await self.finisher.close()  # every outcome written and acked
        await self.leases.stop()
        if self.liveness is not None:
            await self.liveness.stop()
        self._pool.shutdown(wait=False, cancel_futures=True)
        log.info("worker stopped: %s (%d acks sent)", self.counts, self.acker.acks_sent)
