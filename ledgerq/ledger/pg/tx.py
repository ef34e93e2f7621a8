"""The seam's transaction-scoped part on PostgreSQL: :class:`PgTx` and
:class:`PgAsyncTx` (:class:`~ledgerq.ledger.protocol.TxLedger`,
:class:`~ledgerq.ledger.protocol.AsyncTxLedger`).

Each is built on the caller's open transaction (a SQLAlchemy Session or
Connection, or a psycopg 3 connection: :mod:`ledgerq.ledger.executors`) and
never begins, commits or rolls back: what it writes commits or rolls back with
the caller's work. The worker's terminal status in a handler's transaction
(``finish`` with a ``succeeded`` verdict, fenced), the window's row locks and a
checkpoint written inside the window, and the producer's insert (``enqueue``,
``enqueue_many``: the de-duplication retries and the trigger's refusals of a
child translated to typed errors) run their named statements here, and
:mod:`ledgerq.ledger.producer`'s functions call it; the operator's plans
(``act``, ``release_key``, ``list_tasks``: I/O-free plans of named statements,
:mod:`ledgerq.ledger.actions` and :mod:`ledgerq.ledger.keys`) are driven here on
the caller's runner, and :mod:`ledgerq.ledger.operations`'s functions call it.
Races are
the statements' own: every write is a compare-and-set on (id, epoch, status),
and a lost fence returns nothing (the caller rolls its transaction back).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Unpack

from sqlalchemy import TextClause

from ledgerq.core.errors import (
    FamilyCompletedError,
    InvalidTaskError,
    LedgerqError,
    UnknownParentError,
)
from ledgerq.ledger.actions import Action, Report, plan, task_row
from ledgerq.ledger.after import After, SelfDependencyError, edges, refusal
from ledgerq.ledger.executors import (
    AsyncExecutor,
    AsyncRunner,
    Executor,
    Rows,
    Runner,
    async_runner,
    runner,
)
from ledgerq.ledger.filters import TaskFilter
from ledgerq.ledger.keys import KeyRelease, release_plan
from ledgerq.ledger.model import Fence, Outcome
from ledgerq.ledger.options import AuditOptions
from ledgerq.ledger.params import fence_params, outcome_params
from ledgerq.ledger.plans import adrive, drive, list_params
from ledgerq.ledger.protocol import Locked
from ledgerq.ledger.specs import TaskSpec, chunks, rows_document
from ledgerq.ledger.sql import AQ, OQ, XQ, Q
from ledgerq.ledger.task_result import TaskResult, children_params, task_result


def _succeeded(fences: Sequence[Fence], results: Sequence[str | None] | None) -> dict[str, Any]:
    values = results if results is not None else [None] * len(fences)
    return outcome_params([Outcome.succeeded(f, r) for f, r in zip(fences, values, strict=True)])


def _locked(rows: Rows) -> Locked:
    """``lock_running``'s rows (id, pid, began), by position (raw psycopg rows too)."""
    holder = (int(rows[0][1]), rows[0][2]) if rows else None
    return Locked({int(r[0]) for r in rows}, holder)


def _checkpoint(fence: Fence, state_json: str) -> dict[str, Any]:
    return {"id": fence[0], "epoch": fence[1], "checkpoint": state_json}


# -- the producer's insert ------------------------------------------------------------


def _lookup(params: dict[str, Any]) -> tuple[TextClause, TextClause, dict[str, Any]]:
    """The INSERT for one task, the SELECT that finds the duplicate it met, and that
    SELECT's parameters: the permanent key (once=True) or the live one (unique=True)."""
    if params["once"]:
        key = {"kind": params["kind"], "business_key": params["business_key"]}
        return Q.insert_task_once, Q.once_task_id, key
    return (
        Q.insert_task,
        Q.live_id_by_dedupe_key,
        {
            "kind": params["kind"],
            "dedupe_key": params["dedupe_key"],
        },
    )


def _batch_statement(chunk: Sequence[TaskSpec]) -> TextClause:
    """``insert_tasks``, or ``insert_tasks_once`` when a spec of the chunk has once=True
    (so batches without permanent keys pay nothing for them)."""
    return Q.insert_tasks_once if any(spec.once for spec in chunk) else Q.insert_tasks


# A live duplicate can finish between the INSERT that met it and the SELECT that
# looks it up; then the INSERT is simply tried again.
_UNIQUE_TRIES = 5


def _unique_race_lost(params: dict[str, Any]) -> LedgerqError:
    return LedgerqError(
        f"could not enqueue {params['kind']!r} with business_key {params['business_key']!r}: "
        "its duplicate kept disappearing between insert and lookup"
    )


