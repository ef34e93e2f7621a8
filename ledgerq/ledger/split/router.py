"""The producer's router over ledger shards: :class:`Shards`.

With the ledger split across databases (``LEDGERQ_DATABASE_URL`` listing
several), a task must be enqueued in a transaction on the database of its
shard, and the transactional-outbox guarantee (the task exists exactly when
the business transaction commits) holds only within that one database. So the
business data a task belongs to lives in the same shard, by the same key::

    shards = Shards(Settings.from_env())
    with Session(shards.engine_for(account_id)) as session, session.begin():
        session.add(payment)                      # on the account's shard
        shards.enqueue(session, account_id, "charge", {"payment": payment.id})

:meth:`Shards.enqueue` is :func:`~ledgerq.ledger.producer.enqueue` plus a check
that costs nothing: the id the INSERT returned carries the shard of the
database it landed in (:mod:`ledgerq.ledger.split.ids`); if that is not the
key's shard it raises :class:`~ledgerq.core.errors.WrongShardError` inside
the transaction (which must then roll back, as a ``with session.begin()``
block does). A key of ``None`` takes the shards in turn (round robin), for
tasks that belong to no sharded data; the plain ``enqueue`` on any shard's
transaction does the same without a router.

The engines are created on first use, one per shard, with SQLAlchemy's
defaults plus ``engine_options``; a producer with its own engines uses
:meth:`Shards.url_for` or :meth:`Shards.shard_for` instead.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from sqlalchemy import Engine, create_engine
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from ledgerq.core.config import Settings
from ledgerq.ledger.executors import AsyncExecutor, Executor
from ledgerq.ledger.producer import TaskSpec, aenqueue, aenqueue_many, enqueue, enqueue_many
from ledgerq.ledger.split.ids import RoundRobin, check_placement, shard_for_key

E = TypeVar("E", Engine, AsyncEngine)


class Shards:
    """Routes shard keys to the ledger shards of ``settings`` (or of a URL list)."""

    def __init__(
        self, settings: Settings | str, engine_options: Mapping[str, Any] | None = None
    ) -> None:
        self.settings = (
            settings if isinstance(settings, Settings) else Settings(database_url=settings)
        )
        self.urls = self.settings.database_urls
        self._options = dict(engine_options or {})
        self._next = RoundRobin(len(self.urls))
        self._engines: dict[int, Engine] = {}
        self._async_engines: dict[int, AsyncEngine] = {}
        self._lock = threading.Lock()

    @property
    def count(self) -> int:
        return len(self.urls)

    def shard_for(self, key: str | None) -> int:
        """The shard of ``key``; None: the next shard in turn."""
        return self._next() if key is None else shard_for_key(key, self.count)

    def url_for(self, key: str | None) -> str:
        """The SQLAlchemy URL of ``key``'s shard's database."""
        return self.urls[self.shard_for(key)]

    def engine_for(self, key: str | None) -> Engine:
        """A (cached) engine on ``key``'s shard's database."""
        return self._cached(self._engines, create_engine, key)

    def async_engine_for(self, key: str | None) -> AsyncEngine:
        """A (cached) async engine on ``key``'s shard's database."""
        return self._cached(self._async_engines, create_async_engine, key)

    def _cached(self, cache: dict[int, E], make: Callable[..., E], key: str | None) -> E:
        shard = self.shard_for(key)
        with self._lock:
            if shard not in cache:
                cache[shard] = make(self.urls[shard], **self._options)
            return cache[shard]

    def check(self, task_id: int, key: str | None) -> int:
        """``task_id`` if it is on ``key``'s shard (any shard for None), else
        :class:`~ledgerq.core.errors.WrongShardError`."""
        if key is not None:
            check_placement(task_id, key, self.count)
        return task_id

    def enqueue(
        self, executor: Executor, key: str | None, kind: str, payload: Any = None, **options: Any
    ) -> int:
        """:func:`~ledgerq.ledger.producer.enqueue`, checked to be on ``key``'s shard."""
        return self.check(enqueue(executor, kind, payload, **options), key)

    async def aenqueue(
        self,
        executor: AsyncExecutor,
        key: str | None,
        kind: str,
        payload: Any = None,
        **options: Any,
    ) -> int:
        """:meth:`enqueue` on an async executor."""
        return self.check(await aenqueue(executor, kind, payload, **options), key)

    def enqueue_many(
        self, executor: Executor, key: str | None, specs: Iterable[TaskSpec]
    ) -> list[int]:
        """:func:`~ledgerq.ledger.producer.enqueue_many`, every task checked."""
        return [self.check(task_id, key) for task_id in enqueue_many(executor, specs)]

    async def aenqueue_many(
        self, executor: AsyncExecutor, key: str | None, specs: Iterable[TaskSpec]
    ) -> list[int]:
        return [self.check(task_id, key) for task_id in await aenqueue_many(executor, specs)]

    async def adispose(self) -> None:
        """Close the engines this router created."""
        for engine in self._async_engines.values():
            await engine.dispose()
        self.dispose()

    def dispose(self) -> None:
        for sync in self._engines.values():
            sync.dispose()
