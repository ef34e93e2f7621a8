"""Read-only questions about the ledger (``inspection.sql``). Nothing here changes
anything; the maintenance the benchmark, the demo and the tests need is the
testing protocol's (:mod:`ledgerq.ledger.pg.harness`)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ledgerq.core.errors import TaskNotFoundError
from ledgerq.ledger.pg.base import PgBase
from ledgerq.ledger.sql import IQ


def _jsonable(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value


class PgInspection(PgBase):
    async def stats(self) -> dict[str, Any]:
        by_status: dict[str, int] = {}
        by_kind: dict[str, dict[str, int]] = {}
        for statement in (IQ.stats_live, IQ.stats_history):
            for row in await self._rows(statement, {}):
                status, kind, n = row.status, row.kind, row.n
                by_status[status] = by_status.get(status, 0) + int(n)
                counts = by_kind.setdefault(kind, {})
                counts[status] = counts.get(status, 0) + int(n)
        return {"total": sum(by_status.values()), "by_status": by_status, "by_kind": by_kind}

    async def show(self, task_id: int) -> dict[str, Any]:
        rows = await self._rows(IQ.show_task, {"id": task_id})
        if not rows:
            raise TaskNotFoundError(f"no task with id {task_id}")
        return {key: _jsonable(value) for key, value in rows[0]._mapping.items()}

    async def ping(self) -> bool:
        return bool(await self._scalar(IQ.ping))

    async def count_expired(self) -> int:
        return int(await self._scalar(IQ.count_expired))

    async def autovacuum_off(self) -> list[str]:
        return [str(r.reason) for r in await self._rows(IQ.autovacuum_off, {})]
