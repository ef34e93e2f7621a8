"""History's day partitions and the purge of finished tasks, on MySQL / MariaDB
(``retention.sql``; the layout is migration m0004's: ``ledgerq_history``
partitioned by ``RANGE COLUMNS (status, finished_at)``, a run of partitions per
status: ``p_<status>_old``, the day partitions ``p_<status>_<YYYYMMDD>``, then
``p_<status>_new``).

The contract is :class:`~ledgerq.ledger.protocol.RetentionLedger`'s, with
these differences from PostgreSQL:

- A range partition holds everything from the bound of the one before it. A
  day partition created after a gap (days with no partition: retention did not
  run) takes the gap's rows too, all of them older than its day, so dropping it
  once its day has expired still removes only expired tasks; the upkeep pass
  keeps the days contiguous (it creates today and the days ahead), so a day
  partition holds its day. Dropping a partition hands its (empty) range to the
  next one, so dropping the oldest day first, as retention does, changes
  nothing the next day holds.
- :meth:`add_history_day` splits the partition that holds the day (``REORGANIZE
  PARTITION``: a copy of that partition's rows, none when retention keeps days
  ahead); :meth:`drop_history_day` counts the day's rows, then drops it. Both
  are DDL: each waits at most 2 s for history's metadata lock
  (``lock_wait_timeout``), and a refusal is
  :class:`~ledgerq.core.errors.TransientStorageError` (busy: tried again next
  pass). While one waits, statements that would write history (``finish``)
  queue behind it, for those 2 s at most.
- Partition changes are serialised by a named lock (``ledgerq.retention``), so
  two passes at once never split the same partition: the second finds the day
  created (None) or dropped (None). The count of a dropped day is read just
  before the drop; a task reaches history stamped with the database's clock,
  never into an expired day, so nothing lands in between.
- On a server without partitioning (the migration then left history as one
  table) there are no days: :meth:`history_days` is empty, :meth:`add_history_day`
  and :meth:`drop_history_day` return None, and retention deletes in batches.
- :meth:`prune_dependencies` deletes edges (``after=``) whose dependent ended
  before the cutoff and is not live, oldest first, one batch per statement
  (``dependencies.sql``), as PostgreSQL's ``ledgerq_dependencies_prune``.

Every statement but the partition changes (one connection, under the named
lock) runs alone in autocommit.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any

from sqlalchemy import Row, TextClause, text
from sqlalchemy import exc as sa_exc
from sqlalchemy.ext.asyncio import AsyncConnection

from ledgerq.core.errors import TransientStorageError
from ledgerq.ledger.model import HistoryDay
from ledgerq.ledger.mysql.base import MyBase, aware, translated
from ledgerq.ledger.mysql.dependencies import DQ
from ledgerq.ledger.mysql.engines import utc
from ledgerq.ledger.sql import load

#: The terminal statuses, the only ones a partition is named after.
STATUSES = ("cancelled", "dead", "succeeded")
_DAY = re.compile(r"^p_(cancelled|dead|succeeded)_([0-9]{8})$")
#: A bound as the catalog shows it: ``'dead','2026-11-29'`` (MySQL may add a time
#: and charset introducers such as ``_utf8mb4'dead'``) or ``'dead',MAXVALUE``.
_BOUND = re.compile(
    r"^(?:_\w+)?'(\w+)',\s*(?:(?:_\w+)?'([0-9]{4}-[0-9]{2}-[0-9]{2})[^']*'|(MAXVALUE))$"
)


@dataclass(frozen=True)
class RetentionQueries:
    """``ledger/mysql/retention.sql``."""

    database_now: TextClause
    history_partitions: TextClause
    take_lock: TextClause
    release_lock: TextClause
    short_lock_wait: TextClause
    default_lock_wait: TextClause
    split_last: TextClause
    split_bounded: TextClause
    split_old: TextClause
    rename_old: TextClause
    count_partition: TextClause
    drop_partition: TextClause
    purge_history_batch: TextClause
    count_purgeable: TextClause


RQ: RetentionQueries = load(RetentionQueries, "ledgerq.ledger.mysql", "retention.sql")


def _naming(statement: TextClause, partition: str, day: str = "") -> TextClause:
    """``statement`` naming ``partition`` (and ``day``): names this module made from a
    terminal status and a date, never from a caller's text."""
    assert _DAY.match(day) or not day
    assert re.fullmatch(r"p_(cancelled|dead|succeeded)_(old|new|[0-9]{8})", partition)
    return text(statement.text.format(partition=partition, day=day))


def day_partition(status: str, day: date) -> str:
    if status not in STATUSES:
        raise ValueError(f"{status!r} is not a terminal status ({', '.join(STATUSES)})")
    return f"p_{status}_{day:%Y%m%d}"


