"""The storage seam: every read and write the relay and the consumers make.

Modelled on River's driver interface: a narrow set of batch operations, each a
single named statement from ``queries.sql``. Components hold an
:class:`AsyncLedger` and never open ad-hoc sessions; a test can drive any of
them against a real database through this class alone.

Every state change is a compare-and-set and returns what it won.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession
from sqlalchemy.orm import Session

from ledger.retry import RetryPolicy
from ledger.sql import Q

#: An (id, epoch) pair: the fence every write after a claim carries.
Fence = tuple[int, int]


@dataclass(frozen=True, slots=True)
class DueTask:
    """A pending row the relay holds locked while it publishes."""

    id: int
    kind: str
    queue: str
    priority: int
    epoch: int


@dataclass(frozen=True, slots=True)
class ClaimedTask:
    """A row a consumer won: status ``running`` under ``epoch``."""

    id: int
    epoch: int
    kind: str
    queue: str
    payload: Any
    attempts: int
    max_attempts: int
    retry: dict[str, Any] | None
    timeout_s: float | None
    checkpoint: Any
    business_key: str | None
    parent_id: int | None

    @property
    def fence(self) -> Fence:
        return (self.id, self.epoch)

    def retry_delay(self) -> float:
        return RetryPolicy.from_json(self.retry).delay_for(self.attempts)


@dataclass(frozen=True, slots=True)
class Failure:
    """A failed attempt: retry after ``delay`` seconds, or ``final`` to end it dead."""

    id: int
    epoch: int
    error: str
    delay: float = 0.0
    final: bool = False


@dataclass(frozen=True, slots=True)
class FailOutcome:
    id: int
    kind: str
    attempts: int
    last_error: str | None
    status: str  # 'pending' (retry scheduled) or 'dead'


def fence_params(fences: Iterable[Fence]) -> dict[str, list[int]]:
    ordered = sorted(fences)  # lock rows in id order: concurrent batches cannot deadlock
    return {"ids": [f[0] for f in ordered], "epochs": [f[1] for f in ordered]}


def fail_params(failures: Sequence[Failure]) -> dict[str, list[Any]]:
    """Parallel arrays for the ``fail`` statement, in id order."""
    ordered = sorted(failures, key=lambda f: f.id)
    return {
        "ids": [f.id for f in ordered],
        "epochs": [f.epoch for f in ordered],
        "delays": [f.delay for f in ordered],
        "errors": [f.error for f in ordered],
        "finals": [f.final for f in ordered],
    }


class PublishBatch:
    """Due rows locked by the relay's open transaction until the batch ends."""

    def __init__(self, conn: AsyncConnection, rows: list[DueTask]) -> None:
        self._conn = conn
        self.rows = rows

    async def mark_published(self, rows: Sequence[DueTask]) -> set[int]:
        """pending -> published for the confirmed rows; returns the ids that moved."""
        if not rows:
            return set()
        result = await self._conn.execute(
            Q.mark_published, fence_params((r.id, r.epoch) for r in rows)
        )
        return {int(r[0]) for r in result}


def complete_in_session(session: Session | Connection, fence: Fence) -> bool:
    """running -> succeeded inside a handler's own (sync) transaction."""
    return session.execute(Q.complete, fence_params([fence])).first() is not None


async def acomplete_in_session(session: AsyncSession | AsyncConnection, fence: Fence) -> bool:
    """running -> succeeded inside a handler's own (async) transaction."""
    return bool(await acomplete_many_in_session(session, [fence]))


async def acomplete_many_in_session(
    session: AsyncSession | AsyncConnection, fences: Iterable[Fence]
) -> set[int]:
    """running -> succeeded for many, inside the caller's transaction; returns the won ids."""
    return {int(r[0]) for r in await session.execute(Q.complete, fence_params(fences))}


class AsyncLedger:
    """The relay's and the consumers' view of the ledger."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        # Single-statement operations run in autocommit: one round trip, no
        # BEGIN/COMMIT, and the statement is still atomic.
        self._single = engine.execution_options(isolation_level="AUTOCOMMIT")

    # -- relay ----------------------------------------------------------------
    @asynccontextmanager
    async def publish_batch(self, limit: int) -> AsyncIterator[PublishBatch]:
        """Lock up to ``limit`` due rows (SKIP LOCKED) for the body of the block.

        The transaction commits when the block exits normally and rolls back
        (leaving every row pending) when it raises.
        """
        async with self.engine.begin() as conn:
            result = await conn.execute(Q.select_due, {"limit": limit})
            rows = [DueTask(r.id, r.kind, r.queue, r.priority, r.epoch) for r in result]
            yield PublishBatch(conn, rows)

    # -- consumers ------------------------------------------------------------
    async def claim(
        self, fences: Iterable[Fence], worker: str, lease_s: float
    ) -> list[ClaimedTask]:
        """pending|published -> running for each (id, epoch) still current; returns the won."""
        params: dict[str, Any] = fence_params(fences)
        if not params["ids"]:
            return []
        params.update(worker=worker, lease_s=lease_s)
        async with self._single.connect() as conn:
            result = await conn.execute(Q.claim, params)
            return [
                ClaimedTask(
                    r.id,
                    r.epoch,
                    r.kind,
                    r.queue,
                    r.payload,
                    r.attempts,
                    r.max_attempts,
                    r.retry,
                    r.timeout_s,
                    r.checkpoint,
                    r.business_key,
                    r.parent_id,
                )
                for r in result
            ]

    async def whereabouts(self, ids: Iterable[int]) -> dict[int, str]:
        """The status of each id now (live or history); absent ids are unknown."""
        async with self._single.connect() as conn:
            result = await conn.execute(Q.whereabouts, {"ids": sorted(set(ids))})
            return {int(r.id): str(r.status) for r in result}

    async def complete(self, fences: Iterable[Fence]) -> set[int]:
        """running -> succeeded (moved to history) for the fences still current."""
        params = fence_params(fences)
        if not params["ids"]:
            return set()
        async with self._single.connect() as conn:
            return {int(r[0]) for r in await conn.execute(Q.complete, params)}

    async def fail(self, failures: Sequence[Failure]) -> list[FailOutcome]:
        """running -> pending (backoff) or dead, per row; returns the rows that moved."""
        if not failures:
            return []
        async with self._single.connect() as conn:
            result = await conn.execute(Q.fail, fail_params(failures))
            return [FailOutcome(r.id, r.kind, r.attempts, r.last_error, r.status) for r in result]

    async def heartbeat(self, fences: Iterable[Fence], lease_s: float) -> set[int]:
        """Extend the leases still held; returns the ids whose fence still holds."""
        params: dict[str, Any] = fence_params(fences)
        if not params["ids"]:
            return set()
        params["lease_s"] = lease_s
        async with self._single.connect() as conn:
            return {int(r[0]) for r in await conn.execute(Q.heartbeat, params)}

    async def save_checkpoint(self, fence: Fence, checkpoint: Any) -> bool:
        params = {"id": fence[0], "epoch": fence[1], "checkpoint": json.dumps(checkpoint)}
        async with self._single.connect() as conn:
            return (await conn.execute(Q.save_checkpoint, params)).first() is not None
