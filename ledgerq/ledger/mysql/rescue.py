"""The reconciler's rescue on MySQL / MariaDB: the running rows of workers presumed
dead, and expired leases, locked a page at a time and finished, fenced
(:mod:`ledgerq.relay.rescue` judges them; this is its ledger).

One reconciler acts at a time: ``exclusive`` holds MySQL's named lock
``ledgerq.reconciler`` (``GET_LOCK``, which belongs to the session that took it,
not to a transaction, as PostgreSQL's session advisory lock) on a connection of
its own for the whole pass. A page is locked with ``FOR UPDATE SKIP LOCKED`` (a
row a worker is finishing right now is left to the next pass) and finished in
the page's own transaction by the same plan as a worker's finish, so an attempt
of a worker that was only slow cannot write over the rescue, nor the rescue over
a finish that won. The finish of a dead worker's rows taken before their
leases ran out is audited in the page's transaction (action
``rescue_dead_worker``, actor ``ledgerq``: :func:`~ledgerq.ledger.model.rescue_audit`,
the same record as PostgreSQL's), so the record exists exactly when the rescue
committed; an expired lease's finish is not audited, as on PostgreSQL.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

from sqlalchemy import TextClause
from sqlalchemy import exc as sa_exc
from sqlalchemy.ext.asyncio import AsyncConnection

from ledgerq.ledger.audit import record_rescue
from ledgerq.ledger.model import ExpiredLease, Finished, Outcome
from ledgerq.ledger.mysql import attempts, plans
from ledgerq.ledger.mysql.audit import record_audit
from ledgerq.ledger.mysql.base import MyBase, decoded, micros, translated
from ledgerq.ledger.mysql.queries import MQ


class MyExpiredBatch:
    """Expired leases (or a dead worker's rows) locked by an open transaction until
    they are finished. A dead worker's rows taken before their leases ran out are
    audited (actor ``ledgerq``) in the same transaction, as on PostgreSQL."""

    def __init__(self, conn: AsyncConnection, rows: list[ExpiredLease]) -> None:
        self._conn = conn
        self.rows = rows

    async def finish(self, outcomes: Sequence[Outcome]) -> list[Finished]:
        if not outcomes:
            return []
        run = plans.async_runner(self._conn, "ledgerq")
        finished = await plans.adrive(attempts.finish(outcomes), run)
        await record_rescue(self._conn, self.rows, finished, record_audit)
        return finished


async def _release(conn: AsyncConnection) -> None:
    """Release the reconciler's named lock. A session that died meanwhile (its
    connection killed or lost) released it with itself: the server ends a
    session's named locks with it. The dead connection is discarded, never
    handed back to the pool."""
    try:
        await conn.execute(MQ.release_reconciler_lock)
    except (sa_exc.DBAPIError, sa_exc.PendingRollbackError):
        await conn.invalidate()


class MyRescue(MyBase):
    @asynccontextmanager
    async def exclusive(self) -> AsyncIterator[bool]:
        with translated():
            async with self._autocommit.connect() as conn:  # the lock is the session's
                got = bool((await conn.execute(MQ.try_reconciler_lock)).scalar())
                try:
                    yield got
                finally:
                    if got:
                        await _release(conn)

    async def count_expired(self) -> int:
        rows = await self._rows(MQ.count_expired, {})
        return int(rows[0][0]) if rows else 0

    async def silent_workers(self) -> dict[str, int]:
        rows = await self._rows(MQ.silent_workers, {})
        return {str(r.worker): int(r.in_flight) for r in rows}

    async def dead_workers(self) -> dict[str, int]:
        rows = await self._rows(MQ.dead_workers, {})
        return {str(r.worker): int(r.in_flight) for r in rows}

    async def lapse_dead_subscriptions(self) -> int:
        with translated():
            async with self._autocommit.connect() as conn:
                return int((await conn.execute(MQ.lapse_dead_subscriptions)).rowcount)

    def expired_batch(
        self, after: int, limit: int, silent: Mapping[str, int], settle_s: float
    ) -> AbstractAsyncContextManager[MyExpiredBatch]:
        params = {
            "after": after,
            "limit": limit,
            "workers": list(silent),
            "settle_us": micros(settle_s),
        }
        return self._expired(MQ.select_expired, params, silent)

    def orphaned_batch(
        self, after: int, limit: int, dead: Mapping[str, int]
    ) -> AbstractAsyncContextManager[MyExpiredBatch]:
        params = {"after": after, "limit": limit, "workers": list(dead)}
        return self._expired(MQ.select_orphaned, params, dead, orphaned=True)

    @asynccontextmanager
    async def _expired(
        self,
        statement: TextClause,
        params: Mapping[str, Any],
        in_flight: Mapping[str, int],
        *,
        orphaned: bool = False,
    ) -> AsyncIterator[MyExpiredBatch]:
        with translated():
            async with self.engine.begin() as conn:
                rows = await conn.execute(statement, params)
                yield MyExpiredBatch(
                    conn,
                    [
                        ExpiredLease(
                            int(r.id),
                            int(r.epoch),
                            r.kind,
                            int(r.attempts),
                            decoded(r.retry),
                            r.worker,
                            in_flight.get(r.worker, 1) if r.worker is not None else 1,
                            orphaned,
                        )
                        for r in rows
                    ],
                )
