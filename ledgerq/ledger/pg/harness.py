"""The testing protocol on PostgreSQL (:class:`~ledgerq.ledger.protocol.HarnessLedger`):
emptying the ledger, seeding its history, measuring a drain, moving time.

The tests, the demo and ``ledgerq bench`` use it; no service does. Its
statements are ``harness.sql``'s and ``inspection.sql``'s. ``truncate`` and the
seeds are not safe next to running services that expect their rows (the
benchmark keeps the workers' subscriptions with ``keep_subscriptions``);
``backdate`` moves a row's time under whoever holds it, as a slow clock would.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import TextClause
from sqlalchemy import exc as sa_exc

from ledgerq.ledger.model import TaskTiming
from ledgerq.ledger.pg.base import PgBase, translated
from ledgerq.ledger.protocol import TimeColumn
from ledgerq.ledger.sql import IQ, load


@dataclass(frozen=True)
class HarnessQueries:
    """``harness.sql``: the testing protocol's own statements."""

    backdate: TextClause


XQ: HarnessQueries = load(HarnessQueries, "ledgerq.ledger", "harness.sql")


class PgHarness(PgBase):
    async def backdate(self, ids: Iterable[int], column: TimeColumn, seconds: float) -> int:
        rows = await self._rows(
            XQ.backdate, {"ids": sorted(set(ids)), "column": column, "seconds": seconds}
        )
        return len(rows)

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
