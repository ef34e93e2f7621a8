"""The storage seam: everything the relay, the worker, the reconciler, the
inspection commands, the benchmark and the tests ask of the ledger.

Modelled on River's driver interface: one method per operation, each one named
statement from ``queries.sql`` or ``inspection.sql``, batch operations taking
parallel arrays. Every state change is a compare-and-set on (id, epoch,
expected status) and returns what it won: a row missing from the answer means
another actor got there first, and the caller treats that as normal.

Each component depends on the narrowest protocol that serves it (the relay on
:class:`RelayLedger`, and so on); :class:`Ledger` is all of them, and
:class:`~ledgerq.ledger.pg.PgLedger` implements it on PostgreSQL. Driver errors
never cross the seam: they arrive as
:class:`~ledgerq.ledger.errors.TransientStorageError` (worth retrying as it is)
or :class:`~ledgerq.ledger.errors.StorageError`.

Statements that run in a transaction the caller owns (``enqueue`` in the
producer's, the terminal status in a handler's) are not here: see
:mod:`ledgerq.ledger.producer` and :mod:`ledgerq.ledger.within`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

from ledgerq.ledger.model import (
    ClaimedTask,
    DueTask,
    ExpiredLease,
    Fence,
    Finished,
    Outcome,
    TaskTiming,
)


class PublishBatch(Protocol):
    """Rows locked by an open transaction while they are published; the
    transaction commits when the block exits normally, else rolls back."""

    rows: list[DueTask]

    async def mark_published(self, rows: Sequence[DueTask]) -> set[int]:
        """pending|published -> published for the confirmed ``rows``; the ids that moved."""
        ...


class ExpiredBatch(Protocol):
    """Expired leases locked by an open transaction until they are finished."""

    rows: list[ExpiredLease]

    async def finish(self, outcomes: Sequence[Outcome]) -> list[Finished]:
        """The ``finish`` statement, inside the batch's transaction."""
        ...


class FinishingLedger(Protocol):
    async def finish(self, outcomes: Sequence[Outcome]) -> list[Finished]:
        """Write how attempts ended (one verdict per row, fenced); the rows that moved."""
        ...


class RelayLedger(Protocol):
    def publish_batch(self, limit: int) -> AbstractAsyncContextManager[PublishBatch]:
        """Lock up to ``limit`` due pending rows (SKIP LOCKED) for the block."""
        ...


class WorkerLedger(FinishingLedger, Protocol):
    async def claim(
        self, fences: Iterable[Fence], worker: str, lease_s: float
    ) -> list[ClaimedTask]:
        """pending|published -> running for each (id, epoch) still current; the won."""
        ...

    async def whereabouts(self, ids: Iterable[int]) -> dict[int, str]:
        """The status of each id now (live or history); unknown ids are absent."""
        ...

    async def heartbeat(self, fences: Iterable[Fence], lease_s: float) -> set[int]:
        """Extend the leases still held; the ids whose fence still holds."""
        ...

    async def save_checkpoint(self, fence: Fence, state: Any) -> bool:
        """Store a running task's checkpoint, fenced; whether the fence held."""
        ...


class ReconcilerLedger(Protocol):
    def exclusive(self) -> AbstractAsyncContextManager[bool]:
        """Hold the reconciler's advisory lock for the block; yield whether we got it."""
        ...

    def stalled_batch(
        self, after: int, limit: int, default_stall_s: float, stalls: Mapping[str, float]
    ) -> AbstractAsyncContextManager[PublishBatch]:
        """Lock a page (ids > ``after``) of published rows unclaimed past their stall window."""
        ...

    def overdue_batch(
        self, after: int, limit: int, stall_s: float
    ) -> AbstractAsyncContextManager[PublishBatch]:
        """Lock a page (ids > ``after``) of pending rows due for longer than ``stall_s``."""
        ...

    def expired_batch(self, after: int, limit: int) -> AbstractAsyncContextManager[ExpiredBatch]:
        """Lock a page (ids > ``after``) of running rows whose lease ran out."""
        ...


class InspectionLedger(Protocol):
    async def stats(self) -> dict[str, Any]:
        """Counts by status and by kind, live and history together."""
        ...

    async def show(self, task_id: int) -> dict[str, Any]:
        """Every column of one task, plus ``location`` (live or history)."""
        ...

    async def ping(self) -> bool:
        """Whether the ledger answers and its table exists (the readiness probe's)."""
        ...

    async def count_expired(self) -> int: ...

    async def autovacuum_off(self) -> list[str]:
        """Why autovacuum would not clean the hot table (empty: it will). Without it
        every claim and finish leaves a dead tuple behind and the table bloats."""
        ...

    async def count_finished(self) -> int: ...

    async def drain_span(self) -> tuple[int, float | None]:
        """Finished tasks, and seconds from the first publication to the last finish."""
        ...

    async def timings(self, ids: Iterable[int]) -> list[TaskTiming]: ...

    async def truncate(self) -> None:
        """Delete every task, live and finished (tests, demo and benchmark only)."""
        ...

    async def seed_history(self, rows: int) -> None:
        """Add ``rows`` synthetic finished tasks (negative ids), then settle the table."""
        ...

    async def clear_finished(self) -> None:
        """Delete the real finished tasks, keep the synthetic ones, settle the table."""
        ...


class Ledger(RelayLedger, WorkerLedger, ReconcilerLedger, InspectionLedger, Protocol):
    """The whole seam."""

    async def dispose(self) -> None:
        """Close every connection the ledger opened."""
        ...
