"""What the dashboard's overview and task page read on the MySQL / MariaDB ledger
(``overview.sql``): PostgreSQL's :class:`~ledgerq.ledger.pg.overview.PgOverview`
reads.

Throughput, latencies and dead errors come from the rollup (:mod:`.rollup`,
which the reconciler's pass keeps) for the minutes before ``upto`` -- its
``grain`` rows, minutes or, for bins of an hour or more, hours -- plus the rows
of history that finished since (the fresh tail, read through history's
``finished_at`` index), as on PostgreSQL: exact up to the last second, and the
cost flat however much finished in the window. ``upto`` None (the rollup never
ran) reads everything from history since the window's start. The tail and the
rollup count with the same rules (``overview_fragments.sql``), so a minute
reads the same from either.

Each answer is one statement in a transaction of its own, so one snapshot: the
overview's parts, read concurrently, may disagree by what moved between them,
as on PostgreSQL. ``upto`` is read before them: a step that commits meanwhile
adds rows after it, which the rollup side leaves out and the tail reads, so
nothing is counted twice. Rows come back as PostgreSQL's do
(:func:`~ledgerq.ledger.actions.jsonable`): times as ISO text in UTC, counts as
int, ages as float seconds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Row, TextClause

from ledgerq.ledger.actions import jsonable
from ledgerq.ledger.mysql.base import MyBase, aware, micros
from ledgerq.ledger.mysql.rollup import OVERVIEW_LIBRARY
from ledgerq.ledger.sql import load


@dataclass(frozen=True)
class OverviewQueries:
    """``ledger/mysql/overview.sql``."""

    live_counts: TextClause
    throughput: TextClause
    latency: TextClause
    dead_errors: TextClause
    workers: TextClause
    children: TextClause


VQ: OverviewQueries = load(
    OverviewQueries, "ledgerq.ledger.mysql", "overview.sql", OVERVIEW_LIBRARY
)

#: The counts of a ``live_counts`` row (MySQL's SUM answers a DECIMAL).
_LIVE = ("pending", "due", "scheduled", "published", "running", "waiting")


def _utc(value: datetime) -> datetime:
    """A time as the naive UTC a ``DATETIME(6)`` parameter takes."""
    return value.astimezone(UTC).replace(tzinfo=None) if value.tzinfo else value


def _window(since: datetime, upto: datetime | None, grain: str) -> dict[str, Any]:
    """The parameters that split a window between the rollup (``:since`` to
    ``:upto``) and history's fresh tail (from ``:tail``); no mark: all history."""
    start = _utc(since)
    mark = start if upto is None else _utc(upto)
    return {"since": start, "upto": mark, "tail": max(start, mark), "grain": grain}


def _row(row: Row[Any], counts: tuple[str, ...] = ("n",)) -> dict[str, Any]:
    """A row as PostgreSQL's overview answers it: times aware, as ISO text; ``counts``
    as int."""
    out: dict[str, Any] = {}
    for key, value in row._mapping.items():
        if isinstance(value, datetime):
            value = aware(value)
        out[key] = int(value) if key in counts else jsonable(value)
    return out


class MyOverview(MyBase):
    async def live_counts(self) -> list[dict[str, Any]]:
        rows = [_row(r, _LIVE) for r in await self._rows(VQ.live_counts, {})]
        for row in rows:
            age = row["oldest_due_s"]
            row["oldest_due_s"] = None if age is None else float(age)
        return rows

    async def throughput(
        self, since: datetime, step_s: float, upto: datetime | None, grain: str = "minute"
    ) -> list[dict[str, Any]]:
        params = {**_window(since, upto, grain), "step_s": step_s}
        return [_row(r) for r in await self._rows(VQ.throughput, params)]

    async def latency(
        self, since: datetime, upto: datetime | None, grain: str = "minute"
    ) -> list[dict[str, Any]]:
        rows = await self._rows(VQ.latency, _window(since, upto, grain))
        return [_row(r, ("bucket", "n")) for r in rows]

    async def dead_errors(
        self, since: datetime, upto: datetime | None, grain: str = "minute", limit: int = 20
    ) -> list[dict[str, Any]]:
        params = {**_window(since, upto, grain), "limit": limit}
        return [_row(r) for r in await self._rows(VQ.dead_errors, params)]

    async def workers(self, recent_s: float = 300.0) -> list[dict[str, Any]]:
        """PostgreSQL's ``workers`` rows (running, finished_recently, running_kinds,
        queues, last_seen, lease_until), merged here from one row per worker, kind,
        queue and state; the 50 seen last."""
        merged: dict[str, dict[str, Any]] = {}
        for r in await self._rows(VQ.workers, {"recent_us": micros(recent_s)}):
            w = merged.setdefault(
                str(r.worker),
                {"running": 0, "finished_recently": 0, "kinds": set(), "queues": set(),
                 "seen": None, "lease_until": None},
            )  # fmt: skip
            running = bool(r.running)
            w["running" if running else "finished_recently"] += int(r.n)
            if running:
                w["kinds"].add(str(r.kind))
            w["queues"].add(str(r.queue))
            w["seen"] = _either(max, w["seen"], aware(r.seen))
            w["lease_until"] = _either(min, w["lease_until"], aware(r.lease_until))
        newest = sorted(merged.items(), key=lambda kv: _seen_key(kv[1]["seen"]), reverse=True)
        return [
            {
                "worker": worker,
                "running": w["running"],
                "finished_recently": w["finished_recently"],
                "running_kinds": sorted(w["kinds"]),
                "queues": sorted(w["queues"]),
                "last_seen": jsonable(w["seen"]),
                "lease_until": jsonable(w["lease_until"]),
            }
            for worker, w in newest[:50]
        ]

    async def children(self, task_id: int, limit: int = 100) -> list[dict[str, Any]]:
        return [_row(r, ()) for r in await self._rows(VQ.children, {"id": task_id, "limit": limit})]


def _either(
    pick: Callable[[datetime, datetime], datetime], a: datetime | None, b: datetime | None
) -> datetime | None:
    """``pick`` of two times, a missing one (None) left out, as SQL's MAX and MIN."""
    if a is None or b is None:
        return a or b
    return pick(a, b)


def _seen_key(seen: datetime | None) -> float:
    """Newest first, never-seen last (PostgreSQL's ``DESC NULLS LAST``)."""
    return seen.timestamp() if seen is not None else float("-inf")
