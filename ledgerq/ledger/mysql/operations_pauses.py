"""The operator's pauses and rate limits on the MySQL / MariaDB ledger
(``operations_pauses.sql``, table ``ledgerq_pauses`` of migration m0003;
``metering.sql``, the buckets of migration m0009): ``pause``, ``resume``,
``pauses``, ``set_limit`` and ``kinds`` (``ledgerq kinds list``), as PostgreSQL's
:mod:`ledgerq.ledger.pg.scheduling`.

A pause or resume is one short transaction of the ledger's own: the pause row,
the take-back of the queue's or kind's published tasks (locked with ``SKIP
LOCKED``, then moved back to pending by id, fenced on their epochs) and the audit
record (:func:`~ledgerq.ledger.mysql.audit.record_audit`, each task taken back
``changed``) commit together. Taking a pause in force, or lifting one that is
not, writes nothing and is not audited. Two operators pausing at once: one
inserts the row, the other meets the key (``INSERT IGNORE``, after InnoDB made
it wait for the first to commit or roll back) and reports "unchanged".

The pauses are honoured where tasks are picked: the one pick rule (fragments.sql
``due_pick``, its fragment ``ready``), which the relay's window and the direct
claim share, skips a paused queue's or kind's tasks, and both re-check it when
they lock their rows (a pause committed between a pick's read and its lock
stops the row there). A task already claimed runs on; one published before the
pause is taken back here (the message claims nothing).

A rate limit (``set_limit``) is written with its audit record in one
transaction (:func:`ledgerq.ledger.scheduling.write_limit`), its bucket full; it
waits for a pick holding the kind's bucket (:mod:`.metering`) to commit. The
picks meter it from their next transaction.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import TextClause, bindparam
from sqlalchemy.ext.asyncio import AsyncConnection

from ledgerq.ledger.actions import jsonable
from ledgerq.ledger.mysql.audit import record_audit
from ledgerq.ledger.mysql.base import MyBase, aware, translated
from ledgerq.ledger.mysql.metering import MeQ
from ledgerq.ledger.mysql.queries import LIBRARY
from ledgerq.ledger.scheduling import (
    PauseWrites,
    Pausing,
    RateLimit,
    write_limit,
)
from ledgerq.ledger.sql import load


@dataclass(frozen=True)
class PauseQueries:
    """``ledger/mysql/operations_pauses.sql``."""

    pause: TextClause
    lock_paused_published: TextClause
    unpublish_paused: TextClause
    resume: TextClause
    list_pauses: TextClause
    list_kinds: TextClause
    truncate_pauses: TextClause


_LOADED = load(PauseQueries, "ledgerq.ledger.mysql", "operations_pauses.sql", LIBRARY)
PQ = PauseQueries(
    **{
        **_LOADED.__dict__,
        "unpublish_paused": _LOADED.unpublish_paused.bindparams(bindparam("ids", expanding=True)),
    }
)


async def _take_back(conn: AsyncConnection, where: Mapping[str, str]) -> list[int]:
    """The published tasks of the paused queue or kind, locked (``SKIP LOCKED``), then
    moved back to pending by id, fenced on their epochs; their ids."""
    locked = (await conn.execute(PQ.lock_paused_published, where)).all()
    ids = [int(r.id) for r in locked]
    if ids:
        batch = json.dumps({str(r.id): {"epoch": int(r.epoch)} for r in locked})
        await conn.execute(PQ.unpublish_paused, {"ids": ids, "batch": batch})
    return ids


#: This ledger's pause statements, take-back and audit writer.
MY_PAUSES = PauseWrites(PQ.pause, PQ.resume, _take_back, record_audit, translated)


class MyPauses(MyBase, Pausing):
    pause_writes = MY_PAUSES

    async def pauses(self) -> list[dict[str, Any]]:
        rows = await self._rows(PQ.list_pauses, {})
        return [
            {k: jsonable(aware(v)) if k == "paused_at" else v for k, v in r._mapping.items()}
            for r in rows
        ]

    async def kinds(self) -> list[dict[str, Any]]:
        """Every kind with a limit, a pause or ordering "block"."""
        rows = await self._rows(PQ.list_kinds, {})
        return [{**r._mapping, "paused": bool(r.paused), "pending": int(r.pending)} for r in rows]

    async def set_limit(self, kind: str, limit: RateLimit | None, *, actor: str) -> None:
        with translated():
            async with self.engine.begin() as conn:
                await write_limit(conn, MeQ.set_limit, record_audit, kind, limit, actor=actor)
