"""Read-only inspection used by ``ledgerq stats`` and ``ledgerq show``."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Connection

from ledger.errors import TaskNotFoundError
from ledger.sql import Q


def stats(conn: Connection) -> dict[str, Any]:
    """Counts by status and by kind, for live rows and history together."""
    by_status: dict[str, int] = {}
    by_kind: dict[str, dict[str, int]] = {}
    for statement in (Q.stats_live, Q.stats_history):
        for status, kind, n in conn.execute(statement):
            by_status[status] = by_status.get(status, 0) + int(n)
            by_kind.setdefault(kind, {})[status] = by_kind.get(kind, {}).get(status, 0) + int(n)
    return {"total": sum(by_status.values()), "by_status": by_status, "by_kind": by_kind}


def _jsonable(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value


def show(conn: Connection, task_id: int) -> dict[str, Any]:
    """One task with every column, and ``location`` saying whether it is live or history."""
    row = conn.execute(Q.show_task, {"id": task_id}).mappings().first()
    if row is None:
        raise TaskNotFoundError(f"no task with id {task_id}")
    return {key: _jsonable(value) for key, value in row.items()}
