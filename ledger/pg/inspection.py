"""Read-only questions about the ledger, and the maintenance that the benchmark,
the demo and the tests need (``inspection.sql``). Nothing here changes a live
task's status."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from sqlalchemy import exc as sa_exc

from ledgerq.ledger.errors import TaskNotFoundError
from ledgerq.ledger.model import TaskTiming
from ledgerq.ledger.pg.base import PgBase, translated
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

    async def count_finished(self) -> int:
        return int(await self._scalar(IQ.count_finished))

    async def drain_span(self) -> tuple[int, float | None]:
        [row] = await self._rows(IQ.drain_span, {})
        return int(row.n), None if row.span is None else float(row.span)

    async def timings(self, ids: Iterable[int]) -> list[TaskTiming]:
        rows = await self._rows(IQ.timings, {"ids": sorted(set(ids))})
        return [TaskTiming(r.id, r.created, r.published, r.started, r.finished) for r in rows]

    async def truncate(self, *, keep_subscriptions: bool = False) -> None:
        await self._rows(IQ.truncate, {})
        if not keep_subscriptions:
            await self._rows(IQ.truncate_subscriptions, {})
        await self._rows(IQ.reset_rollup, {})

    async def seed_history(self, rows: int) -> None:
        await self._rows(IQ.seed_history, {"n": rows})
        await self._settle(checkpoint=True)

    async def seed_varied_history(self, rows: int, chunk: int = 200_000) -> None:
        """Add ``rows`` synthetic finished tasks of mixed status, kind and queue
        (negative ids, after any already seeded), a chunk per transaction, then
        settle the table."""
        first = 1 + int(await self._scalar(IQ.lowest_synthetic_id))
        for start in range(first, first + rows, chunk):
            n = min(chunk, first + rows - start)
            await self._rows(IQ.seed_varied_history, {"first": start, "n": n})
        await self._settle(checkpoint=True)

    async def clear_finished(self) -> None:
        await self._rows(IQ.clear_finished, {})
        await self._settle(checkpoint=False)

    async def _settle(self, checkpoint: bool) -> None:
        """VACUUM (ANALYZE) the history, so a measurement starts from the state a
        long-lived, vacuumed table is in; then, if allowed, a CHECKPOINT."""
        with translated():
            async with self._autocommit.connect() as conn:
                await conn.execute(IQ.vacuum_history)
                if checkpoint:
                    # Not a superuser: no checkpoint; the measurement is noisier, not wrong.
                    with contextlib.suppress(sa_exc.DBAPIError):
                        await conn.execute(IQ.checkpoint)