#: The SQLSTATEs of the child-insert trigger (migration 0010) and of the
#: dependencies' function (0020), and what they mean.
_PARENT_REFUSALS: dict[str, type[InvalidTaskError]] = {
    "LQF01": UnknownParentError,
    "LQF02": FamilyCompletedError,
    "LQD01": SelfDependencyError,
}


def _refused(exc: Exception) -> None:
    """Raise the typed error for a child the ledger refused, if ``exc`` is that
    (SQLAlchemy wraps the driver's error in ``orig``; a raw psycopg connection
    raises it bare); else return."""
    error = getattr(exc, "orig", None) or exc
    kind = _PARENT_REFUSALS.get(str(getattr(error, "sqlstate", "")))
    if kind is not None:
        diag = getattr(error, "diag", None)
        message = getattr(diag, "message_primary", None) or str(error).splitlines()[0]
        raise kind(message) from exc


def _checked(run: Runner) -> Runner:
    def checked(statement: TextClause, params: Mapping[str, Any]) -> Rows:
        try:
            return run(statement, params)
        except Exception as exc:
            _refused(exc)
            raise

    return checked


def _achecked(run: AsyncRunner) -> AsyncRunner:
    async def checked(statement: TextClause, params: Mapping[str, Any]) -> Rows:
        try:
            return await run(statement, params)
        except Exception as exc:
            _refused(exc)
            raise

    return checked


def _after_ids(afters: Sequence[After | None]) -> list[int]:
    """Every id the tasks about to be inserted name in ``after`` (for ``after_check``)."""
    return sorted({dep for after in afters if after is not None for dep in after.ids})


def _results(rows: Rows) -> dict[int, Any]:
    """``dependency_results``' rows (id, status, result) as {id: result}."""
    return {int(r[0]): r[2] for r in rows}


def _after_refused(rows: Rows) -> None:
    error = refusal((int(r[0]), str(r[1])) for r in rows)
    if error is not None:
        raise error


class PgTx:
    """:class:`~ledgerq.ledger.protocol.TxLedger` on the caller's sync transaction;
    ``caller`` names the API function in a refusal of a wrong executor."""

    def __init__(self, executor: Executor, caller: str = "ledgerq") -> None:
        self._executor = executor
        self._run = runner(executor, caller)

    def enqueue(self, spec: TaskSpec) -> int:
        run = _checked(self._run)
        params = spec.params()
        after = spec.dependencies()
        if after is not None:  # checked (and its live tasks locked) before any write
            _after_refused(run(AQ.after_check, {"ids": list(after.ids)}))
        insert, lookup, key = _lookup(params)
        for _ in range(_UNIQUE_TRIES):
            rows = run(insert, params) or run(lookup, key)
            if rows:
                task_id = int(rows[0][0])
                if after is not None:
                    run(AQ.after_add, edges([task_id], [after]))
                return task_id
        raise _unique_race_lost(params)

    def enqueue_many(self, specs: Iterable[TaskSpec]) -> list[int]:
        run = _checked(self._run)
        ids: list[int] = []
        for chunk in chunks(specs):
            document = rows_document(chunk)  # validates every spec first
            afters = [spec.dependencies() for spec in chunk]
            if wanted := _after_ids(afters):
                _after_refused(run(AQ.after_check, {"ids": wanted}))
            rows = run(_batch_statement(chunk), {"rows": document})
            new = [int(r[0]) for r in rows]
            if wanted:  # after excludes unique/once: one id per spec, in order
                run(AQ.after_add, edges(new, afters))
            ids.extend(new)
        return ids

    def list_tasks(self, selection: TaskFilter) -> list[dict[str, Any]]:
        return [task_row(r) for r in self._run(OQ.list_tasks, list_params(selection))]

    def act(self, action: Action, selection: TaskFilter, **options: Unpack[AuditOptions]) -> Report:
        return drive(plan(action, selection, **options), self._run)

    def release_key(self, key: str, **options: Unpack[AuditOptions]) -> KeyRelease:
        return drive(release_plan(key, **options), self._run)

    def succeed(
        self, fences: Sequence[Fence], results: Sequence[str | None] | None = None
    ) -> set[int]:
        return {int(r[0]) for r in self._run(Q.finish, _succeeded(fences, results))}

    def lock_running(self, fences: Sequence[Fence]) -> Locked:
        return _locked(self._run(Q.lock_running, fence_params(fences)))

    def save_checkpoint(self, fence: Fence, state_json: str) -> bool:
        return bool(self._run(Q.save_checkpoint, _checkpoint(fence, state_json)))

    def dependency_results(self, task_id: int) -> dict[int, Any]:
        return _results(self._run(AQ.dependency_results, {"id": task_id}))

    def ended_results(self, ids: Sequence[int]) -> list[TaskResult]:
        return [task_result(r) for r in self._run(XQ.ended_results, {"ids": list(ids)})]

    def child_results(self, parent_id: int, after: int = 0, limit: int = 100) -> list[TaskResult]:
        params = children_params(parent_id, after, limit)
        return [task_result(r) for r in self._run(XQ.child_results, params)]

    def announce_waiting(self, registry: str, until_s: float) -> None:
        self._run(XQ.announce_waiting, {"registry": registry, "until_s": until_s})

    def withdraw_waiting(self, registry: str) -> None:
        self._run(XQ.withdraw_waiting, {"registry": registry})


