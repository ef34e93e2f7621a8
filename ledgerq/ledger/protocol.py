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
:class:`~ledgerq.core.errors.TransientStorageError` (worth retrying as it is)
or :class:`~ledgerq.core.errors.StorageError`.

Statements that run in a transaction the caller owns (``enqueue`` in the
producer's, the terminal status in a handler's, the operator's in-transaction
API) are the seam's transaction-scoped part, :class:`TxLedger` and
:class:`AsyncTxLedger`, built on the caller's Session or Connection. What the
tests and the benchmark need besides (emptying, seeding, moving time) is the
testing protocol, :class:`HarnessLedger`, which no service holds.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any, Literal, Protocol, Unpack, runtime_checkable

from ledgerq.ledger.actions import Action, Report
from ledgerq.ledger.filters import DEFAULT_LIMIT, TaskFilter
from ledgerq.ledger.keys import KeyRelease
from ledgerq.ledger.model import (
    ClaimedTask,
    DueTask,
    ExpiredLease,
    Fence,
    Finished,
    Held,
    HistoryDay,
    KindDefaults,
    Outcome,
    RollupStep,
    TaskTiming,
)
from ledgerq.ledger.options import AuditOptions, BatchedActOptions, DueOptions
from ledgerq.ledger.routing import Subscription
from ledgerq.ledger.scheduling import DEFAULT_AGING_S, PauseReport, RateLimit, Scope
from ledgerq.ledger.specs import TaskSpec
from ledgerq.ledger.task_result import TaskResult


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


@dataclass(frozen=True)
class Locked:
    """What :meth:`TxLedger.lock_running` locked: the ids, and the transaction
    holding them (its backend's pid and its start; None if it locked nothing),
    which :func:`~ledgerq.ledger.within.end_window` can end from another connection."""

    ids: set[int]
    holder: tuple[int, datetime] | None


class TxLedger(Protocol):
    """The seam inside a transaction the caller owns (River's ``ExecutorTx``): the
    same operations as the ledger's own, run on the caller's Session or Connection,
    never beginning, committing or rolling back. The producer's ``enqueue``, the
    operator's in-transaction API (:mod:`ledgerq.ledger.operations`) and the
    worker's terminal status inside a handler's transaction
    (:mod:`ledgerq.ledger.within`) run through it;
    :class:`~ledgerq.ledger.pg.tx.PgTx` implements it on PostgreSQL."""

    def enqueue(self, spec: TaskSpec) -> int:
        """Insert one task; its id, or with ``unique``/``once`` the id of the task
        holding its key (nothing inserted)."""
        ...

    def enqueue_many(self, specs: Iterable[TaskSpec]) -> list[int]:
        """Insert ``specs``; the new ids in input order (duplicates left out)."""
        ...

    def list_tasks(self, selection: TaskFilter) -> list[dict[str, Any]]:
        """As :meth:`OperationsLedger.list_tasks`, in the caller's transaction."""
        ...

    def act(self, action: Action, selection: TaskFilter, **options: Unpack[AuditOptions]) -> Report:
        """As :meth:`OperationsLedger.act`, all of it in the caller's transaction."""
        ...

    def release_key(self, key: str, **options: Unpack[AuditOptions]) -> KeyRelease:
        """As :meth:`OperationsLedger.release_key`, in the caller's transaction."""
        ...

    def succeed(
        self, fences: Sequence[Fence], results: Sequence[str | None] | None = None
    ) -> set[int]:
        """running -> succeeded for ``fences`` (each with its JSON result), fenced; the
        ids whose fence held."""
        ...

    def lock_running(self, fences: Sequence[Fence]) -> Locked:
        """Lock the rows still running under ``fences`` (SKIP LOCKED) until the
        caller's transaction ends."""
        ...

    def dependency_results(self, task_id: int) -> dict[int, Any]:
        """``ctx.dependencies``: each ended dependency of ``task_id`` and its result
        value (None for one that returned nothing or did not succeed)."""
        ...

    def save_checkpoint(self, fence: Fence, state_json: str) -> bool:
        """Store a running task's checkpoint (JSON text), fenced; whether it held."""
        ...

    def ended_results(self, ids: Sequence[int]) -> list[TaskResult]:
        """Where each of ``ids`` stands now, live or ended (one snapshot); an id in
        neither table is absent. For result() waiters (ledger/results.py)."""
        ...

    def child_results(self, parent_id: int, after: int = 0, limit: int = 100) -> list[TaskResult]:
        """The children of ``parent_id`` with ids above ``after``, in id order, at
        most ``limit`` (1 to 10,000): statuses and results (``ctx.children``)."""
        ...

    def announce_waiting(self, registry: str, until_s: float) -> None:
        """Say that ``registry`` has result() waiters for ``until_s`` seconds: the
        statements that end tasks notify while one such row stands."""
        ...

    def withdraw_waiting(self, registry: str) -> None:
        """``registry`` has no waiter left."""
        ...


