"""History's day partitions and the purge of finished tasks, on PostgreSQL
(``retention.sql``). Each operation is one statement in autocommit, so a batch
delete or a partition drop holds its locks for that statement only; the DDL
itself runs inside the migration's ``SECURITY DEFINER`` functions."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date, datetime

from ledgerq.ledger.model import HistoryDay
from ledgerq.ledger.pg.base import PgBase
from ledgerq.ledger.sql import RQ


class PgRetention(PgBase):
    async def database_now(self) -> datetime:
        now = await self._scalar(RQ.database_now)
        assert isinstance(now, datetime)
        return now

    async def history_days(self) -> list[HistoryDay]:
        return [HistoryDay(str(r.status), r.day) for r in await self._rows(RQ.history_days, {})]

    async def add_history_day(self, status: str, day: date) -> int | None:
        moved = await self._scalar(RQ.add_history_day, {"status": status, "day": day})
        return None if moved is None else int(moved)

    async def drop_history_day(self, status: str, day: date) -> int | None:
        dropped = await self._scalar(RQ.drop_history_day, {"status": status, "day": day})
        return None if dropped is None else int(dropped)

    async def purge_history_batch(self, status: str, before: datetime, limit: int) -> int:
        params = {"status": status, "before": before, "limit": limit}
        return int(await self._scalar(RQ.purge_history_batch, params))

    async def prune_dependencies(self, before: datetime, limit: int) -> int:
        params = {"before": before, "limit": limit}
        return int(await self._scalar(RQ.prune_dependencies, params))

    async def count_purgeable(self, befores: Mapping[str, datetime]) -> dict[str, int]:
        params = {"statuses": list(befores), "befores": list(befores.values())}
        return {str(r.status): int(r.n) for r in await self._rows(RQ.count_purgeable, params)}
