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

from sqlalchemy import TextClause

from ledgerq.core.errors import TaskNotFoundError
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
from ledgerq.ledger.filters import DEFAULT_LIMIT, MAX_BIGINT, TaskFilter, task_to_find
from ledgerq.ledger.keys import KeyRelease, release_plan
from ledgerq.ledger.options import AuditOptions, BatchedActOptions, PlanOptions
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
        task_id = await task_to_find(task_id, business_key, self.list_tasks)
        rows = await self._rows(IQ.show_task, {"id": task_id})
        if not rows:
            raise TaskNotFoundError(f"no task with id {task_id}")
        task = {k: jsonable(v) for k, v in rows[0]._mapping.items()}
        task["attempt_log"] = task.get("attempt_log") or []
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
        params = {"limit": limit, "before": before if before is not None else MAX_BIGINT}
        rows = await self._rows(OQ.list_audit, params)
        return [{k: jsonable(v) for k, v in zip(AUDIT_COLUMNS, r, strict=True)} for r in rows]

    async def act(
        self, action: Action, selection: TaskFilter, **options: Unpack[BatchedActOptions]
    ) -> Report:
        report = Report(action.name)
        progress = options.pop("progress", None)
        planned: PlanOptions = options  # the rest, progress taken out, are the plan's
        steps = plan(action, selection, report=report, **planned)
        with translated():
            async with self.engine.connect() as conn:

                async def run(statement: TextClause, params: Mapping[str, Any]) -> Rows:
                    result = await conn.execute(statement, params)
                    return result.all() if result.returns_rows else []

                async def commit() -> None:
                    await conn.commit()
                    if progress is not None:
                        progress(report)

                await adrive(steps, run, commit)
                await conn.commit()
        return report

    async def release_key(self, key: str, **options: Unpack[AuditOptions]) -> KeyRelease:
        steps = release_plan(key, **options)
        with translated():
            async with self.engine.begin() as conn:

                async def run(statement: TextClause, params: Mapping[str, Any]) -> Rows:
                    result = await conn.execute(statement, params)
                    return result.all() if result.returns_rows else []

                return await adrive(steps, run)