@dataclass(frozen=True)
class Partition:
    """One of history's partitions: its name, its status, and the day its bound
    is (None: MAXVALUE, the status's last)."""

    name: str
    status: str
    bound: date | None

    @property
    def day(self) -> date | None:
        """The day a day partition holds (None for the old and new ones)."""
        found = _DAY.match(self.name)
        return None if found is None else datetime.strptime(found[2], "%Y%m%d").date()


def _partition(name: str, bound: str) -> Partition:
    found = _BOUND.match(bound.strip())
    if found is None:
        raise ValueError(f"history partition {name}: unexpected bound {bound!r}")
    day = None if found[3] else date.fromisoformat(found[2])
    return Partition(name, found[1], day)


class MyRetention(MyBase):
    async def database_now(self) -> datetime:
        now = aware((await self._rows(RQ.database_now, {}))[0].now)
        assert now is not None
        return now

    async def _partitions(self, conn: AsyncConnection | None = None) -> list[Partition]:
        """History's partitions in bound order (on ``conn``, or a connection of its own)."""
        if conn is None:
            rows: Sequence[Row[Any]] = await self._rows(RQ.history_partitions, {})
        else:
            rows = (await conn.execute(RQ.history_partitions)).all()
        return [_partition(str(r.name), str(r.bound)) for r in rows]

    async def history_days(self) -> list[HistoryDay]:
        days = [HistoryDay(p.status, p.day) for p in await self._partitions() if p.day is not None]
        return sorted(days, key=lambda d: (d.status, d.day))

    async def add_history_day(self, status: str, day: date) -> int | None:
        name = day_partition(status, day)
        async with self._changing() as conn:
            partitions = [p for p in await self._partitions(conn) if p.status == status]
            at = next(
                (k for k, p in enumerate(partitions) if p.bound is None or p.bound > day), None
            )
            if at is None or partitions[at].name == name:
                return None  # not partitioned, or the day exists
            holder, day_end = partitions[at], day + timedelta(days=1)
            params: dict[str, object] = {"status": status, "day": day, "day_end": day_end}
            if holder.bound is None:
                statement = RQ.split_last
            elif holder.bound > day_end:
                statement, params["bound"] = RQ.split_bounded, holder.bound
            elif at > 0 and (partitions[at - 1].bound or day) >= day:
                statement = RQ.rename_old  # p_<status>_old holds this day alone
            else:
                statement = RQ.split_old  # p_<status>_old ends with this day
            await conn.execute(_naming(statement, holder.name, name), params)
            return int((await conn.execute(_naming(RQ.count_partition, name))).scalar_one())

    async def drop_history_day(self, status: str, day: date) -> int | None:
        name = day_partition(status, day)
        async with self._changing() as conn:
            if name not in {p.name for p in await self._partitions(conn)}:
                return None
            held = int((await conn.execute(_naming(RQ.count_partition, name))).scalar_one())
            await conn.execute(_naming(RQ.drop_partition, name))
            return held

    async def purge_history_batch(self, status: str, before: datetime, limit: int) -> int:
        params = {"status": status, "before": utc(before), "limit": limit}
        with translated():
            async with self._autocommit.connect() as conn:
                return int((await conn.execute(RQ.purge_history_batch, params)).rowcount)

    async def prune_dependencies(self, before: datetime, limit: int) -> int:
        params = {"before": utc(before), "limit": limit}
        with translated():
            async with self._autocommit.connect() as conn:
                return int((await conn.execute(DQ.prune_dependencies, params)).rowcount)

    async def count_purgeable(self, befores: Mapping[str, datetime]) -> dict[str, int]:
        counts = {}
        for status, before in befores.items():
            rows = await self._rows(RQ.count_purgeable, {"status": status, "before": utc(before)})
            counts[status] = int(rows[0].n)
        return counts

    @asynccontextmanager
    async def _changing(self) -> AsyncIterator[AsyncConnection]:
        """One autocommit connection holding the named lock ``ledgerq.retention`` and
        a 2 s ``lock_wait_timeout``, both given back on the way out; errors translated
        (a lock not granted within 2 s: busy)."""
        with translated():
            async with self._autocommit.connect() as conn:
                if (await conn.execute(RQ.take_lock)).scalar_one() != 1:
                    raise TransientStorageError("history's partitions: another pass holds them")
                try:
                    await conn.execute(RQ.short_lock_wait)
                    yield conn
                finally:
                    try:
                        await conn.execute(RQ.default_lock_wait)
                        await conn.execute(RQ.release_lock)
                    except sa_exc.DBAPIError:
                        await conn.invalidate()  # lost: its session (and lock) went with it
