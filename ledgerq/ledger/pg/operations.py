"""The operator's side of the ledger on PostgreSQL: list, show, act, audit.

``act`` runs an action's plan (:func:`ledgerq.ledger.actions.plan`) on one
connection and commits at every batch boundary: each batch of up to
``batch_size`` tasks is its own short transaction (its compare-and-sets and its
audit lines together), so a bulk action over a million tasks never holds locks
for minutes, and an action interrupted half-way leaves an audit row whose
counts say how far it got. ``progress`` is called after each commit.
``release_key`` (:mod:`ledgerq.ledger.keys`) is one short transaction: the
deaths found, released and audited together.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Unpack

from sqlalchemy import Row, TextClause
from sqlalchemy.ext.asyncio import AsyncConnection

from ledgerq.ledger.actions import (
    Action,
    Report,
    Rows,
    children_summary,
    jsonable,
    plan,
    task_row,
)
from ledgerq.ledger.after import graph
from ledgerq.ledger.batched import act_in_batches
from ledgerq.ledger.executors import AsyncRunner
from ledgerq.ledger.filters import DEFAULT_LIMIT, TaskFilter, audit_params, found_task
from ledgerq.ledger.keys import KeyRelease, release_plan
from ledgerq.ledger.options import AuditOptions, BatchedActOptions
from ledgerq.ledger.pg.base import PgBase, translated
from ledgerq.ledger.plans import adrive
from ledgerq.ledger.sql import AQ, IQ, OQ

AUDIT_COLUMNS = (
    "id", "at", "actor", "action", "selection", "options", "reason", "matched", "changed",
    "skipped", "finished_at",
)  # fmt: skip


class PgOperations(PgBase):
    async def list_tasks(self, selection: TaskFilter) -> list[dict[str, Any]]:
        params = selection.params(selection.limit or DEFAULT_LIMIT)
        return [task_row(r) for r in await self._rows(OQ.list_tasks, params)]

    async def find(
        self, task_id: int | None = None, *, business_key: str | None = None
    ) -> dict[str, Any]:
        task_id, task = await found_task(
            task_id, business_key, self.list_tasks, self._rows, IQ.show_task, _shown
        )
        task["audit"] = [
            {k: jsonable(v) for k, v in r._mapping.items()}
            for r in await self._rows(OQ.task_audit, {"id": task_id})
        ]
        family = (await self._rows(OQ.family, {"id": task_id}))[0]._mapping
        task["children"] = children_summary({k: jsonable(v) for k, v in family.items()})
        task.update(graph(await self._rows(AQ.task_graph, {"id": task_id})))
        return task

    async def audit(
        self, limit: int = DEFAULT_LIMIT, before: int | None = None
    ) -> list[dict[str, Any]]:
        rows = await self._rows(OQ.list_audit, audit_params(limit, before))
        return [{k: jsonable(v) for k, v in zip(AUDIT_COLUMNS, r, strict=True)} for r in rows]

    async def act(
        self, action: Action, selection: TaskFilter, **options: Unpack[BatchedActOptions]
    ) -> Report:
        with translated():
            async with self.engine.connect() as conn:
                run = _runner(conn)
                return await act_in_batches(
                    conn,
                    action,
                    options,
                    lambda report, planned: plan(action, selection, report=report, **planned),
                    lambda steps, commit: adrive(steps, run, commit),
                )

    async def release_key(self, key: str, **options: Unpack[AuditOptions]) -> KeyRelease:
        steps = release_plan(key, **options)
        with translated():
            async with self.engine.begin() as conn:
                return await adrive(steps, _runner(conn))


def _shown(row: Row[Any]) -> dict[str, Any]:
    return {k: jsonable(v) for k, v in row._mapping.items()}


def _runner(conn: AsyncConnection) -> AsyncRunner:
    """Statements on ``conn``, their rows back (none for a statement without)."""

    async def run(statement: TextClause, params: Mapping[str, Any]) -> Rows:
        result = await conn.execute(statement, params)
        return result.all() if result.returns_rows else []

    return run
