"""The testing protocol on MySQL / MariaDB, as far as it is built: emptying the
ledger and moving time (``truncate``, ``backdate``). Seeding and measuring a
drain (the benchmark's) are not built yet."""

from __future__ import annotations

from collections.abc import Iterable

from ledgerq.ledger.mysql.base import MyBase, micros, translated
from ledgerq.ledger.mysql.queries import MQ
from ledgerq.ledger.protocol import TimeColumn


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
        if not keep_subscriptions:
            statements += [MQ.truncate_subscriptions, MQ.truncate_workers]
        with translated():
            async with self.engine.begin() as conn:
                for statement in statements:
                    await conn.execute(statement)
