"""Rows of the MySQL ledger's statements as the seam's values: claimed tasks (JSON
columns decoded here, since neither driver decodes them), and a task as ``show``
returns it (timestamps as aware ISO text, JSON decoded, booleans as bool: what
PostgreSQL's ``show`` gives)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Row

from ledgerq.ledger.model import ClaimedTask
from ledgerq.ledger.mysql.base import decoded
from ledgerq.ledger.validation import MAX_CLAIM_PAYLOAD_BYTES

#: The task columns stored as JSON, and as booleans (TINYINT(1)).
JSON_COLUMNS = frozenset(
    {"payload", "retry", "checkpoint", "result", "attempt_log", "trace_context", "progress", "tags"}
)
BOOLEAN_COLUMNS = frozenset({"suspect", "expired"})


def claimed_tasks(rows: Sequence[Sequence[Any]]) -> list[ClaimedTask]:
    """The rows of ``claimed``: payloads decoded, or None when too large."""
    tasks = []
    for row in rows:
        (id_, epoch, kind, queue, text, size, attempts, max_attempts, retry, timeout_s,
         checkpoint, business_key, parent_id, waited, trace) = row  # fmt: skip
        tasks.append(
            ClaimedTask(
                int(id_),
                int(epoch),
                kind,
                queue,
                None if text is None else json.loads(text),
                int(attempts),
                int(max_attempts),
                decoded(retry),
                None if timeout_s is None else float(timeout_s),
                decoded(checkpoint),
                business_key,
                parent_id,
                None if int(size) <= MAX_CLAIM_PAYLOAD_BYTES else int(size),
                None if waited is None else max(0.0, float(waited)),
                decoded(trace),
            )
        )
    return tasks


def shown(row: Row[Any]) -> dict[str, Any]:
    """A ``show_task`` row as ``show`` returns it."""
    task: dict[str, Any] = {}
    for key, value in row._mapping.items():
        if key in JSON_COLUMNS:
            value = decoded(value)
        elif key in BOOLEAN_COLUMNS:
            value = bool(value)
        elif isinstance(value, datetime):
            value = value.replace(tzinfo=value.tzinfo or UTC).isoformat()
        task[key] = value
    return task
