"""Read the ledger: :func:`stats`, :func:`show`, :func:`list_tasks`, :func:`audit`
(and their async twins), what ``ledgerq stats``, ``show``, ``tasks list`` and
``tasks audit`` print.

Each opens the target's ledger (every shard of it) for the call, reads, and
closes it; nothing is written. A read racing writers sees each statement's
snapshot: the counts of :func:`stats` come from one statement, its workers and
windows from others a moment later, so they may disagree by what moved between.
"""

from __future__ import annotations

from collections.abc import Iterable

from ledgerq.admin.reports import LiveWorker, Stats, Unserved, Window
from ledgerq.admin.results import AuditRecord, TaskDetail, TaskRow
from ledgerq.admin.targets import Target, operator_ledger, sync_twin
from ledgerq.core.errors import InvalidFilterError
from ledgerq.ledger.filters import DEFAULT_LIMIT, TaskFilter

#: The most audit records one call returns.
MAX_AUDIT_LIMIT = 100_000


async def astats(target: Target) -> Stats:
    """Counts by status and by kind, the due tasks no live worker serves, the live
    workers with what each serves, and each live broker route's window."""
    async with operator_ledger(target) as ledger:
        counts = await ledger.stats()
        unserved = tuple(Unserved.from_row(row) for row in await ledger.unserved())
        workers = tuple(
            LiveWorker(
                worker=row["worker"],
                queue=row["queue"],
                kinds=None if row["kinds"] is None else tuple(row["kinds"]),
                shards=None if row["shards"] is None else tuple(row["shards"]),
                # --shards auto: its shards are its pool's split (consumers/shard_pool.py)
                auto="+auto." in row["worker"],
                since=row["started_at"],
            )
            for row in await ledger.subscriptions()
            if row["live"]
        )
        windows = tuple(Window.from_row(row) for row in await ledger.windows())
    return Stats(
        total=counts["total"],
        by_status=counts["by_status"],
        by_kind=counts["by_kind"],
        unserved=unserved,
        workers=workers,
        windows=windows,
    )


stats = sync_twin(astats)


async def ashow(
    target: Target, task_id: int | None = None, *, key: str | None = None
) -> TaskDetail:
    """One task, by id or (``key``) the newest with that business key: every column,
    each ended attempt and the operator actions that touched it.
    :class:`~ledgerq.core.errors.TaskNotFoundError` if there is none."""
    if (task_id is None) == (key is None):
        raise InvalidFilterError("show: give a task id or key=BUSINESS_KEY (one of them)")
    async with operator_ledger(target) as ledger:
        return TaskDetail.read(await ledger.find(task_id, business_key=key))


show = sync_twin(ashow)


async def alist_tasks(target: Target, selection: TaskFilter | None = None) -> list[TaskRow]:
    """Live and finished tasks ``selection`` matches (None: any), newest first, at most
    its ``limit`` (default 50); the next page is ``before=`` the last id."""
    async with operator_ledger(target) as ledger:
        rows = await ledger.list_tasks(selection or TaskFilter())
    return [TaskRow.from_row(row) for row in rows]


list_tasks = sync_twin(alist_tasks)


async def aaudit(
    target: Target, limit: int = DEFAULT_LIMIT, before: int | None = None
) -> list[AuditRecord]:
    """Operator actions, newest first (ids below ``before``): who, when, what, on
    which selection, and the counts."""
    if not isinstance(limit, int) or not 1 <= limit <= MAX_AUDIT_LIMIT:
        raise InvalidFilterError(f"limit: expected 1..{MAX_AUDIT_LIMIT}, got {limit!r}")
    async with operator_ledger(target) as ledger:
        rows = await ledger.audit(limit, before)
    return [AuditRecord.from_row(row) for row in rows]


audit = sync_twin(aaudit)


def rows_json(rows: Iterable[TaskRow | AuditRecord]) -> list[dict[str, object]]:
    """A list's ``--json``."""
    return [row.to_json() for row in rows]
