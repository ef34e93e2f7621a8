"""Read-only questions about the MySQL / MariaDB ledger (``inspection.sql``): what
``ledgerq stats`` shows besides its counts (the unserved backlog, the workers'
subscriptions, the broker windows). ``stats``, ``show``, ``ping`` and
``autovacuum_off`` are :class:`~ledgerq.ledger.mysql.services.MyServices`';
``count_expired`` is :class:`~ledgerq.ledger.mysql.rescue.MyRescue`'s.

Each answer is one statement in autocommit, so one snapshot of its own: the
parts of ``stats`` may disagree by what moved between them, as on PostgreSQL.
Rows come back as PostgreSQL's do: times aware (UTC), JSON arrays decoded,
booleans as bool, counts as int.

Pauses and ``kinds`` are :mod:`.operations_pauses`'.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import TextClause

from ledgerq.ledger.mysql.base import MyBase, aware, decoded
from ledgerq.ledger.sql import load


@dataclass(frozen=True)
class InspectionQueries:
    """``ledger/mysql/inspection.sql``."""

    list_subscriptions: TextClause
    unserved: TextClause
    list_windows: TextClause


IQ: InspectionQueries = load(InspectionQueries, "ledgerq.ledger.mysql", "inspection.sql")


class MyInspection(MyBase):
    async def subscriptions(self) -> list[dict[str, Any]]:
        """Every worker's subscription, live first (``ledgerq stats``)."""
        return [
            {
                "worker": str(r.worker),
                "queue": str(r.queue),
                "kinds": decoded(r.kinds),
                "shards": decoded(r.shards),
                "route": r.route,
                "capacity": int(r.capacity),
                "direct": bool(r.direct),
                "started_at": aware(r.started_at),
                "expires_at": aware(r.expires_at),
                "live": bool(r.live),
            }
            for r in await self._rows(IQ.list_subscriptions, {})
        ]

    async def windows(self) -> list[dict[str, Any]]:
        """Each live broker route's window: capacity, published, room."""
        windows = []
        for r in await self._rows(IQ.list_windows, {}):
            capacity, published = int(r.capacity), int(r.published)
            windows.append(
                {
                    "queue": str(r.queue),
                    "route": str(r.route),
                    "capacity": capacity,
                    "published": published,
                    "room": max(capacity - published, 0),
                }
            )
        return windows

    async def unserved(self) -> list[dict[str, Any]]:
        """Due tasks of queues no live subscription covers, by queue, kind, shard."""
        return [
            {
                "queue": str(r.queue),
                "kind": str(r.kind),
                "shard": int(r.shard),
                "tasks": int(r.tasks),
                "oldest": aware(r.oldest),
            }
            for r in await self._rows(IQ.unserved, {})
        ]
