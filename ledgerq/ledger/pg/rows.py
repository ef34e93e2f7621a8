"""Rows of the named statements turned into the seam's values (:mod:`ledgerq.ledger.model`):
claimed tasks, finished tasks, due tasks. Shared by the services and the locked
batches (:mod:`.services`, :mod:`.batches`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from operator import itemgetter
from typing import Any

from sqlalchemy import Row

from ledgerq.ledger.model import (
    ClaimedTask,
    DueTask,
    Finished,
)
from ledgerq.ledger.validation import MAX_CLAIM_PAYLOAD_BYTES

#: The columns of ``claim`` and ``claim_due``, in the order :class:`ClaimedTask` takes them.
_CLAIMED = (
    "id",
    "epoch",
    "kind",
    "queue",
    "payload_text",
    "attempts",
    "max_attempts",
    "retry",
    "timeout_s",
    "checkpoint",
    "business_key",
    "parent_id",
    "payload_bytes",
    "waited_s",
    "trace_context",
)
_FINISHED = ("id", "kind", "attempts", "status", "last_error")


def columns_of(row: Row[Any], names: Sequence[str]) -> Callable[[Row[Any]], tuple[Any, ...]]:
    """A getter of ``names`` from rows shaped like ``row``, by position: the names are
    looked up once per batch, not once per row (a named attribute per column per row
    was most of the cost of turning a claim's rows into tasks: 24 against 9 us a row)."""
    at = {name: i for i, name in enumerate(row._fields)}
    return itemgetter(*(at[name] for name in names))


def claimed_tasks(rows: Sequence[Row[Any]]) -> list[ClaimedTask]:
    """The rows of ``claim`` or ``claim_due``: payloads decoded, or None when too large."""
    if not rows:
        return []
    get = columns_of(rows[0], _CLAIMED)
    tasks = []
    for row in rows:
        (id_, epoch, kind, queue, text, attempts, max_attempts, retry, timeout_s, checkpoint,
         business_key, parent_id, size, waited, trace) = get(row)  # fmt: skip
        tasks.append(
            ClaimedTask(
                id_,
                epoch,
                kind,
                queue,
                None if text is None else json.loads(text),
                attempts,
                max_attempts,
                retry,
                timeout_s,
                checkpoint,
                business_key,
                parent_id,
                None if size <= MAX_CLAIM_PAYLOAD_BYTES else int(size),
                None if waited is None else max(0.0, float(waited)),
                trace,
            )
        )
    return tasks


def finished_rows(rows: Sequence[Row[Any]]) -> list[Finished]:
    if not rows:
        return []
    get = columns_of(rows[0], _FINISHED)
    finished = []
    for row in rows:
        id_, kind, attempts, status, last_error = get(row)
        finished.append(Finished(id_, kind, attempts, status, last_error))
    return finished


def due_tasks(rows: Sequence[Row[Any]]) -> list[DueTask]:
    """The rows of ``select_due``, ``select_overdue`` or ``select_stalled`` (which has no
    trace context and no subscriber count: none, and one)."""
    if not rows:
        return []
    fields = rows[0]._fields
    get = columns_of(rows[0], ("id", "kind", "queue", "priority", "epoch", "suspect"))
    trace = fields.index("trace_context") if "trace_context" in fields else None
    route = fields.index("route") if "route" in fields else None
    subscribers = fields.index("subscribers") if "subscribers" in fields else None
    tasks = []
    for row in rows:
        id_, kind, queue, priority, epoch, suspect = get(row)
        tasks.append(
            DueTask(
                id_,
                kind,
                queue,
                priority,
                epoch,
                suspect,
                None if trace is None else row[trace],
                None if route is None else row[route] or None,
                1 if subscribers is None else row[subscribers] or 1,
            )
        )
    return tasks