class AsyncTxLedger(Protocol):
    """:class:`TxLedger` on an async Session or Connection."""

    async def enqueue(self, spec: TaskSpec) -> int: ...

    async def enqueue_many(self, specs: Iterable[TaskSpec]) -> list[int]: ...

    async def list_tasks(self, selection: TaskFilter) -> list[dict[str, Any]]: ...

    async def act(
        self, action: Action, selection: TaskFilter, **options: Unpack[AuditOptions]
    ) -> Report: ...

    async def release_key(self, key: str, **options: Unpack[AuditOptions]) -> KeyRelease: ...

    async def succeed(
        self, fences: Sequence[Fence], results: Sequence[str | None] | None = None
    ) -> set[int]: ...

    async def lock_running(self, fences: Sequence[Fence]) -> Locked: ...

    async def save_checkpoint(self, fence: Fence, state_json: str) -> bool: ...

    async def dependency_results(self, task_id: int) -> dict[int, Any]: ...
    async def ended_results(self, ids: Sequence[int]) -> list[TaskResult]: ...

    async def child_results(
        self, parent_id: int, after: int = 0, limit: int = 100
    ) -> list[TaskResult]: ...

    async def announce_waiting(self, registry: str, until_s: float) -> None: ...

    async def withdraw_waiting(self, registry: str) -> None: ...


class FinishingLedger(Protocol):
    async def finish(self, outcomes: Sequence[Outcome]) -> list[Finished]:
        """Write how attempts ended (one verdict per row, fenced); the rows that moved."""
        ...


class RelayLedger(Protocol):
    def publish_batch(
        self, limit: int, aging_s: float = DEFAULT_AGING_S
    ) -> AbstractAsyncContextManager[PublishBatch]:
        """Lock up to ``limit`` due pending rows (SKIP LOCKED) for the block: for
        each live broker route at most its window's credit (its live subscribers'
        capacity minus its published rows), each row's ``route`` that window's;
        in the scheduling order (:mod:`ledgerq.ledger.scheduling`): nothing
        paused, no ordered task with a live task of its key ahead, rate-limited
        kinds within their buckets (charged when the block commits), rows due
        ``aging_s`` or longer first (0: no aging), then by priority with retries
        behind. A route with no live subscriber gets nothing."""
        ...

    async def publish_due(self, limit: int, aging_s: float = DEFAULT_AGING_S) -> list[DueTask]:
        """The relay's pass: what :meth:`publish_batch` would lock, marked published
        (as :meth:`PublishBatch.mark_published`) and committed before this returns;
        the rows in the pick's order. No lock is held once it returns."""
        ...

    async def return_unpublished(self, rows: Sequence[DueTask]) -> set[int]:
        """published -> pending (epoch + 1, fenced on the rows' epochs) for rows
        committed published whose publish failed; the ids that moved."""
        ...

    async def kind_durations(self) -> dict[str, float]:
        """Each recently run kind's typical attempt, in seconds (the mean of the
        last minutes' attempts, or the age of one running now if longer): the
        relay sends a long kind's tasks one per message."""
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

    async def heartbeat(
        self, fences: Iterable[Fence], lease_s: float, progress: Mapping[int, str] | None = None
    ) -> Held:
        """Extend the leases still held, and store ``progress`` (JSON text by task
        id: what ``ctx.report_progress`` reported since the last beat) on those;
        the ids whose fence still holds, and (``Held.cancelling``) those of them an
        operator asked to stop."""
        ...

    async def save_checkpoint(self, fence: Fence, state: Any) -> bool:
        """Store a running task's checkpoint, fenced; whether the fence held."""
        ...


