"""A worker's storage, composed per implementation: :func:`pg_storage` (one
PostgreSQL database or several ledger shards, LISTEN wake-ups for direct claims)
and :func:`mysql_storage` (one MySQL / MariaDB database or several, polled). Each returns a
:class:`WorkerStorage`: the ledger, what the worker, its routing and its direct
claims hold of it, the handlers' engines per shard, the wake-ups, the claimers'
pools to close. :func:`~ledgerq.compose.worker.open_worker` picks one by URL."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from sqlalchemy import Engine
from sqlalchemy.ext.asyncio import AsyncEngine

from ledgerq.compose.ledgers import mysql_ledgers, schema_watched
from ledgerq.consumers.worker import WorkerConfig
from ledgerq.core.config import Settings
from ledgerq.ledger.model import KindDefaults
from ledgerq.ledger.pg import PgLedger
from ledgerq.ledger.pg.engines import DIRECT_PLANNER, WORKER_PLANNER
from ledgerq.ledger.pg.engines import async_engine as pg_async_engine
from ledgerq.ledger.pg.engines import sync_engine as pg_sync_engine
from ledgerq.ledger.pg.notify import Wakeup
from ledgerq.ledger.protocol import DirectLedger, RoutingLedger, WorkerLedger
from ledgerq.ledger.scheduling import RateLimit
from ledgerq.ledger.specs import TaskSpec
from ledgerq.ledger.split.ledger import (
    ShardedDirectLedger,
    ShardedLedger,
    ShardedRouting,
    ShardedWorkerLedger,
)
from ledgerq.runtime import SchemaWatch


class WorkerHome(Protocol):
    """What the worker's composition asks of its ledger besides the worker's seam:
    the start-up registrations and the periodic enqueuer (:func:`scheduling`), the
    readiness probe, the autovacuum warning, and closing it."""

    async def register_limits(self, limits: Mapping[str, RateLimit]) -> list[str]: ...
    async def register_ordering(self, orderings: Mapping[str, str]) -> list[str]: ...
    async def register_sticky(self, windows: Mapping[str, float | None]) -> list[str]: ...
    async def register_children_done(self, callbacks: Mapping[str, str | None]) -> list[str]: ...
    async def register_defaults(self, defaults: Mapping[str, KindDefaults]) -> list[str]: ...
    async def enqueue(self, specs: Sequence[TaskSpec]) -> list[int]: ...
    async def ping(self) -> bool: ...
    async def autovacuum_off(self) -> list[str]: ...
    async def dispose(self) -> None: ...


class Disposable(Protocol):
    async def dispose(self) -> None: ...


@dataclass(frozen=True)
class WorkerStorage:
    """A worker's ledger parts: the ledger (all its shards), what the worker, its
    routing and its direct claims hold of it, the handlers' engines per shard, the
    LISTEN wake-ups, and the claimers' pools to close."""

    ledger: WorkerHome
    worker_ledger: WorkerLedger
    routing: RoutingLedger
    claims: DirectLedger
    engines: list[tuple[Engine, AsyncEngine]]
    wakeups: list[Wakeup]
    claimers: list[Disposable]
    #: Batched commit for ``ctx.session`` handlers (consumers/batch.py).
    windows: bool = True


def pg_storage(
    settings: Settings, config: WorkerConfig, watch: SchemaWatch | None, woken: asyncio.Event
) -> WorkerStorage:
    # The worker's own statements (claim, finish, heartbeat) never queue behind
    # handlers: they have a pool of their own. Handlers' sessions share db_pool
    # connections (per kind of handler), so a worker's footprint is bounded. With
    # ledger shards, all of that once per shard: a task is claimed, run and
    # finished on the database its id names.
    databases = settings.ledger_shards()
    shards = [
        PgLedger(pg_async_engine(db, "ledgerq-worker", pool_size=4, planner=WORKER_PLANNER))
        for db in databases
    ]
    engines = [
        (
            pg_sync_engine(db, "ledgerq-worker-sync", pool_size=config.db_pool),
            pg_async_engine(db, "ledgerq-worker-handlers", pool_size=config.db_pool),
        )
        for db in databases
    ]
    ledger: PgLedger | ShardedLedger = shards[0] if len(shards) == 1 else ShardedLedger(shards)
    watched = [schema_watched(shard, watch) for shard in shards]
    worker_ledger: WorkerLedger = watched[0] if len(shards) == 1 else ShardedWorkerLedger(watched)
    # What the worker serves is registered on every shard: each shard's relays
    # route by their own database's subscriptions.
    routing: RoutingLedger = watched[0] if len(shards) == 1 else ShardedRouting(watched)
    # Direct claims run select_due's selection: they need the relay's planner
    # settings and more (DIRECT_PLANNER, ledger/pg/engines.py), on a connection of
    # their own per shard (with several shards, each claim starts at the next one),
    # woken by LISTEN on every shard.
    wakeups = [Wakeup(db, woken) for db in databases]
    claimers = [
        PgLedger(pg_async_engine(db, "ledgerq-worker-direct", pool_size=1, planner=DIRECT_PLANNER))
        for db in databases
    ]
    claims: DirectLedger = claimers[0] if len(claimers) == 1 else ShardedDirectLedger(claimers)
    return WorkerStorage(ledger, worker_ledger, routing, claims, engines, wakeups, list(claimers))


def mysql_storage(
    settings: Settings, config: WorkerConfig, watch: SchemaWatch | None
) -> WorkerStorage:
    """The same parts on MySQL / MariaDB (one database, or several ledger shards, as
    on PostgreSQL), for the broker path and the direct one alike: no LISTEN there,
    so direct claims (``--direct``, and the broker-down fallback) poll
    (DirectConfig.poll_s) and wake up early only on the worker's own batches."""
    from ledgerq.ledger.mysql import engines as my_engines  # only for a MySQL URL

    shards = mysql_ledgers(settings, "ledgerq-worker", pool_size=4)
    watched = [schema_watched(shard, watch) for shard in shards]
    claimers = mysql_ledgers(settings, "ledgerq-worker-direct", pool_size=1)
    engines = [
        (
            my_engines.sync_engine(db, "ledgerq-worker-sync", pool_size=config.db_pool),
            my_engines.async_engine(db, "ledgerq-worker-handlers", pool_size=config.db_pool),
        )
        for db in settings.ledger_shards()
    ]
    one = len(shards) == 1
    # Batched windows on MySQL too (ledger/mysql/window.py); with ledger shards the
    # worker runs none, as on PostgreSQL (consumers/worker.py).
    return WorkerStorage(
        shards[0] if one else ShardedLedger(shards),
        watched[0] if one else ShardedWorkerLedger(watched),
        watched[0] if one else ShardedRouting(watched),
        claimers[0] if one else ShardedDirectLedger(claimers),
        engines,
        [],
        list(claimers),
    )
