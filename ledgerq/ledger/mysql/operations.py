"""The operator's side of the MySQL / MariaDB ledger: list, find, act, audit
(:class:`~ledgerq.ledger.protocol.OperationsLedger`), as PostgreSQL's
:mod:`ledgerq.ledger.pg.operations`.

``act`` runs an action's plan (:func:`.operations_plans.act`) on one connection
of the ledger's own (READ COMMITTED, :mod:`.engines`) and commits at every batch
boundary: each batch of up to ``batch_size`` tasks is its own short transaction
(its compare-and-sets and its audit lines together), so a bulk action never
holds locks for long, and an action interrupted half-way leaves an audit record
whose counts say how far it got. ``progress`` is called after each commit.

``release_key`` releases an ordering key held by dead tasks of a blocking kind
in one transaction of the ledger's own: :func:`.keys.release`'s plan, the one
:mod:`.tx` drives in the caller's transaction.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from datetime import datetime
from typing import Any, TypeVar, Unpack

from ledgerq.ledger.actions import Action, Report, children_summary, jsonable
from ledgerq.ledger.after import graph
from ledgerq.ledger.batched import act_in_batches
from ledgerq.ledger.filters import DEFAULT_LIMIT, TaskFilter, audit_params, found_task
from ledgerq.ledger.keys import KeyRelease
from ledgerq.ledger.mysql import keys
from ledgerq.ledger.mysql import operations_plans as ops
from ledgerq.ledger.mysql.base import MyBase, aware, decoded, translated
from ledgerq.ledger.mysql.dependencies import DQ
from ledgerq.ledger.mysql.families import FQ
from ledgerq.ledger.mysql.plans import Answer, AsyncRunner, Runner, async_runner
from ledgerq.ledger.mysql.queries import MQ
from ledgerq.ledger.mysql.rows import shown
from ledgerq.ledger.options import AuditOptions, BatchedActOptions

R = TypeVar("R")
AUDIT_COLUMNS = (
    "id", "at", "actor", "action", "selection", "options", "reason", "matched", "changed",
    "skipped", "finished_at",
)  # fmt: skip
TASK_AUDIT_COLUMNS = ("id", "at", "actor", "action", "reason", "outcome")
_JSON_AUDIT = frozenset({"selection", "options"})


def _value(name: str, value: Any) -> Any:
    if name in _JSON_AUDIT:
        return decoded(value)
    return jsonable(aware(value)) if isinstance(value, datetime) else value


def audit_rows(columns: tuple[str, ...], rows: Any) -> list[dict[str, Any]]:
    """Audit rows as PostgreSQL's give them: JSON decoded, times as aware ISO text."""
    return [{k: _value(k, v) for k, v in zip(columns, r, strict=True)} for r in rows]


def drive(plan: Generator[Any, Answer, R], run: Runner) -> R:
    """Run a plan on the caller's sync transaction; batch boundaries (None) are
    ignored (the caller commits)."""
    try:
        step = next(plan)
        while True:
            step = plan.send(run(*step) if step is not None else Answer([], 0, None))
    except StopIteration as stop:
        done: R = stop.value
        return done


async def adrive(
    plan: Generator[Any, Answer, R],
    run: AsyncRunner,
    commit: Callable[[], Awaitable[None]] | None = None,
) -> R:
    """Run a plan on an async connection; at each batch boundary (None), ``commit``
    (None: ignored, the caller commits)."""
    nothing = Answer([], 0, None)
    try:
        step = next(plan)
        while True:
            if step is None:
                if commit is not None:
                    await commit()
                step = plan.send(nothing)
            else:
                step = plan.send(await run(*step))
    except StopIteration as stop:
        done: R = stop.value
        return done


class MyOperations(MyBase):
    async def list_tasks(self, selection: TaskFilter) -> list[dict[str, Any]]:
        params = ops.list_params(selection, selection.limit or DEFAULT_LIMIT)
        return ops.listed(await self._rows(ops.OPQ.list_tasks, params))

    async def find(
        self, task_id: int | None = None, *, business_key: str | None = None
    ) -> dict[str, Any]:
        task_id, task = await found_task(
            task_id, business_key, self.list_tasks, self._rows, MQ.show_task, shown
        )
        audit = await self._rows(ops.OPQ.task_audit, {"id": task_id})
        task["audit"] = audit_rows(TASK_AUDIT_COLUMNS, audit)
        family = dict((await self._rows(ops.OPQ.family, {"id": task_id}))[0]._mapping)
        counts: dict[str, Any] = {k: int(v or 0) for k, v in family.items()}
        row = await self._rows(FQ.family_row, {"id": task_id})
        completed_at, callback_id = (
            (row[0].completed_at, row[0].callback_id) if row else (None, None)
        )
        completed = None if completed_at is None else jsonable(aware(completed_at))
        task["children"] = children_summary(
            {**counts, "completed_at": completed, "callback_id": callback_id}
        )
        task.update(graph(await self._rows(DQ.task_graph, {"id": task_id})))
        return task

    async def audit(
        self, limit: int = DEFAULT_LIMIT, before: int | None = None
    ) -> list[dict[str, Any]]:
        rows = await self._rows(ops.OPQ.list_audit, audit_params(limit, before))
        return audit_rows(AUDIT_COLUMNS, rows)

    async def act(
        self, action: Action, selection: TaskFilter, **options: Unpack[BatchedActOptions]
    ) -> Report:
        with translated():
            async with self.engine.connect() as conn:
                run = async_runner(conn, "ledgerq")
                return await act_in_batches(
                    conn,
                    action,
                    options,
                    lambda report, planned: ops.act(action, selection, report=report, **planned),
                    lambda plan, commit: adrive(plan, run, commit),
                )

    async def release_key(self, key: str, **options: Unpack[AuditOptions]) -> KeyRelease:
        with translated():
            async with self.engine.begin() as conn:
                return await adrive(keys.release(key, **options), async_runner(conn, "ledgerq"))