class DirectLedger(WorkerLedger, Protocol):
    async def claim_due(
        self,
        queues: Sequence[str],
        limit: int,
        worker: str,
        lease_s: float,
        **options: Unpack[DueOptions],
    ) -> list[ClaimedTask]:
        """Claim up to ``limit`` due pending tasks of ``queues`` and ``kinds`` (None:
        every kind), chosen as
        :meth:`RelayLedger.publish_batch` chooses them (pauses, ordering keys,
        rate limits, aging, priority), pending -> running in the same statement;
        the won (consumers/direct.py)."""
        ...


class RoutingLedger(Protocol):
    """What a worker serves (:mod:`ledgerq.ledger.routing`): its subscriptions."""

    async def subscribe(
        self,
        worker: str,
        subscriptions: Sequence[Subscription],
        ttl_s: float,
        *,
        direct: bool = False,
    ) -> None:
        """Register (or refresh) what ``worker`` serves, live for ``ttl_s`` seconds
        (:mod:`ledgerq.ledger.routing`); ``direct``: it claims from the ledger
        itself, and no relay publishes its queues."""
        ...

    async def unsubscribe(self, worker: str) -> None:
        """``worker`` stops serving: its subscriptions expire now (its queues stay routed)."""
        ...

    async def alive(self, worker: str, silence_s: float) -> None:
        """``worker``'s liveness beat: if no other beat of it comes within ``silence_s``
        while other workers' do, it is presumed dead and its running tasks are
        rescued (:mod:`ledgerq.consumers.liveness`)."""
        ...

    async def gone(self, worker: str) -> None:
        """``worker`` stopped: presumed dead from now on (what it still held is rescued)."""
        ...

    async def pool_members(self, tag: str) -> list[str]:
        """The live workers whose id ends with ``tag``: a ``--shards auto`` pool
        (not gone, not presumed dead), sorted (:mod:`ledgerq.consumers.shard_pool`)."""
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
        self, limit: int, stall_s: float, aging_s: float = DEFAULT_AGING_S
    ) -> AbstractAsyncContextManager[PublishBatch]:
        """Lock what :meth:`RelayLedger.publish_batch` would, of the rows due for
        longer than ``stall_s`` (the reconciler standing in for a relay)."""
        ...

    async def unpublish_unserved(self, limit: int) -> list[int]:
        """published -> pending (epoch + 1, audited) for up to ``limit`` rows whose
        route no live subscriber serves; the ids that moved."""
        ...

    async def expire_due(self, limit: int) -> list[int]:
        """pending or published -> cancelled, marked expired (audited), for up to
        ``limit`` rows whose ``expires_at`` has passed; the ids that ended."""
        ...

    async def silent_workers(self) -> dict[str, int]:
        """Workers all of whose running rows' leases ran out, with how many rows each left."""
        ...

    def expired_batch(
        self, after: int, limit: int, silent: Mapping[str, int], settle_s: float
    ) -> AbstractAsyncContextManager[ExpiredBatch]:
        """Lock a page (ids > ``after``) of running rows whose lease ran out and whose
        worker is in ``silent``, or whose lease ran out over ``settle_s`` ago; each
        row's ``in_flight`` is its worker's count from ``silent`` (1 if absent)."""
        ...

    async def dead_workers(self) -> dict[str, int]:
        """Workers presumed dead (their liveness beats stopped for their silence while
        other workers' went on) that left running rows, with how many each left."""
        ...

    async def release_stuck(self, limit: int) -> list[tuple[int, str]]:
        """Judge up to ``limit`` waiting tasks none of whose dependencies is live (a
        release their dependencies' terminal writes missed; migration 0020): each
        (id, 'released' | 'cancelled'). Idempotent, set-based."""
        ...

    async def lapse_dead_subscriptions(self) -> int:
        """Expire now the subscriptions of workers presumed dead; how many."""
        ...

    def orphaned_batch(
        self, after: int, limit: int, dead: Mapping[str, int]
    ) -> AbstractAsyncContextManager[ExpiredBatch]:
        """Lock a page (ids > ``after``) of running rows of the workers in ``dead``
        still presumed dead, whatever their leases say (``orphaned`` set on each;
        ``in_flight`` from ``dead``); finishing them is audited."""
        ...


