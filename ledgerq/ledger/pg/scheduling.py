"""Pauses and rate limits on PostgreSQL (``scheduling.sql``, and
``register_limits`` from ``queries.sql``).

A pause or resume is one short transaction: the pause row, the take-back of
published tasks (a fenced compare-and-set, ``unpublish_paused``) and the audit
record with each task taken back commit together, so an audit row never
describes a change that did not happen. Taking a pause that is already in
force, or lifting one that is not, writes nothing and is not audited.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from ledgerq.ledger.actions import jsonable
from ledgerq.ledger.model import KindDefaults
from ledgerq.ledger.pg.audit import record_audit
from ledgerq.ledger.pg.base import PgBase, translated
from ledgerq.ledger.scheduling import (
    PauseWrites,
    Pausing,
    RateLimit,
    write_limit,
)
from ledgerq.ledger.sql import SQ, Q


async def _take_back(conn: AsyncConnection, where: Mapping[str, str]) -> list[int]:
    """``unpublish_paused``: one fenced compare-and-set; the ids it took back."""
    return [int(r[0]) for r in await conn.execute(SQ.unpublish_paused, where)]


#: This ledger's pause statements, take-back and audit writer.
PG_PAUSES = PauseWrites(SQ.pause, SQ.resume, _take_back, record_audit, translated)


class PgScheduling(PgBase, Pausing):
    pause_writes = PG_PAUSES

    async def pauses(self) -> list[dict[str, Any]]:
        rows = await self._rows(SQ.list_pauses, {})
        return [{k: jsonable(v) for k, v in r._mapping.items()} for r in rows]

    async def set_limit(self, kind: str, limit: RateLimit | None, *, actor: str) -> None:
        with translated():
            async with self.engine.begin() as conn:
                await write_limit(conn, SQ.set_limit, record_audit, kind, limit, actor=actor)

    async def register_limits(self, limits: Mapping[str, RateLimit]) -> list[str]:
        if not limits:
            return []
        kinds = sorted(limits)  # one lock order for workers starting together
        params = {
            "kinds": kinds,
            "rates": [limits[k].rate_per_s for k in kinds],
            "bursts": [limits[k].burst for k in kinds],
        }
        return [str(r[0]) for r in await self._rows(Q.register_limits, params)]

    async def register_ordering(self, orderings: Mapping[str, str]) -> list[str]:
        if not orderings:
            return []
        kinds = sorted(orderings)
        params = {"kinds": kinds, "orderings": [orderings[k] for k in kinds]}
        return [str(r[0]) for r in await self._rows(Q.register_ordering, params)]

    async def register_sticky(self, windows: Mapping[str, float | None]) -> list[str]:
        if not windows:
            return []
        kinds = sorted(windows)
        params = {"kinds": kinds, "seconds": [windows[k] for k in kinds]}
        return [str(r[0]) for r in await self._rows(Q.register_sticky, params)]

    async def register_children_done(self, callbacks: Mapping[str, str | None]) -> list[str]:
        if not callbacks:
            return []
        kinds = sorted(callbacks)
        params = {"kinds": kinds, "callbacks": [callbacks[k] for k in kinds]}
        return [str(r[0]) for r in await self._rows(Q.register_children_done, params)]

    async def register_defaults(self, defaults: Mapping[str, KindDefaults]) -> list[str]:
        if not defaults:
            return []
        kinds = sorted(defaults)
        params = {
            "kinds": kinds,
            "max_attempts": [defaults[k].max_attempts for k in kinds],
            "retries": [_json_or_none(defaults[k].retry) for k in kinds],
            "timeouts": [defaults[k].timeout_s for k in kinds],
        }
        return [str(r[0]) for r in await self._rows(Q.register_defaults, params)]

    async def kinds(self) -> list[dict[str, Any]]:
        rows = await self._rows(SQ.list_kinds, {})
        return [{k: jsonable(v) for k, v in r._mapping.items()} for r in rows]


def _json_or_none(value: Mapping[str, Any] | None) -> str | None:
    return None if value is None else json.dumps(value)
