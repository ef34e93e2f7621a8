"""The testing protocol on MySQL / MariaDB, as far as it is built: emptying the
ledger, its audit trail and the dashboard's rollup included, and moving time
(``truncate``, ``backdate``),
filling history with synthetic finished tasks (``seed_history``,
``seed_varied_history``: negative ids, ``harness.sql``), and measuring a drain
(``count_finished``, ``drain_span``, ``timings``, ``clear_finished``: the
benchmark's and the demo's)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import TextClause

from ledgerq.ledger.model import TaskTiming
from ledgerq.ledger.mysql.base import MyBase, micros, translated
from ledgerq.ledger.mysql.dependencies import DQ
from ledgerq.ledger.mysql.families import FQ
from ledgerq.ledger.mysql.operations_pauses import PQ
from ledgerq.ledger.mysql.operations_plans import OPQ
from ledgerq.ledger.mysql.queries import MQ
from ledgerq.ledger.mysql.rollup import UQ
from ledgerq.ledger.protocol import TimeColumn
from ledgerq.ledger.sql import load_in_lists

#: Rows one seeding statement adds at most (harness.sql numbers them with five digits).
SEED_CHUNK = 100_000


@dataclass(frozen=True)
class HarnessQueries:
    """``ledger/mysql/harness.sql``."""

    seed_history: TextClause
    seed_varied_history: TextClause
    lowest_synthetic_id: TextClause
    analyze_history: TextClause
    count_finished: TextClause
    drain_span: TextClause
    timings: TextClause
    clear_finished: TextClause


HQ: HarnessQueries = load_in_lists(HarnessQueries, "ledgerq.ledger.mysql", "harness.sql")


def _seconds(value: object) -> float | None:
    return None if value is None else float(str(value))


class MyHarness(MyBase):
    async def backdate(self, ids: Iterable[int], column: TimeColumn, seconds: float) -> int:
        wanted = sorted(set(ids))
        if not wanted:
            return 0
        params = {"ids": wanted, "column": column, "offset_us": micros(seconds)}
        with translated():
            async with self.engine.begin() as conn:
                return int((await conn.execute(MQ.backdate, params)).rowcount)

    async def truncate(self, *, keep_subscriptions: bool = False) -> None:
        statements = [MQ.truncate_tasks, MQ.truncate_history, MQ.truncate_keys, MQ.truncate_kinds]
        statements += [OPQ.truncate_audit, PQ.truncate_pauses]  # the operator's (m0002, m0003)
        statements += [DQ.truncate_dependencies, FQ.truncate_families]  # m0007
        # the dashboard's rollup, its mark cleared: it starts again from its backfill (m0012)
        statements += [UQ.truncate_rollup_counts, UQ.truncate_rollup_latency, UQ.reset_rollup]
        if not keep_subscriptions:
            statements += [MQ.truncate_subscriptions, MQ.truncate_workers]
        with translated():
            async with self.engine.begin() as conn:
                for statement in statements:
                    await conn.execute(statement)

    async def seed_history(self, rows: int) -> None:
        """Add ``rows`` synthetic tasks that succeeded now (ids -1 .. -rows, as on
        PostgreSQL), a chunk per statement, then analyze the table."""
        await self._seed(HQ.seed_history, 1, rows, SEED_CHUNK)

    async def seed_varied_history(self, rows: int, chunk: int = 200_000) -> None:
        """Add ``rows`` synthetic finished tasks of mixed status, kind and queue
        (negative ids, after any already seeded), then analyze the table."""
        first = 1 + int((await self._rows(HQ.lowest_synthetic_id, {}))[0].n)
        await self._seed(HQ.seed_varied_history, first, rows, min(chunk, SEED_CHUNK))

    async def _seed(self, statement: TextClause, first: int, rows: int, chunk: int) -> None:
        with translated():
            for start in range(first, first + rows, chunk):
                async with self.engine.begin() as conn:
                    n = min(chunk, first + rows - start)
                    await conn.execute(statement, {"first": start, "n": n})
        await self._rows(HQ.analyze_history, {})

    async def count_finished(self) -> int:
        return int((await self._rows(HQ.count_finished, {}))[0].n)

    async def drain_span(self) -> tuple[int, float | None]:
        [row] = await self._rows(HQ.drain_span, {})
        return int(row.n), None if row.span is None else float(row.span)

    async def timings(self, ids: Iterable[int]) -> list[TaskTiming]:
        wanted = sorted(set(ids))
        if not wanted:
            return []
        rows = await self._rows(HQ.timings, {"ids": wanted})
        return [
            TaskTiming(int(r.id), float(r.created), _seconds(r.published), _seconds(r.started),
                       _seconds(r.finished))
            for r in rows
        ]  # fmt: skip

    async def clear_finished(self) -> None:
        await self._rows(HQ.clear_finished, {})