class SchedulingLedger(Protocol):
    """The operator's pauses and rate limits (``scheduling.sql``), and the limits
    workers register for their kinds."""

    async def pause(
        self, scope: Scope, name: str, *, actor: str, reason: str | None = None
    ) -> PauseReport:
        """Pause a queue or a kind (audited); published, unclaimed tasks of it go back
        to pending. Pausing what is paused changes nothing."""
        ...

    async def resume(self, scope: Scope, name: str, *, actor: str) -> PauseReport:
        """Lift a pause (audited). Resuming what is not paused changes nothing."""
        ...

    async def pauses(self) -> list[dict[str, Any]]:
        """Every pause in force: scope, name, paused_at, actor, reason."""
        ...

    async def set_limit(self, kind: str, limit: RateLimit | None, *, actor: str) -> None:
        """Set (or with None lift) a kind's rate limit, audited."""
        ...

    async def register_limits(self, limits: Mapping[str, RateLimit]) -> list[str]:
        """The limits of a worker's ``@task(rate_limit=...)`` kinds, at its start; the
        kinds whose stored limit changed (a changed limit starts a full bucket). Kinds
        the worker has no limit for are left as they are (an operator's
        ``ledgerq kinds limit`` stands until cleared)."""
        ...

    async def register_ordering(self, orderings: Mapping[str, str]) -> list[str]:
        """What a dead task of each of a worker's kinds does to its ordering key
        (``release`` or ``block``), at its start; the kinds whose setting changed."""
        ...

    async def register_sticky(self, windows: Mapping[str, float | None]) -> list[str]:
        """Each of a worker's kinds' ``@task(sticky_retry=...)`` window in seconds
        (None: none), at its start; the kinds whose setting changed."""
        ...

    async def register_children_done(self, callbacks: Mapping[str, str | None]) -> list[str]:
        """The callback kind each of a worker's kinds enqueues when a task of it and
        all its children are terminal (None: none), at its start; the kinds whose
        setting changed."""
        ...

    async def register_defaults(self, defaults: Mapping[str, KindDefaults]) -> list[str]:
        """Each of a worker's kinds and its defaults (``@task(max_attempts=...,
        retry=..., timeout=...)``), at its start; the claim fills what a producer left
        unset from them. The kinds whose defaults changed."""
        ...

    async def enqueue(self, specs: Sequence[TaskSpec]) -> list[int]:
        """Insert ``specs`` in one committed transaction of the ledger's own (the
        periodic enqueuer's); the ids inserted."""
        ...

    async def kinds(self) -> list[dict[str, Any]]:
        """Every kind with a limit or a pause: its limit, whether paused, how many wait."""
        ...


class InspectionLedger(Protocol):
    async def stats(self) -> dict[str, Any]:
        """Counts by status and by kind, live and history together."""
        ...

    async def unserved(self) -> list[dict[str, Any]]:
        """Due tasks no live worker serves (a kind no live worker registers, a shard
        or queue nobody serves), by queue, kind and shard, with the oldest's due
        time: backlog, never attempted, not failure."""
        ...

    async def windows(self) -> list[dict[str, Any]]:
        """Each live broker route's window (queue, route, capacity, published,
        room): what the relay may still publish to it."""
        ...

    async def subscriptions(self) -> list[dict[str, Any]]:
        """Every worker's subscription (worker, queue, kinds, shards, route, started_at,
        expires_at, live), live first: which workers serve what, and which left."""
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