class PgAsyncTx:
    """:class:`~ledgerq.ledger.protocol.AsyncTxLedger` on the caller's async transaction."""

    def __init__(self, executor: AsyncExecutor, caller: str = "ledgerq") -> None:
        self._executor = executor
        self._run = async_runner(executor, caller)

    async def enqueue(self, spec: TaskSpec) -> int:
        run = _achecked(self._run)
        params = spec.params()
        after = spec.dependencies()
        if after is not None:
            _after_refused(await run(AQ.after_check, {"ids": list(after.ids)}))
        insert, lookup, key = _lookup(params)
        for _ in range(_UNIQUE_TRIES):
            rows = await run(insert, params) or await run(lookup, key)
            if rows:
                task_id = int(rows[0][0])
                if after is not None:
                    await run(AQ.after_add, edges([task_id], [after]))
                return task_id
        raise _unique_race_lost(params)

    async def enqueue_many(self, specs: Iterable[TaskSpec]) -> list[int]:
        run = _achecked(self._run)
        ids: list[int] = []
        for chunk in chunks(specs):
            document = rows_document(chunk)  # validates every spec first
            afters = [spec.dependencies() for spec in chunk]
            if wanted := _after_ids(afters):
                _after_refused(await run(AQ.after_check, {"ids": wanted}))
            rows = await run(_batch_statement(chunk), {"rows": document})
            new = [int(r[0]) for r in rows]
            if wanted:
                await run(AQ.after_add, edges(new, afters))
            ids.extend(new)
        return ids

    async def list_tasks(self, selection: TaskFilter) -> list[dict[str, Any]]:
        rows = await self._run(OQ.list_tasks, list_params(selection))
        return [task_row(r) for r in rows]

    async def act(
        self, action: Action, selection: TaskFilter, **options: Unpack[AuditOptions]
    ) -> Report:
        return await adrive(plan(action, selection, **options), self._run)

    async def release_key(self, key: str, **options: Unpack[AuditOptions]) -> KeyRelease:
        return await adrive(release_plan(key, **options), self._run)

    async def succeed(
        self, fences: Sequence[Fence], results: Sequence[str | None] | None = None
    ) -> set[int]:
        return {int(r[0]) for r in await self._run(Q.finish, _succeeded(fences, results))}

    async def lock_running(self, fences: Sequence[Fence]) -> Locked:
        return _locked(await self._run(Q.lock_running, fence_params(fences)))

    async def save_checkpoint(self, fence: Fence, state_json: str) -> bool:
        return bool(await self._run(Q.save_checkpoint, _checkpoint(fence, state_json)))

    async def dependency_results(self, task_id: int) -> dict[int, Any]:
        return _results(await self._run(AQ.dependency_results, {"id": task_id}))

    async def ended_results(self, ids: Sequence[int]) -> list[TaskResult]:
        rows = await self._run(XQ.ended_results, {"ids": list(ids)})
        return [task_result(r) for r in rows]

    async def child_results(
        self, parent_id: int, after: int = 0, limit: int = 100
    ) -> list[TaskResult]:
        rows = await self._run(XQ.child_results, children_params(parent_id, after, limit))
        return [task_result(r) for r in rows]

    async def announce_waiting(self, registry: str, until_s: float) -> None:
        await self._run(XQ.announce_waiting, {"registry": registry, "until_s": until_s})

    async def withdraw_waiting(self, registry: str) -> None:
        await self._run(XQ.withdraw_waiting, {"registry": registry})


if TYPE_CHECKING:  # mypy checks both against the transaction-scoped protocols
    from ledgerq.ledger.protocol import AsyncTxLedger, TxLedger

    _sync: type[TxLedger] = PgTx
    _async: type[AsyncTxLedger] = PgAsyncTx
