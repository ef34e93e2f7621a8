"""The dashboard's reads and the rollup step on PostgreSQL (``overview.sql``).
Each is one statement in autocommit; values come back as JSON-ready dicts."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Row

from ledgerq.ledger.actions import jsonable
from ledgerq.ledger.model import RollupStep
from ledgerq.ledger.pg.base import PgBase, translated
from ledgerq.ledger.sql import VQ

#: The mark before the rollup's first pass: everything is read from history.
NEVER = datetime(1, 1, 1, tzinfo=UTC)


def _dicts(rows: Any) -> list[dict[str, Any]]:
    out = []
    for row in rows:
        assert isinstance(row, Row)
        out.append({k: jsonable(v) for k, v in row._mapping.items()})
    return out


class PgOverview(PgBase):
    async def roll_up(self, settle_s: float, max_span_s: float, backfill_s: float) -> RollupStep:
        """``rollup_span`` then ``roll_up``, in one transaction (the span's lock held)."""
        params = {"settle_s": settle_s, "max_span_s": max_span_s, "backfill_s": backfill_s}
        with translated():
            async with self.engine.begin() as conn:
                span = (await conn.execute(VQ.rollup_span, params)).one()
                counted = (await conn.execute(VQ.roll_up, {"lo": span.lo, "hi": span.hi})).one()
        return RollupStep(
            int(counted.tasks), int(counted.rows), counted.rolled_upto, bool(span.caught_up)
        )

    async def prune_rollup(self, keep_s: float) -> int:
        return int(await self._scalar(VQ.prune_rollup, {"keep_s": keep_s}))

    async def rolled_upto(self) -> datetime | None:
        value = await self._scalar(VQ.rolled_upto)
        return value if isinstance(value, datetime) else None

    async def live_counts(self) -> list[dict[str, Any]]:
        rows = _dicts(await self._rows(VQ.live_counts, {}))
        for row in rows:
            age = row["oldest_due_s"]
            row["oldest_due_s"] = None if age is None else float(age)
        return rows

    async def throughput(
        self, since: datetime, step_s: float, upto: datetime | None, grain: str = "minute"
    ) -> list[dict[str, Any]]:
        params = {"since": since, "step_s": step_s, "upto": upto or NEVER, "grain": grain}
        return _dicts(await self._rows(VQ.throughput, params))

    async def latency(
        self, since: datetime, upto: datetime | None, grain: str = "minute"
    ) -> list[dict[str, Any]]:
        params = {"since": since, "upto": upto or NEVER, "grain": grain}
        return _dicts(await self._rows(VQ.latency, params))

    async def dead_errors(
        self, since: datetime, upto: datetime | None, grain: str = "minute", limit: int = 20
    ) -> list[dict[str, Any]]:
        params = {"since": since, "upto": upto or NEVER, "grain": grain, "limit": limit}
        return _dicts(await self._rows(VQ.dead_errors, params))

    async def workers(self, recent_s: float = 300.0) -> list[dict[str, Any]]:
        return _dicts(await self._rows(VQ.workers, {"recent_s": recent_s}))

    async def children(self, task_id: int, limit: int = 100) -> list[dict[str, Any]]:
        return _dicts(await self._rows(VQ.children, {"id": task_id, "limit": limit}))