class RetentionLedger(Protocol):
    """History's day partitions and the purge of finished tasks (``retention.sql``).
    Nothing here touches a live task."""

    async def database_now(self) -> datetime:
        """The database's clock: every cutoff is taken from it."""
        ...

    async def history_days(self) -> list[HistoryDay]:
        """The day partitions that exist, by status then day."""
        ...

    async def add_history_day(self, status: str, day: date) -> int | None:
        """Create one day's partition; the rows it took from the default partition,
        or None if it existed."""
        ...

    async def drop_history_day(self, status: str, day: date) -> int | None:
        """Drop one day's partition; the rows it held, or None if it did not exist.
        :class:`~ledgerq.core.errors.TransientStorageError` if its lock was not
        granted within 2 s."""
        ...

    async def purge_history_batch(self, status: str, before: datetime, limit: int) -> int:
        """Delete at most ``limit`` tasks of ``status`` finished before ``before``."""
        ...

    async def prune_dependencies(self, before: datetime, limit: int) -> int:
        """Delete at most ``limit`` dependency edges (``after=``) whose dependent
        ended before ``before`` and is not live again; how many went."""
        ...

    async def count_purgeable(self, befores: Mapping[str, datetime]) -> dict[str, int]:
        """For each status, how many of its tasks finished before its cutoff."""
        ...


class OperationsLedger(Protocol):
    """The operator's side (``operations.sql``; ``ledgerq tasks ...``). The same
    operations inside a transaction the caller owns are :mod:`ledgerq.ledger.operations`."""

    async def list_tasks(self, selection: TaskFilter) -> list[dict[str, Any]]:
        """Live and finished tasks matching ``selection``, newest first (keyset paging)."""
        ...

    async def find(
        self, task_id: int | None = None, *, business_key: str | None = None
    ) -> dict[str, Any]:
        """One task (by id, or the newest with ``business_key``): every column, plus
        ``location``, ``attempt_log`` and ``audit`` (the actions that touched it)."""
        ...

    async def audit(
        self, limit: int = DEFAULT_LIMIT, before: int | None = None
    ) -> list[dict[str, Any]]:
        """The newest audit records (ids below ``before``)."""
        ...

    async def act(
        self, action: Action, selection: TaskFilter, **options: Unpack[BatchedActOptions]
    ) -> Report:
        """Apply ``action`` in batches of ``batch_size``, each its own transaction of
        fenced compare-and-sets plus its audit lines; ``progress`` after each."""
        ...

    async def release_key(self, key: str, **options: Unpack[AuditOptions]) -> KeyRelease:
        """Release ordering ``key`` from the dead tasks of blocking kinds that hold it
        (:mod:`ledgerq.ledger.keys`): recorded, fenced by epoch, audited, in one
        transaction; a key no live or dead task has is ``TaskNotFoundError``."""
        ...


@runtime_checkable
class RollupLedger(Protocol):
    """The dashboard's rollup (``overview.sql``, migration 0008; on MySQL / MariaDB
    ``ledger/mysql/rollup.sql``, migration m0012)."""

    async def roll_up(self, settle_s: float, max_span_s: float, backfill_s: float) -> RollupStep:
        """Count the tasks that finished in the next span (at most ``max_span_s``,
        ending ``settle_s`` before now; the first starts ``backfill_s`` ago) and
        move the mark past them, in one statement."""
        ...

    async def prune_rollup(self, keep_s: float) -> int:
        """Delete rollup rows older than ``keep_s``; how many."""
        ...


