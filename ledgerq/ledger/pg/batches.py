"""The locked pages the relay and the reconciler hold on PostgreSQL while they act
on them: :class:`PgPublishBatch` (due rows, marked published and committed
before the publish; returned if it fails) and :class:`PgExpiredBatch` (leases
that lapsed, finished by the rescuer). Each holds one transaction open for the
caller's block, so its rows stay locked until it ends (see
:mod:`ledgerq.ledger.pg.services`, which opens them).
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy.ext.asyncio import AsyncConnection

from ledgerq.ledger.audit import record_rescue
from ledgerq.ledger.model import DueTask, ExpiredLease, Finished, Outcome
from ledgerq.ledger.params import outcome_params
from ledgerq.ledger.pg.audit import record_audit
from ledgerq.ledger.pg.base import translated
from ledgerq.ledger.pg.rows import finished_rows
from ledgerq.ledger.sql import Q


class PgPublishBatch:
    """Due rows locked by the open transaction while they are published."""

    def __init__(self, conn: AsyncConnection, rows: list[DueTask]) -> None:
        self._conn = conn
        self.rows = rows

    async def mark_published(self, rows: Sequence[DueTask]) -> set[int]:
        if not rows:
            return set()
        ordered = sorted(rows, key=lambda r: r.id)
        params = {
            "ids": [r.id for r in ordered],
            "epochs": [r.epoch for r in ordered],
            "routes": [r.route or "" for r in ordered],
        }
        with translated():
            result = await self._conn.execute(Q.mark_published, params)
        return {int(r[0]) for r in result}


class PgExpiredBatch:
    """Expired leases (or a dead worker's rows) locked by the open transaction;
    finished inside it. A dead worker's rows taken before their leases ran out
    are audited (actor ``ledgerq``) in the same transaction."""

    def __init__(self, conn: AsyncConnection, rows: list[ExpiredLease]) -> None:
        self._conn = conn
        self.rows = rows

    async def finish(self, outcomes: Sequence[Outcome]) -> list[Finished]:
        if not outcomes:
            return []
        with translated():
            finished = finished_rows(
                (await self._conn.execute(Q.finish, outcome_params(outcomes))).all()
            )
            await record_rescue(self._conn, self.rows, finished, record_audit)
            return finished
