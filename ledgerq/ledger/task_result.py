"""What :func:`~ledgerq.ledger.results.result` returns: :class:`TaskResult`, a task
as it stands, read from the live table or history; and the typed error for an id
the ledger does not hold (:func:`not_found`).

A value of the storage seam (``ended_results``, ``child_results``), below the
waiting machinery that uses it (:mod:`ledgerq.ledger.results`,
:mod:`ledgerq.ledger.pg.waiters`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ledgerq.core.errors import TaskNotFoundError
from ledgerq.ledger.split.ids import shard_of_id

#: Terminal statuses.
TERMINAL = frozenset({"succeeded", "dead", "cancelled"})


@dataclass(frozen=True)
class TaskResult:
    """A task as it stands: terminal once :func:`result` returns it."""

    id: int
    kind: str
    #: ``succeeded``, ``dead`` or ``cancelled`` (or a live status, in ``ctx.children``).
    status: str
    #: The handler's JSON return value (None: it returned None, or did not succeed).
    value: Any
    #: The last attempt's error (None when it succeeded).
    error: str | None
    attempts: int
    #: None: left to the kind's default (``@task``) and never claimed, so never filled.
    max_attempts: int | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None

    @property
    def done(self) -> bool:
        """Whether the task is terminal."""
        return self.status in TERMINAL

    @property
    def succeeded(self) -> bool:
        return self.status == "succeeded"


def task_result(row: Any) -> TaskResult:
    """A TaskResult from a row of ``ended_results`` or ``child_results`` (results.sql)."""
    return TaskResult(
        id=int(row[0]),
        kind=row[1],
        status=row[2],
        value=row[3],
        error=row[4],
        attempts=int(row[5]),
        max_attempts=None if row[6] is None else int(row[6]),
        created_at=row[7],
        started_at=row[8],
        finished_at=row[9],
    )


def children_params(parent_id: int, after: int, limit: int) -> dict[str, Any]:
    """``child_results``' parameters (``ctx.children``), ``limit`` checked (1 to
    10,000), on either server."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 10_000:
        raise ValueError(f"children(limit=...) is 1 to 10000, got {limit!r}")
    return {"parent_id": parent_id, "after": after, "limit": limit}


def not_found(task_id: int) -> TaskNotFoundError:
    return TaskNotFoundError(
        f"task {task_id} is not in the ledger (live or history): its enqueue has not "
        "committed (commit before waiting), it rolled back, or retention purged it"
        + _shard_hint(task_id)
    )


def _shard_hint(task_id: int) -> str:
    shard = shard_of_id(task_id)
    if shard == 0:
        return ""
    return f"; its id is of ledger shard {shard}: pass the Shards router or that shard's engine"