class OverviewLedger(Protocol):
    """What the dashboard's overview and task pages read (``overview.sql``)."""

    async def live_counts(self) -> list[dict[str, Any]]:
        """Per queue and kind: pending, due, scheduled, published, running, waiting
        (on the tasks named by ``after=``), oldest_due_s."""
        ...

    async def throughput(
        self, since: datetime, step_s: float, upto: datetime | None, grain: str = "minute"
    ) -> list[dict[str, Any]]:
        """Finished tasks per bin (``at``, ``status``, ``n``) since ``since``: the
        rollup's ``grain`` rows (``minute`` or ``hour``) before ``upto``
        (:meth:`rolled_upto`), history after it."""
        ...

    async def latency(
        self, since: datetime, upto: datetime | None, grain: str = "minute"
    ) -> list[dict[str, Any]]:
        """Latency histogram rows (``kind``, ``hop``, ``bucket``, ``n``) since ``since``."""
        ...

    async def dead_errors(
        self, since: datetime, upto: datetime | None, grain: str = "minute", limit: int = 20
    ) -> list[dict[str, Any]]:
        """Dead tasks since ``since`` by error line and kind, most common first."""
        ...

    async def workers(self, recent_s: float = 300.0) -> list[dict[str, Any]]:
        """Workers running tasks now or that finished one in the last ``recent_s``."""
        ...

    async def children(self, task_id: int, limit: int = 100) -> list[dict[str, Any]]:
        """The tasks ``task_id`` enqueued (their ``parent_id``), newest first."""
        ...

    async def rolled_upto(self) -> datetime | None:
        """Where the rollup has counted up to (None: it never ran)."""
        ...


class DashboardLedger(OperationsLedger, InspectionLedger, OverviewLedger, Protocol):
    """What the dashboard's pages, actions and ledger gauges read and act through
    (on PostgreSQL and on MySQL / MariaDB)."""

    async def dispose(self) -> None:
        """Close every connection the ledger opened."""
        ...


class Ledger(
    RelayLedger,
    DirectLedger,
    RoutingLedger,
    ReconcilerLedger,
    InspectionLedger,
    RetentionLedger,
    OperationsLedger,
    SchedulingLedger,
    RollupLedger,
    OverviewLedger,
    Protocol,
):
    """The whole seam."""

    async def dispose(self) -> None:
        """Close every connection the ledger opened."""
        ...


#: The timestamps of a live task :meth:`HarnessLedger.backdate` moves.
TimeColumn = Literal["run_at", "published_at", "lease_until", "expires_at"]


class HarnessLedger(Protocol):
    """The testing protocol: what the tests, the demo and ``ledgerq bench`` ask of
    a ledger besides the
    seam: emptying it, filling its history, measuring a drain, and moving time.
    No service holds it; :class:`~ledgerq.ledger.pg.PgLedger` and the sharded
    ledger implement it next to the seam, so the conformance suite
    (tests/conformance/) runs on every implementation without raw SQL."""

    async def backdate(self, ids: Iterable[int], column: TimeColumn, seconds: float) -> int:
        """Simulate time passing: set ``column`` of the live tasks ``ids`` to
        ``seconds`` before now (negative: after); how many rows moved."""
        ...

    async def count_finished(self) -> int:
        """Finished tasks in history (the synthetic ones aside)."""
        ...

    async def drain_span(self) -> tuple[int, float | None]:
        """Finished tasks, and seconds from the first publication to the last finish."""
        ...

    async def timings(self, ids: Iterable[int]) -> list[TaskTiming]:
        """When each of the finished tasks ``ids`` was created, published, started
        and finished (epoch seconds)."""
        ...

    async def truncate(self, *, keep_subscriptions: bool = False) -> None:
        """Delete every task, live and finished, every permanent key, the audit trail
        and the dashboard's rollup (tests, demo and benchmark only); and the
        workers' subscriptions unless ``keep_subscriptions`` (the benchmark's
        workers run on between its drains)."""
        ...

    async def seed_history(self, rows: int) -> None:
        """Add ``rows`` synthetic finished tasks (negative ids), then settle the table."""
        ...

    async def seed_varied_history(self, rows: int, chunk: int = 200_000) -> None:
        """Add ``rows`` synthetic finished tasks of mixed status, kind and queue
        (for measuring ``ledgerq tasks list`` on a large history)."""
        ...

    async def clear_finished(self) -> None:
        """Delete the real finished tasks, keep the synthetic ones, settle the table."""
        ...


class LedgerWithHarness(Ledger, HarnessLedger, Protocol):
    """The whole seam and its testing part: what the tests and ``ledgerq bench``
    hold of one database."""
